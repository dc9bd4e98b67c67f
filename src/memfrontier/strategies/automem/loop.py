"""The AutoMEM agent: the plan -> execute -> judge loop and the single-pass variant (AutoMEM,
arXiv 2606.04315, Algorithm 1 and Sec. 5 "Architectural single-pass cap").

Loop (``run``), for k = 1..K_max:

* **plan** - one ``planner`` call returns exactly one action (JSON, :mod:`.actions`);
* **execute** - the toolbox runs it (no model, except ``dump``); ``trace <- trace || (a_k, o_k)``;
* **judge** - one ``judge`` call: ``{"sufficient", "missing"}``; sufficient ends the loop,
  otherwise ``missing`` is the hint the next plan sees (it is in the trace).

The final **answer** is the caller's one call over the trace: the strategy returns the trace as
the context and the shared answerer (role ``answerer``) reads it.

The judge is asked after every step, as Algorithm 1 does (K_max = 3 and a never-sufficient
question: 3 planner + 3 judge calls, then the answer). ``judge_every_round=False`` is our lean
variant, a departure from the paper that the frontier labels: the judge is then not asked after
step K_max (its verdict could not change anything) nor after a step whose observation is an error
(the trace gained no evidence, so the previous "insufficient" stands). An action identical to an
earlier one is not re-run (observation ``repeated_action``). Planner output that is not one valid
action, an unknown tool and every tool error become observations the next plan sees, and are
counted. A judge reply that does not parse counts as insufficient (``parse_error.judge``).

Single pass (``run_single_pass``): K_max = 1, no dump, no judge: one planner call emits up to
four actions, which run concurrently, and the answerer reads their results.

Budget: before each call the agent predicts its USD (MemoryCPT Eq. 4, output at its cap) and
latency proxy (MemPilot Eq. 15) and stops the loop (event ``budget.call_refused.<role>``) when the
question's query-stage spend would pass the caller's ``max_usd`` / ``max_proxy_s``.
"""

from __future__ import annotations

import asyncio

from pydantic import BaseModel, Field

from ...core.ledger import count_event
from ...core.types import Budget
from ...llm.metered import MeteredLLM
from ...llm.parsing import parse_or_count
from . import prompts
from .actions import (
    ACTION_SCHEMA,
    MAX_PARALLEL_ACTIONS,
    PARALLEL_SCHEMA,
    SINGLE_PASS_TOOLS,
    TOOLS,
    Action,
    parse_action,
)
from .observation import Observation, TraceStep, Verdict, render_trace
from .prefix import CallPrefix, PrefixMeter
from .tools import Toolbox, count_events

#: Observation characters of one step shown to the planner / judge (the full text goes to the answer).
TRACE_OBS_CHARS = 1500
#: Observation characters kept per step in the result meta (the per-question JSONL trace).
META_OBS_CHARS = 400


class AgentResult(BaseModel):
    """The trace of one question and how the run ended (``sufficient``, ``k_max``, ``budget``,
    ``single_pass``), with each call's prompt / stable-prefix accounting."""

    steps: list[TraceStep] = Field(default_factory=list)
    calls: list[CallPrefix] = Field(default_factory=list)
    stopped: str = ""
    single_pass: bool = False
    stable_prefix_fraction: float | None = None

    def evidence_ids(self) -> list[str]:
        """Record ids cited by the successful observations, in step order, without repeats."""
        out: list[str] = []
        for s in self.steps:
            if s.observation.ok:
                out.extend(i for i in s.observation.record_ids if i not in out)
        return out

    def context_text(self) -> str:
        """What the answerer reads: the successful steps (action label + full observation)."""
        return render_trace([s for s in self.steps if s.observation.ok], verdicts=False)

    def meta(self) -> dict:
        """The per-question trace for the result JSONL: actions, truncated observations, verdicts."""
        trace = []
        for s in self.steps:
            o = s.observation
            row = {
                "step": s.index,
                "action": s.action,
                "ok": o.ok,
                "error": o.error,
                "observation": o.text[:META_OBS_CHARS] + (" ..." if len(o.text) > META_OBS_CHARS else ""),
                "record_ids": o.record_ids[:20],
            }
            if s.verdict is not None:
                row["judge"] = s.verdict.model_dump()
            trace.append(row)
        return {
            "single_pass": self.single_pass,
            "stopped": self.stopped,
            "steps": len(self.steps),
            "trace": trace,
            "calls": [c.model_dump() for c in self.calls],
            "stable_prefix_fraction": self.stable_prefix_fraction,
        }


def parse_verdict(text: str) -> Verdict:
    """The judge's reply as a :class:`Verdict`; anything that is not an object with a boolean
    (or "true"/"false") ``sufficient`` is ``Verdict(sufficient=False, parsed=False)``, counted as
    ``parse_error.judge``."""
    res = parse_or_count(text, "parse_error.judge", expect="object")
    suff = res.value.get("sufficient") if res.ok else None
    if isinstance(suff, str) and suff.strip().lower() in ("true", "false"):
        suff = suff.strip().lower() == "true"
    if not isinstance(suff, bool):
        if res.ok:  # parsed, but not the expected shape
            count_event("parse_error.judge")
        return Verdict(sufficient=False, missing="", parsed=False)
    missing = res.value.get("missing")
    return Verdict(sufficient=suff, missing=str(missing or "")[: prompts.JUDGE_MISSING_CHARS])


class AutoMemAgent:
    """Algorithm 1 over one question's :class:`Toolbox`.

    Args:
        toolbox: the tools bound to the question's scope.
        planner / judge: metered models of the two roles (may be different models).
        context: prompt block 2 (catalog + schema hint, :func:`prompts.context_block`).
        k_max: the step budget K_max (>= 1).
        budget: the caller's hard caps (USD, proxy seconds) for the query stage.
        judge_every_round: Algorithm 1's judge after every step (default); False skips the judge
            after step K_max and after an error observation (see the module doc).
    """

    def __init__(
        self,
        toolbox: Toolbox,
        *,
        planner: MeteredLLM,
        judge: MeteredLLM,
        context: str,
        k_max: int = 3,
        budget: Budget | None = None,
        judge_every_round: bool = True,
    ):
        if k_max < 1:
            raise ValueError(f"k_max must be >= 1, got {k_max}")
        self.toolbox = toolbox
        self.planner = planner
        self.judge = judge
        self.context = context
        self.k_max = k_max
        self.budget = budget or Budget()
        self.judge_every_round = judge_every_round

    # --- helpers ---------------------------------------------------------------------------
    async def _call(
        self, meter: PrefixMeter, llm: MeteredLLM, role: str, messages: list[dict], *, max_tokens: int, schema: dict
    ) -> str | None:
        """One metered call, or None when its worst case (prompt, ``max_tokens`` of output) could
        cross the hard budget (counted ``budget.call_refused.<role>``, as the metered model counts a
        refused call; no call made)."""
        rec = meter.measure(role, messages, llm)
        if llm.over_budget(messages, max_tokens, self.budget) is not None:
            meter.calls.pop()
            count_event(f"budget.call_refused.{role}")
            return None
        out = await llm.complete(messages, role=role, max_tokens=max_tokens, temperature=0.0, json_schema=schema)
        rec.cached_tokens = out.cached_tokens
        return out.text

    def messages(self, question: str, question_date: str | None, steps: list[TraceStep], task: str) -> list[dict]:
        """The messages of one planner or judge call: the stable context block, then the question
        with the trace so far, then ``task``."""
        trace = render_trace(steps, max_obs_chars=TRACE_OBS_CHARS)
        return prompts.agent_messages(self.context, prompts.question_block(question, question_date, trace), task)

    @staticmethod
    def _planner_error(text: str) -> Observation:
        obs = Observation.failure(
            "planner", "bad_action", f"the planner output was not one JSON action: {text[:120]!r}"
        )
        count_events(obs)
        return obs

    # --- Algorithm 1 -----------------------------------------------------------------------
    async def run(self, question: str, question_date: str | None = None) -> AgentResult:
        """The plan -> execute -> judge loop; see the module doc."""
        meter, steps = PrefixMeter(), []
        result = AgentResult(single_pass=False)
        for k in range(1, self.k_max + 1):
            msgs = self.messages(question, question_date, steps, prompts.planner_task(question))
            text = await self._call(
                meter, self.planner, "planner", msgs, max_tokens=prompts.PLANNER_MAX_TOKENS, schema=ACTION_SCHEMA
            )
            if text is None:
                result.stopped = "budget"
                break
            res = parse_or_count(text, "parse_error.planner", expect="object")
            if not res.ok:
                action, obs = {"tool": "(invalid)"}, self._planner_error(text)
            else:
                parsed = parse_action(res.value, TOOLS)
                if isinstance(parsed, Observation):
                    count_events(parsed)
                    raw = res.value.get("action") if isinstance(res.value.get("action"), dict) else res.value
                    action, obs = {"tool": str(raw.get("tool", "(invalid)"))[:40]}, parsed
                else:
                    action = parsed.to_dict()
                    earlier = next((s.index for s in steps if s.action == action), None)
                    if earlier is not None:
                        obs = Observation.failure(
                            "planner",
                            "repeated_action",
                            f"this action is already step {earlier} of the trace; choose another",
                        )
                        count_events(obs)
                    else:
                        obs = await self.toolbox.execute(parsed, question)
            step = TraceStep(index=k, action=action, observation=obs)
            steps.append(step)
            if not self.judge_every_round:
                if k == self.k_max:
                    result.stopped = "k_max"
                    break
                if not obs.ok:
                    continue  # no new evidence: the previous verdict stands, re-plan
            vmsgs = self.messages(question, question_date, steps, prompts.JUDGE_TASK)
            vtext = await self._call(
                meter, self.judge, "judge", vmsgs, max_tokens=prompts.JUDGE_MAX_TOKENS, schema=prompts.JUDGE_SCHEMA
            )
            if vtext is None:
                result.stopped = "budget"
                break
            step.verdict = parse_verdict(vtext)
            if step.verdict.sufficient:
                result.stopped = "sufficient"
                break
            if k == self.k_max:
                result.stopped = "k_max"
        result.steps, result.calls = steps, meter.calls
        result.stable_prefix_fraction = meter.fraction()
        return result

    async def run_single_pass(self, question: str, question_date: str | None = None) -> AgentResult:
        """K_max = 1, no dump, no judge: one plan of up to four actions run concurrently."""
        meter = PrefixMeter()
        result = AgentResult(single_pass=True, stopped="single_pass")
        msgs = self.messages(question, question_date, [], prompts.single_pass_task(question))
        text = await self._call(
            meter, self.planner, "planner", msgs, max_tokens=prompts.SINGLE_PASS_MAX_TOKENS, schema=PARALLEL_SCHEMA
        )
        if text is None:
            result.stopped = "budget"
            result.calls = meter.calls
            return result
        res = parse_or_count(text, "parse_error.planner", expect="object")
        items = (res.value.get("actions") if "actions" in res.value else [res.value]) if res.ok else None
        steps: list[TraceStep] = []
        if not isinstance(items, list) or not items:
            steps.append(TraceStep(index=1, action={"tool": "(invalid)"}, observation=self._planner_error(text)))
        else:
            planned: list[tuple[dict, Action | Observation]] = []
            seen: list[dict] = []
            for item in items[:MAX_PARALLEL_ACTIONS]:
                parsed = parse_action(item, SINGLE_PASS_TOOLS)
                if isinstance(parsed, Observation):
                    count_events(parsed)
                    tool = item.get("tool", "(invalid)") if isinstance(item, dict) else "(invalid)"
                    planned.append(({"tool": str(tool)[:40]}, parsed))
                elif parsed.to_dict() not in seen:
                    seen.append(parsed.to_dict())
                    planned.append((parsed.to_dict(), parsed))
            observations = await asyncio.gather(
                *(self.toolbox.execute(p, question) if isinstance(p, Action) else _done(p) for _, p in planned)
            )
            steps = [
                TraceStep(index=i, action=a, observation=o)
                for i, ((a, _), o) in enumerate(zip(planned, observations, strict=True), 1)
            ]
        result.steps, result.calls = steps, meter.calls
        result.stable_prefix_fraction = meter.fraction()
        return result


async def _done(obs: Observation) -> Observation:
    return obs
