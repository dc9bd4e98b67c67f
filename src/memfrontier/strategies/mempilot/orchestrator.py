"""The MemPilot orchestration loop: policy turns, tool execution, delegation and accounting.

One trajectory (MemPilot Eq. 1-4): the policy sees the question, the tools and the model cards
(permuted per rollout), then for at most ``max_rounds`` turns emits either tool calls (at most 2,
run concurrently as one latency stage, Eq. 18) or its final answer. ``retrieve_memory`` searches
the compressed bank; ``runtime_memory`` retrieves raw chunks and delegates them with the
instruction to the chosen pool route (the retrieval query is not forwarded; pixels only to vision
routes and only when asked). Every bad input — unreadable turn, bad JSON, unknown model,
over-long argument, ``<answer>`` in a query, too many calls, a delegate that fails, times out or
answers, a missing image file — becomes an observation for the policy and a counted ledger
event (``mempilot.*``), never an exception. A call identical to an earlier one of the same
trajectory is not run again (its result is already in the transcript; event
``mempilot.repeated_call``).

Accounting (MemPilot Eq. 14-19), one account: every call goes through a
:class:`~memfrontier.llm.metered.MeteredLLM` into the ledger. Policy turns (role ``policy``) are
priced as the pool's ``policy_price_as`` model (or the run's ``price_as``; with neither, as the
model running the policy) with ideal KV-prefix
reuse — the first turn pays for its whole prompt, later turns only for the newly appended
observation tokens (``cached_tokens`` holds the rest, free) — each its own latency stage; delegate
calls (role ``delegate``) share one ``ledger.parallel()`` stage per round. A trajectory's cost and
latency proxy are the ledger's view of its calls (``Trajectory.account``, a
:class:`~memfrontier.core.ledger.LedgerSpan`).

Hard budgets: a call is made only when its worst case (predicted prompt, output at its
``max_tokens``) fits what is left (:meth:`MeteredLLM.complete` with ``budget``). A delegate call
that does not fit becomes an ``error`` observation (``mempilot.delegate_over_budget``) and the
next turn may only answer; a policy turn that does not fit ends the trajectory
(``budget.call_refused.policy``); once a cap is reached, the next turn may only answer
(``budget.curation_stopped``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import random
from dataclasses import dataclass, field

from ...core.fit import shrink_to_fit
from ...core.ledger import (
    BudgetExceededError,
    Ledger,
    LedgerSpan,
    count_event,
    current_ledger,
    current_stage,
    use_ledger,
)
from ...core.threads import run_cpu
from ...core.types import Budget, Preference, Scope
from ...llm.base import LLMError, LLMTimeoutError, Message
from ...llm.metered import MeteredLLM
from ...llm.parsing import parse_json
from . import prompts
from .config import MemPilotConfig
from .pool import ModelPool
from .protocol import (
    CURATE,
    MAX_EVIDENCE,
    MAX_PARALLEL,
    RETRIEVE,
    TOOL_NAMES,
    Decision,
    ToolCall,
    decision_schema,
    parse_turn,
    render_decision,
    tool_specs,
)
from .views import DualView, image_part, question_image_caption

EVENT = "mempilot"


@dataclass
class PolicyTurn:
    """One policy generation: its full prompt and output tokens, the input charged under KV-prefix
    reuse (Eq. 14), USD and latency proxy (Eq. 15-16), its raw output and canonical tagged text."""

    prompt_tokens: int
    output_tokens: int
    charged_input_tokens: int
    usd: float
    proxy_s: float
    raw: str
    text: str


@dataclass
class CallRecord:
    """One tool call of a round: what was asked, what came back, and what it cost."""

    tool: str | None
    args: dict
    observation: str
    error: str | None = None
    route: str | None = None
    model: str | None = None
    record_ids: list[str] = field(default_factory=list)
    images_requested: int = 0
    images_sent: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    exact_usd: float | None = None
    delegated: bool = False  # an external call was attempted (counts toward N_ext, Eq. 22)
    repeated: bool = False  # identical to an earlier call of the trajectory: not run again
    evidence: str | None = None  # text handed to the answerer


@dataclass
class Trajectory:
    """A finished rollout: transcript, turns, tool stages, answer and the gate's inputs."""

    question: str
    messages: list[Message]
    turns: list[PolicyTurn] = field(default_factory=list)
    stages: list[list[CallRecord]] = field(default_factory=list)
    stage_turns: list[int] = field(default_factory=list)  # turn index that launched each stage
    prefix_ends: list[int] = field(default_factory=list)  # len(messages) of C_0 .. C_K (Alg. 1)
    answer: str | None = None
    tool_errors: int = 0
    stopped_by_budget: bool = False
    policy_error: str | None = None
    tool_order: list[str] = field(default_factory=list)
    model_order: list[str] = field(default_factory=list)
    seen_calls: set[str] = field(default_factory=set)  # identical calls are not run twice
    only_repeats: bool = False  # the last stage only repeated earlier calls
    account: LedgerSpan | None = field(default=None, repr=False)  # the ledger's view of its calls

    @property
    def segments(self) -> list[str]:
        return [t.text for t in self.turns]

    @property
    def calls(self) -> list[CallRecord]:
        return [c for s in self.stages for c in s]

    def evidence(self) -> list[tuple[str, list[str]]]:
        """Evidence blocks for the answerer (question + evidence only, App. A.4), de-duplicated."""
        seen, out = set(), []
        for c in self.calls:
            if c.evidence and c.evidence not in seen:
                seen.add(c.evidence)
                out.append((c.evidence, c.record_ids))
        return out


def _permute(items: list[str], rng: random.Random) -> list[str]:
    out = list(items)
    rng.shuffle(out)
    return out


def _error_event(err: str) -> str:
    for key, name in (
        ("not valid JSON", "bad_json"),
        ("unknown model", "unknown_model"),
        ("the limit is", "too_long"),
        ("answer> tag", "answer_in_query"),
        ("unknown tool", "unknown_tool"),
    ):
        if key in err:
            return f"{EVENT}.invalid_call.{name}"
    return f"{EVENT}.invalid_call.bad_args"


class Orchestrator:
    """Runs MemPilot trajectories for one store / pool / policy.

    Args:
        pool: the :class:`ModelPool` (routes, prices, clients).
        views: the :class:`DualView` (compressed bank + raw chunks).
        policy: the policy's metered client, made by ``env.model`` as standing for
            ``pool.profile.policy_price_as`` (None: priced as itself; see :meth:`MemPilot.orchestrator`).
        env: the :class:`~memfrontier.strategies.base.MemoryEnv` that makes the delegates' clients.
        preference: lambda shown to the policy (see :func:`prompts.preference_line`).
        budget: hard caps of the query stage (see the module docstring).
        config: the strategy's :class:`~.config.MemPilotConfig`; the orchestrator reads its turn
            options as they are (``max_rounds``, ``temperature``, ``constrained``,
            ``first_turn_tools``, ``answer_after_repeat``, ``policy_max_tokens``,
            ``max_observation_tokens``, ``delegate_timeout_s``: see the config's field docs);
            default: the config's defaults.
    """

    def __init__(
        self,
        *,
        pool: ModelPool,
        views: DualView,
        policy: MeteredLLM,
        env,
        preference: Preference | None = None,
        budget: Budget | None = None,
        config: MemPilotConfig | None = None,
    ):
        self.pool = pool
        self.views = views
        self.policy = policy
        self.env = env
        self.preference = preference or Preference()
        self.budget = budget or Budget()
        self.config = config if config is not None else MemPilotConfig()

    @property
    def delegate_timeout_s(self) -> float:
        """A delegate call's wall-clock limit (s): the config's, else the pool profile's."""
        own = self.config.delegate_timeout_s
        return own if own is not None else self.pool.profile.timeout_s

    # -- accounting ------------------------------------------------------------------------
    @staticmethod
    def spent(traj: Trajectory) -> tuple[float, float]:
        """(USD, latency proxy seconds) of the trajectory so far, read from the ledger: policy
        turns with KV-prefix reuse plus delegates (Eq. 14), segments plus the max of each parallel
        stage (Eq. 19). The answerer is not part of the trajectory."""
        if traj.account is None:
            return 0.0, 0.0
        return traj.account.usd(), traj.account.proxy_s()

    def _cap_reached(self) -> bool:
        """No further paid call fits the hard budget (the query stage's spend reached a cap)."""
        ledger = current_ledger()
        return ledger is not None and ledger.exhausted(self.budget)

    # -- the loop --------------------------------------------------------------------------
    def start(self, question: str, rollout_key: str = "0") -> Trajectory:
        """The initial prompt with tools and model cards permuted by sha256(question, rollout_key)."""
        seed = int.from_bytes(hashlib.sha256(f"{question}\x1f{rollout_key}".encode()).digest()[:8], "big")
        rng = random.Random(seed)
        tools, models = _permute(list(TOOL_NAMES), rng), _permute(self.pool.ids, rng)
        system = prompts.policy_system(
            tool_specs(models, tools),
            [self.pool.profile.card(m) for m in models],
            self.preference,
            question,
            text_mode=not self.config.constrained,
        )
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": prompts.policy_user(question)}]
        return Trajectory(
            question=question, messages=msgs, prefix_ends=[len(msgs)], tool_order=tools, model_order=models
        )

    async def run(self, question: str, scope: Scope, rollout_key: str = "0") -> Trajectory:
        """Run one trajectory for ``question`` over ``scope``'s memory. Never raises for model or
        tool trouble (see the module docstring); the policy's own failure ends the loop
        (``policy_error``, event ``llm_error.policy``)."""
        ledger = current_ledger()
        scratch = use_ledger(ledger := Ledger(), current_stage()) if ledger is None else contextlib.nullcontext()
        with scratch, ledger.span("mempilot.trajectory") as account:
            traj = self.start(question, rollout_key)
            traj.account = account
            await self._loop(traj, scope)
        return traj

    async def _loop(self, traj: Trajectory, scope: Scope) -> None:
        appended = 0  # environment tokens appended since the last generation (charged input, Eq. 14)
        for turn in range(self.config.max_rounds):
            final = turn == self.config.max_rounds - 1
            if turn > 0 and not traj.stopped_by_budget and self._cap_reached():
                traj.stopped_by_budget = True
                count_event("budget.curation_stopped")
            answer_only = final or traj.stopped_by_budget or (self.config.answer_after_repeat and traj.only_repeats)
            if answer_only and not self.config.constrained:
                msg = {"role": "user", "content": prompts.ANSWER_NOW}
                traj.messages.append(msg)
                appended += self.policy.count_tokens(msg["content"])
            decision = await self._policy_turn(traj, turn, answer_only, appended)
            if decision is None:
                break
            if decision.answer is not None and not decision.calls:
                traj.answer = decision.answer
                break
            if decision.error or not decision.calls:
                count_event(f"{EVENT}.unreadable_turn")
                obs = prompts.tool_response([f"error: {decision.error or 'no tool call'}; reply with one JSON action"])
            else:
                if decision.answer is not None:
                    count_event(f"{EVENT}.answer_with_tool_calls")
                records = await self._run_stage(decision.calls, traj, scope)
                traj.only_repeats = all(r.repeated for r in records)
                traj.stages.append(records)
                traj.stage_turns.append(turn)
                obs = prompts.tool_response([r.observation for r in records])
            traj.messages.append({"role": "user", "content": obs})
            appended = self.policy.count_tokens(obs)
            if decision.calls:
                traj.prefix_ends.append(len(traj.messages))
        if traj.answer is None and traj.policy_error is None:
            count_event(f"{EVENT}.no_answer")

    async def _policy_turn(self, traj: Trajectory, turn: int, answer_only: bool, appended: int) -> Decision | None:
        allow_answer = answer_only or not (turn == 0 and self.config.first_turn_tools)
        schema = (
            decision_schema(traj.model_order, traj.tool_order, allow_tools=not answer_only, allow_answer=allow_answer)
            if self.config.constrained
            else None
        )
        try:
            out = await self.policy.complete(
                traj.messages,
                role="policy",
                max_tokens=self.config.policy_max_tokens,
                temperature=self.config.temperature,
                json_schema=schema,
                budget=self.budget,
                new_input_tokens=None if turn == 0 else appended,
            )
        except BudgetExceededError:  # counted as budget.call_refused.policy
            traj.stopped_by_budget = True
            return None
        except LLMError as e:
            traj.policy_error = str(e)[:300]
            return None  # counted as llm_error.policy by the metered client
        call = traj.account.calls[-1]
        raw = out.text.strip()
        if self.config.constrained:
            parsed = parse_json(raw, expect="object")
            text = (render_decision(parsed.value) if parsed.ok else None) or raw
        else:
            text = raw
        traj.turns.append(
            PolicyTurn(
                call.input_tokens,
                call.output_tokens,
                call.input_tokens - call.cached_tokens,
                call.usd or 0.0,
                call.proxy_s,
                raw,
                text,
            )
        )
        traj.messages.append({"role": "assistant", "content": raw})
        return parse_turn(text, set(self.pool.ids))

    async def _run_stage(self, calls: list[ToolCall], traj: Trajectory, scope: Scope) -> list[CallRecord]:
        """Execute up to :data:`MAX_PARALLEL` calls concurrently as one latency stage (Eq. 18)."""
        extra = calls[MAX_PARALLEL:]
        with current_ledger().parallel():
            records = list(await asyncio.gather(*(self._execute(c, traj, scope) for c in calls[:MAX_PARALLEL])))
        for c in extra:
            count_event(f"{EVENT}.too_many_calls")
            records.append(
                CallRecord(
                    c.name,
                    c.args,
                    f"error: at most {MAX_PARALLEL} tool calls per turn; this {c.name or 'call'} was not run",
                    error="too many calls",
                )
            )
        return records

    async def _execute(self, call: ToolCall, traj: Trajectory, scope: Scope) -> CallRecord:
        if call.error:
            count_event(_error_event(call.error))
            return CallRecord(call.name, call.args, f"error: {call.error}", error=call.error)
        key = json.dumps([call.name, call.args], sort_keys=True)
        if key in traj.seen_calls:
            count_event(f"{EVENT}.repeated_call")
            return CallRecord(
                call.name,
                call.args,
                "(the same call was made before; its result is above: ask for something else or answer)",
                repeated=True,
            )
        traj.seen_calls.add(key)
        if call.clamped:
            count_event(f"{EVENT}.evidence_count_clamped")
        if call.name == RETRIEVE:
            return await self._retrieve(call, scope)
        rec = await self._curate(call, traj, scope)
        if rec.error:
            traj.tool_errors += 1
        return rec

    async def _retrieve(self, call: ToolCall, scope: Scope) -> CallRecord:
        k = min(call.args["evidence_count"], MAX_EVIDENCE)
        items = await run_cpu(self.views.retrieve, call.args["retrieval_query"], scope, k)
        text = "\n\n".join(it.text for it in items) if items else "(no memory found)"
        obs = self._cap(f"{RETRIEVE} results:\n{text}")
        rec_ids = list(dict.fromkeys(rid for it in items for rid in it.source_ids))
        return CallRecord(
            RETRIEVE, call.args, obs, record_ids=rec_ids, evidence="\n\n".join(it.text for it in items) or None
        )

    async def _curate(self, call: ToolCall, traj: Trajectory, scope: Scope) -> CallRecord:
        question = traj.question
        a = call.args
        route = a["model"]
        model = self.pool.profile.route(route).model
        raw = await run_cpu(self.views.raw, a["retrieval_query"], scope, a["evidence_count"])
        rec = CallRecord(CURATE, a, "", route=route, model=model, record_ids=raw.record_ids)
        notes: list[str] = []
        parts: list[dict] = []
        if a["include_images"]:
            rec.images_requested = len(raw.images)
            if not self.pool.is_vision(route):
                count_event(f"{EVENT}.images_to_text_model")
                notes.append(f"{route} cannot see images; it got the captions only")
            elif not self.pool.sees_pixels(route):
                count_event(f"{EVENT}.images_not_sent.text_only_backend")
                notes.append(f"{route} is served by a text-only stand-in here; it got the captions only")
            else:
                for im in raw.images:
                    part, why = image_part(im)
                    if part is None:
                        count_event(f"{EVENT}.image_missing")
                        notes.append(f"image {im.id}: {why}; caption only")
                    else:
                        parts.append(part)
        rec.images_sent = len(parts)
        qcap = question_image_caption(question)
        user = prompts.delegate_user(a["instruction"], raw.text, "", f"Question image: {qcap}\n" if qcap else "")
        content = [{"type": "text", "text": user}, *parts] if parts else user
        msgs = [{"role": "system", "content": prompts.DELEGATE_SYSTEM}, {"role": "user", "content": content}]
        llm = self.pool.llm(route, self.env)
        try:
            out = await asyncio.wait_for(
                llm.complete(
                    msgs,
                    role="delegate",
                    max_tokens=self.pool.profile.max_output_tokens,
                    temperature=0.0,
                    budget=self.budget,
                ),
                timeout=self.delegate_timeout_s,
            )
        except BudgetExceededError:  # not made (nothing spent); the next turn may only answer
            count_event(f"{EVENT}.delegate_over_budget")
            traj.stopped_by_budget = True
            rec.error = "over budget"
            rec.observation = f"error: {route} was not called: its cost could exceed the budget; answer now"
            return rec
        except (asyncio.TimeoutError, LLMTimeoutError):
            rec.delegated = True
            count_event(f"{EVENT}.delegate_timeout")
            rec.error = "delegate timed out"
            rec.observation = f"error: {route} timed out; try again, another model or retrieve_memory"
            return rec
        except LLMError as e:
            rec.delegated = True
            count_event(f"{EVENT}.delegate_error")
            rec.error = f"delegate failed: {str(e)[:200]}"
            rec.observation = f"error: {route} failed ({str(e)[:200]}); try another model or retrieve_memory"
            return rec
        rec.delegated = True
        rec.input_tokens, rec.output_tokens, rec.exact_usd = out.input_tokens, out.output_tokens, out.exact_usd
        findings = out.text.strip()
        if "<answer" in findings.lower() or "</answer" in findings.lower():
            count_event(f"{EVENT}.delegate_answer_tag")
            rec.error = "delegate output contained an answer tag"
            rec.observation = f"error: {route}'s output contained an <answer> tag and was discarded"
            return rec
        if not findings:
            count_event(f"{EVENT}.delegate_empty")
            findings = "(no findings)"
        else:
            rec.evidence = findings
        body = findings + ("\n" + "\n".join(f"note: {n}" for n in notes) if notes else "")
        rec.observation = self._cap(f"{CURATE} ({route}) findings:\n{body}")
        return rec

    def _cap(self, text: str) -> str:
        """Cut an observation to ``max_observation_tokens`` policy tokens (event ``mempilot.observation_truncated``)."""
        if self.policy.count_tokens(text) <= self.config.max_observation_tokens:
            return text
        count_event(f"{EVENT}.observation_truncated")
        return shrink_to_fit(text, self.config.max_observation_tokens, self.policy.count_tokens, 0.85) + " [...]"

    # -- probes (training only) ------------------------------------------------------------
    async def probe(self, traj: Trajectory, t: int, max_tokens: int = 48) -> str | None:
        """A greedy answer-only continuation of prefix C_t (MemPilot Eq. 12, Alg. 1 line 10): the
        transcript up to stage t's observations, no further curation. Not charged (it runs on a
        scratch ledger). None when the policy fails or gives no readable answer."""
        msgs = traj.messages[: traj.prefix_ends[t]]
        with use_ledger(Ledger()):
            try:
                if self.config.constrained:
                    out = await self.policy.complete(
                        msgs,
                        role="probe",
                        max_tokens=max_tokens,
                        temperature=0.0,
                        json_schema=decision_schema([], [], allow_tools=False),
                    )
                    res = parse_json(out.text, expect="object")
                    ans = res.value.get("answer") if res.ok else None
                else:
                    out = await self.policy.complete(
                        [*msgs, {"role": "assistant", "content": "<answer>"}],
                        role="probe",
                        max_tokens=max_tokens,
                        temperature=0.0,
                        stop=["</answer>"],
                    )
                    ans = out.text
            except LLMError:
                return None
        return ans.strip() if isinstance(ans, str) and ans.strip() else None


__all__ = ["CallRecord", "Orchestrator", "PolicyTurn", "Trajectory"]
