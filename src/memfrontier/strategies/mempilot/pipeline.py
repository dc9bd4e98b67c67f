"""``mempilot``: the Retrieve/Curate orchestrator over a priced model pool (MemPilot, arXiv 2610.06830).

``build`` makes the compressed bank of the scope (offline, query-agnostic, no model calls with the
offline compressor); ``context`` runs one greedy trajectory (:class:`Orchestrator`) and hands the
answerer the evidence the trajectory collected — the paper's decoupled answer model ("answer
replacement", App. A.4): the answerer reads the question and the evidence only, never the
policy's reasoning or its answer. With ``answer_mode="policy"`` the policy's own answer is put
first in the context instead (the shared answerer still writes the final line: every strategy in
this library ends with the same answerer call).
"""

from __future__ import annotations

import asyncio

from ...core.types import Budget, Context, Preference, Scope
from ...llm.base import ChatClient
from ...store.bank import MemoryBank
from ..base import BuildProgress, MemoryEnv, Query, StrategyBase, resolve_preference
from .accounting import format_gate
from .compress import Compressor, make_compressor
from .compressed_bank import build_from_store, import_jsonl, open_bank
from .config import ANSWER_MODES, MemPilotConfig
from .meta import MemPilotMeta
from .orchestrator import Orchestrator, Trajectory
from .pool import ModelPool, PoolProfile
from .prompts import PROMPT_VERSION
from .recipes import MEMPILOT_BANK, MEMPILOT_RAW


class MemPilot(StrategyBase):
    """The MemPilot strategy (implements :class:`~memfrontier.strategies.base.Strategy`).

    Args:
        config: the options (:class:`~.config.MemPilotConfig`): ``pool`` (profile name:
            ``local``, every route served by the embedded model, a labelled stand-in; ``table3``,
            MemPilot's OpenRouter pool; ``bench``, three embedded models of 270M / 0.5B / 1.5B
            parameters, each priced as itself; or a YAML path), ``preference`` (this
            configuration's; see :func:`~memfrontier.strategies.base.resolve_preference`),
            ``answer_mode`` (``decoupled``: the answerer reads question + evidence; ``policy``),
            ``bank`` (``compressed``, built by :meth:`build`, or ``imported`` from ``bank_file``,
            a JSONL, see :func:`~memfrontier.strategies.mempilot.compressed_bank.import_jsonl`),
            ``compressor`` (see :mod:`memfrontier.strategies.mempilot.compress`), ``adapter`` (a
            LoRA adapter directory saved by ``memfrontier train orchestrator``: the policy is then
            the packaged GGUF model in transformers with that adapter,
            :class:`memfrontier.strategies.mempilot.policy.HFPolicy`; default the memory-side
            model), the :class:`Orchestrator` options (``max_rounds``, ``temperature``,
            ``constrained``, ``first_turn_tools``, ``answer_after_repeat``, ``policy_max_tokens``,
            ``max_observation_tokens``, ``delegate_timeout_s``), ``rollout_key`` (mixed into the
            per-rollout permutation of tools and model cards) and ``budget`` (hard caps of the
            strategy, combined with the caller's, the tighter cap wins; no call whose worst case
            could cross it is made, and curation ends once a cap is reached, see :mod:`.orchestrator`).
        profile: a loaded :class:`PoolProfile` used instead of ``config.pool`` (runtime object).
        policy: an explicit policy ChatClient (overrides ``config.adapter``).
        route_backends: route id -> a ChatClient serving that route instead of its endpoint (a
            local server, a test double).

    A route's embedded model that is not installed raises
    :class:`~memfrontier.llm.local_models.ModelNotInstalledError` here.

    ``Context.meta``: a :class:`~.meta.MemPilotMeta` (its fields say what each holds).
    """

    name = "mempilot"
    prompt_version = PROMPT_VERSION
    config_class = MemPilotConfig
    meta_model = MemPilotMeta
    config: MemPilotConfig
    recipes = (MEMPILOT_BANK.name, MEMPILOT_RAW.name)  # RETRIEVE over the bank, CURATE's raw chunks

    def __init__(
        self,
        config: MemPilotConfig | None = None,
        *,
        profile: PoolProfile | None = None,
        policy: ChatClient | None = None,
        route_backends: dict[str, ChatClient] | None = None,
        compressor: Compressor | None = None,
    ):
        super().__init__(config)
        cfg = self.config
        self.profile = profile if profile is not None else PoolProfile.load(cfg.pool)
        self.profile.require_models()
        self.compressor: Compressor = compressor if compressor is not None else make_compressor(cfg.compressor)
        self.adapter = None if cfg.adapter is None else str(cfg.adapter)
        self._policy = policy
        self._pool: ModelPool | None = None
        self.route_backends = dict(route_backends or {})
        self._bank: MemoryBank | None = None

    # -- wiring ----------------------------------------------------------------------------
    def bank(self, env: MemoryEnv) -> MemoryBank:
        """The compressed bank M of ``env``'s store (``<store>/banks/mempilot.db``)."""
        if self._bank is None:
            self._bank = open_bank(env.store)
        return self._bank

    def pool(self, env: MemoryEnv) -> ModelPool:
        if self._pool is None:
            from ...llm.embedded import EmbeddedLLM

            client = env.llm.client
            self._pool = ModelPool(
                self.profile,
                env.llm.prices,
                backends=self.route_backends,
                embedded=client if isinstance(client, EmbeddedLLM) else None,
            )
        return self._pool

    def policy(self, env: MemoryEnv) -> ChatClient:
        if self._policy is None:
            if self.adapter is not None:
                from .policy import HFPolicy

                self._policy = HFPolicy.load(adapter=self.adapter)
            else:
                self._policy = env.llm.client
        return self._policy

    def orchestrator(self, env: MemoryEnv, preference: Preference, budget: Budget) -> Orchestrator:
        from .views import DualView

        # priced as the pool's policy_price_as, else as the model running it (a LoRA policy: its base)
        policy = env.model(self.policy(env), "policy", self.adapter, stands_for=self.profile.policy_price_as)
        return Orchestrator(
            pool=self.pool(env),
            views=DualView(env.store, self.bank(env), self.config.bank),
            policy=policy,
            env=env,
            preference=preference,
            budget=budget,
            config=self.config,
        )

    # -- Strategy protocol -----------------------------------------------------------------
    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """Compress every raw chunk of ``scope`` into the bank (idempotent), or, with ``bank_file``,
        import that file's items of ``scope`` as the imported bank."""
        if self.config.bank == "compressed":
            await asyncio.to_thread(build_from_store, self.bank(env), env.store, scope, self.compressor)
        elif self.config.bank_file is not None:
            await asyncio.to_thread(import_jsonl, self.bank(env), str(self.config.bank_file), scope, only_scope=True)

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether the scope's bank (``config.bank``) holds any item."""
        return self.bank(env).count(scope, self.config.bank) > 0

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        """One trajectory under the preference :func:`~memfrontier.strategies.base.resolve_preference`
        gives (the config's, else the caller's, else perf) and ``budget`` (the question's effective
        caps: the caller's made stricter by the config's, :func:`~memfrontier.strategies.base.effective_budget`)."""
        pref, source = resolve_preference(self.config.preference, preference)
        orch = self.orchestrator(env, pref, budget)
        traj = await orch.run(query.text, query.scope, self.config.rollout_key)
        return self.to_context(traj, orch, pref, source)

    def to_context(
        self, traj: Trajectory, orch: Orchestrator, preference: Preference, preference_source: str | None = None
    ) -> Context:
        """The answerer's context and the trajectory's report (:class:`~.meta.MemPilotMeta`)."""

        gate = format_gate(traj.segments, set(orch.pool.ids), tool_errors=traj.tool_errors)
        usd, secs = orch.spent(traj)
        blocks = traj.evidence()
        evidence_ids = list(dict.fromkeys(rid for _, ids in blocks for rid in ids))
        text = "\n\n".join(b for b, _ in blocks)
        if self.config.answer_mode == "policy" and traj.answer:
            text = f"Answer found by the memory agent: {traj.answer}\n\n{text}".strip()
        calls = traj.calls
        delegated = [c for c in calls if c.delegated]
        meta = MemPilotMeta(
            policy_answer=traj.answer,
            answer_mode=self.config.answer_mode,
            format_valid=gate.valid,
            gate_reasons=gate.reasons,
            rounds=len(traj.turns),
            retrieve_calls=sum(1 for c in calls if c.tool == "retrieve_memory" and c.error is None and not c.repeated),
            curate_calls=sum(1 for c in calls if c.tool == "runtime_memory" and c.error is None and not c.repeated),
            repeated_calls=sum(1 for c in calls if c.repeated),
            invalid_calls=sum(1 for c in calls if c.error and not c.delegated),
            delegate_calls=len(delegated),
            routes=[c.route for c in delegated],
            route_models={c.route: c.model for c in delegated},
            image_requests=sum(c.images_requested for c in calls),
            image_accesses=sum(c.images_sent for c in calls),
            tool_errors=traj.tool_errors,
            trajectory_usd=usd,
            trajectory_proxy_s=secs,
            stopped_by_budget=traj.stopped_by_budget,
            policy_error=traj.policy_error,
            preference=preference,
            preference_source=preference_source,
            pool=self.profile.name,
            tool_order=traj.tool_order,
            segments=traj.segments,
        )
        return Context(text=text, evidence_ids=evidence_ids, meta=meta.model_dump(mode="json"))


__all__ = ["ANSWER_MODES", "MemPilot"]
