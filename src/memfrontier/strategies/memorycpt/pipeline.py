"""``memorycpt``: episodic + semantic memory built offline (QAD), RRF rough selection and a
query-aware Fine Summary online (QAR), read by the frozen answerer (MemoryCPT Sec. 3, Eq. 10-17).

Online, for a query q:
1. RRF (k=60) over dense (MiniLM) and BM25 rankings, separately on the episodic and the semantic
   index (Eq. 10); the top ``episodic_k`` episodes (20) and top ``semantic_k`` facts (50) are
   concatenated into M_q^RRF.
2. Fine Summary: the summarizer (role ``summarizer``; base model, or base + LoRA-B) writes a short
   query-aware summary m_q from (q, M_q^RRF) (Eq. 12, 17); the answerer reads (q, m_q).

Ablations (MemoryCPT Table 3): ``no_qad`` builds with the untrained base model even when a
LoRA-A construction model is configured; ``no_qar`` hands the QA model a plain dense top-(k_e+k_s)
over the whole memory (no RRF, no summary); ``no_fs`` hands it M_q^RRF (no summary).
"""

from __future__ import annotations

import re

from ...core.fit import fit_lines
from ...core.ledger import BudgetExceededError, count_event, sum_usage_records
from ...core.render import human_date
from ...core.threads import run_cpu
from ...core.types import Budget, Context, Preference, Scope
from ...llm.base import ChatClient
from ...llm.metered import MeteredLLM
from ...retrieve.hybrid import hybrid_search
from ...store.bank import BankHit, MemoryBank
from ..base import BuildProgress, MemoryEnv, Query, StrategyBase
from .config import MemoryCPTConfig
from .construction.episodic import EPISODE, FACT, EpisodicBuilder
from .recipes import (
    MEMORYCPT_DENSE_EPISODIC,
    MEMORYCPT_DENSE_SEMANTIC,
    MEMORYCPT_EPISODIC,
    MEMORYCPT_SEMANTIC,
)

SUMMARY_MAX_TOKENS = 96

SUMMARY_SYSTEM = (
    "You compress memories for a question-answering model. From the memories below, write the few "
    "facts needed to answer the question, with names and dates, in at most 40 words. Write nothing else."
)


def summary_messages(question: str, candidates: str) -> list[dict]:
    """The summarizer's prompt (stable instruction first); also the GRPO policy's prompt (Eq. 11)."""
    return [
        {"role": "system", "content": SUMMARY_SYSTEM},
        {"role": "user", "content": f"Memories:\n{candidates}\n\nQuestion: {question}\n\nSummary:"},
    ]


def render_candidates(episodes: list[BankHit], facts: list[BankHit]) -> str:
    """M_q^RRF as text: episodes then facts, each line prefixed with its date in words."""
    lines = []
    for h in episodes:
        day = human_date(h.item.timestamp)
        lines.append(f"({day}) {h.item.render()}" if day else h.item.render())
    for h in facts:
        day = human_date(h.item.timestamp)
        lines.append(f"- {h.item.text} ({day})" if day else f"- {h.item.text}")
    return "\n".join(lines)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:80] or "model"


class MemoryCPT(StrategyBase):
    """The MemoryCPT strategy.

    Args:
        config: the options (:class:`~.config.MemoryCPTConfig`): ``episodic_k`` / ``semantic_k``
            (RRF depth per index, 20 / 50, MemoryCPT Sec. 4), ``ablation`` ("none", "no_qad",
            "no_qar" or "no_fs", see the module docstring), ``construction_llm`` (the QAD model, a
            :func:`~memfrontier.llm.make_llm` spec such as ``"hf:runs/qad/merged"``, the merged
            LoRA-A checkpoint; None = the environment's memory model), ``summarizer_llm`` (the
            Fine Summary model spec; None = the environment's memory model, or ``"hf"``, the
            packaged base through transformers, when ``summarizer_adapter`` is given),
            ``summarizer_adapter`` (a LoRA-B adapter directory from ``memfrontier train qar``),
            ``concurrency`` (sessions built at once).
        construction_llm / summarizer_llm: a client (MeteredLLM or ChatClient) serving that role
            instead of a spec (runtime objects, e.g. a test double). ValueError when the config
            also names that role's model.

    Spec-built models are made by :meth:`MemoryEnv.model`, priced like the environment's models:
    the same price book, ``price_as`` and ``allow_unpriced`` (a local checkpoint missing from the
    book raises UnpricedModelError unless the run allows unpriced calls, which are then flagged,
    never counted as $0; a LoRA adapter is priced as its base model).

    A hard :class:`Budget` is honoured: when the Fine Summary call's worst case (its prompt and
    ``SUMMARY_MAX_TOKENS`` of output) could cross it, no call is made and the answerer gets
    M_q^RRF unsummarized (``meta["summary_skipped"]``, event ``budget.call_refused.summarizer``).

    Memories live in the store directory's bank ``memorycpt-<construction model id>-<QAD prompt
    version>``, so memories built by different construction models or construction prompts never
    mix (a bank left by an older prompt version is not reused: its sessions are built again).
    """

    name = "memorycpt"
    config_class = MemoryCPTConfig
    config: MemoryCPTConfig

    def __init__(
        self,
        config: MemoryCPTConfig | None = None,
        *,
        construction_llm: MeteredLLM | ChatClient | None = None,
        summarizer_llm: MeteredLLM | ChatClient | None = None,
    ):
        super().__init__(config)
        cfg = self.config
        for role, given, spec in (
            ("construction_llm", construction_llm, cfg.construction_llm),
            ("summarizer_llm", summarizer_llm, cfg.summarizer_llm),
        ):
            if given is not None and spec is not None:
                raise ValueError(f"{role}: the config names {spec!r} and a client was given as well; give one")
        #: the model of each role: a client, a spec, or None (the env's memory-side model)
        self.construction_llm = construction_llm if construction_llm is not None else cfg.construction_llm
        self.summarizer_llm = (
            summarizer_llm
            if summarizer_llm is not None
            else cfg.summarizer_llm
            if cfg.summarizer_llm is not None or cfg.summarizer_adapter is None
            else "hf"
        )
        self.summarizer_adapter = None if cfg.summarizer_adapter is None else str(cfg.summarizer_adapter)
        self._banks: dict[tuple[str, str], MemoryBank] = {}
        self.last_build = None

    @property
    def prompt_version(self) -> str:
        return f"{EpisodicBuilder.prompt_version}+qar-v1+{self.config.ablation}"

    def _model(
        self,
        spec: str | MeteredLLM | ChatClient | None,
        env: MemoryEnv,
        adapter: str | None = None,
        role: str = "memorycpt",
    ) -> MeteredLLM:
        """The metered model of ``spec`` (None = the env's memory-side model), made by
        :meth:`MemoryEnv.model` (the run's pricing; a LoRA adapter priced as its base)."""
        return env.llm if spec is None else env.model(spec, role, adapter)

    def _construction_spec(self) -> str | MeteredLLM | ChatClient | None:
        return None if self.config.ablation == "no_qad" else self.construction_llm

    def construction_model(self, env: MemoryEnv) -> MeteredLLM:
        """The metered model that builds this configuration's memories (``env.llm`` when none is
        set or under the ``no_qad`` ablation). Raises UnpricedModelError for a model missing from
        the price book unless ``env.llm`` allows unpriced calls."""
        return self._model(self._construction_spec(), env)

    def _bank_key(self, env: MemoryEnv) -> tuple[str, str]:
        spec = self._construction_spec()
        model = spec if isinstance(spec, str) else self._model(spec, env).model_id
        return str(env.store.view_dir("banks")), model

    def bank(self, env: MemoryEnv) -> MemoryBank:
        """The bank that holds this configuration's memories in ``env.store``'s directory, named
        after the construction model (its spec when given as one, else its model id) and the QAD
        prompt version."""
        key = self._bank_key(env)
        if key not in self._banks:
            version = EpisodicBuilder.prompt_version.removeprefix("memorycpt-")
            self._banks[key] = MemoryBank.for_store(env.store, f"memorycpt-{_slug(key[1])}-{_slug(version)}")
        return self._banks[key]

    def use_bank(self, env: MemoryEnv, bank: MemoryBank) -> None:
        """Serve this configuration's memories in ``env.store`` from ``bank`` (a bank another
        MemoryCPT built, e.g. to serve it with a trained summarizer) instead of opening one."""
        self._banks[self._bank_key(env)] = bank

    async def build(self, env: MemoryEnv, scope: Scope, progress: BuildProgress | None = None) -> None:
        """QAD for ``scope``: episodes and facts from the scope's records (idempotent, resumable);
        ``progress(done, total, "sessions")`` after each session."""
        builder = EpisodicBuilder(self.construction_model(env), self.bank(env), concurrency=self.config.concurrency)
        on_session = None if progress is None else (lambda _sid, done, total: progress(done, total, "sessions"))
        self.last_build = await builder.build(scope, env.store.records(scope), on_session=on_session)

    def is_built(self, env: MemoryEnv, scope: Scope) -> bool:
        """Whether QAD ran for at least one session of ``scope`` (its memories may be few or none)."""
        return bool(self.bank(env).done_usage(scope))

    def construction_usage(self, env: MemoryEnv, scope: Scope) -> dict:
        """What building ``scope``'s memories cost over every run that built part of it (calls,
        tokens, USD, proxy seconds; summed over sessions, which are built one after another), with
        ``calls_by_role`` and the ``memorycpt.*`` ``events`` (rejections, fallbacks) summed over the
        sessions that recorded them, their ``fallbacks`` records (a session stored before fallbacks
        were records: one per ``memorycpt.fallback.ROLE`` event it counted), and
        ``sessions_without_events``: sessions built before
        sessions recorded their events (their failures are unknown here; the bank's traces keep them)."""
        done = [_with_fallback_records(u) for u in self.bank(env).done_usage(scope)]
        return {
            "calls_by_role": {},
            "events": {},
            "fallbacks": [],
            **sum_usage_records(done),
            "sessions_without_events": sum(1 for u in done if not isinstance(u.get("events"), dict)),
        }

    def candidates(self, query: str, scope: Scope, env: MemoryEnv) -> tuple[list[BankHit], list[BankHit]]:
        """M_q^RRF (Eq. 10, 17): top episodic and semantic items, or plain dense top-k for ``no_qar``."""
        bank = self.bank(env)
        episodic_k, semantic_k = self.config.episodic_k, self.config.semantic_k
        if self.config.ablation == "no_qar":
            k = episodic_k + semantic_k
            pooled = hybrid_search(bank, query, scope, MEMORYCPT_DENSE_EPISODIC, k) + hybrid_search(
                bank, query, scope, MEMORYCPT_DENSE_SEMANTIC, k
            )
            pooled.sort(key=lambda h: -h.score)
            pooled = pooled[:k]
            return [h for h in pooled if h.item.kind == EPISODE], [h for h in pooled if h.item.kind == FACT]
        return (
            hybrid_search(bank, query, scope, MEMORYCPT_EPISODIC, episodic_k) if episodic_k else [],
            hybrid_search(bank, query, scope, MEMORYCPT_SEMANTIC, semantic_k) if semantic_k else [],
        )

    @property
    def recipes(self) -> tuple[str, ...]:
        """Names of the search recipes this configuration runs (provenance)."""
        if self.config.ablation == "no_qar":
            return (MEMORYCPT_DENSE_EPISODIC.name, MEMORYCPT_DENSE_SEMANTIC.name)
        return tuple(
            r.name
            for r, k in ((MEMORYCPT_EPISODIC, self.config.episodic_k), (MEMORYCPT_SEMANTIC, self.config.semantic_k))
            if k
        )

    def _fit(self, llm: MeteredLLM, question: str, text: str) -> str:
        """Candidate lines kept from the top while the summarizer prompt fits its window."""
        room = llm.context_tokens - SUMMARY_MAX_TOKENS - llm.count_tokens(str(summary_messages(question, ""))) - 16
        lines = text.splitlines()
        kept, _ = fit_lines(lines, room, llm.count_tokens)
        if len(kept) < len(lines):
            count_event("memorycpt.candidates_truncated")
        return "\n".join(kept)

    async def context(self, query: Query, env: MemoryEnv, preference: Preference | None, budget: Budget) -> Context:
        self.bank(env)  # opened here, on the loop: concurrent questions share one bank
        # the searches embed the query and scan the bank (CPU-bound): off the event loop
        episodes, facts = await run_cpu(self.candidates, query.text, query.scope, env)
        evidence = list(dict.fromkeys(i for h in episodes + facts for i in h.item.source_ids))
        text = render_candidates(episodes, facts)
        meta = {"episodes": len(episodes), "facts": len(facts), "ablation": self.config.ablation}
        if self.config.ablation in ("no_qar", "no_fs") or not text:
            return Context(text=text, evidence_ids=evidence, meta=meta)
        llm = self._model(self.summarizer_llm, env, self.summarizer_adapter, role="summarizer")
        msgs = summary_messages(query.text, self._fit(llm, query.text, text))
        try:
            out = await llm.complete(
                msgs, role="summarizer", max_tokens=SUMMARY_MAX_TOKENS, temperature=0.0, budget=budget
            )
        except BudgetExceededError:  # counted by the metered client; M_q^RRF goes to the answerer as is
            meta["summary_skipped"] = True
            return Context(text=text, evidence_ids=evidence, meta=meta)
        summary = out.text.strip()
        meta["summary_tokens"] = out.output_tokens
        if not summary:
            count_event("empty_output.summarizer")
        return Context(text=summary, evidence_ids=evidence, meta=meta)


#: The event a session stored before fallbacks were typed records counted for each fallback of ROLE.
_LEGACY_FALLBACK = "memorycpt.fallback."


def _with_fallback_records(usage: dict) -> dict:
    """A session's stored usage with its ``fallbacks`` records: as stored, or, for a session stored
    before they were records, one step-0 record per ``memorycpt.fallback.ROLE`` event (reason
    unknown); a session without events is left as it is (counted in ``sessions_without_events``)."""
    events = usage.get("events")
    if isinstance(usage.get("fallbacks"), list) or not isinstance(events, dict):
        return usage
    records = [
        {
            "role": ev[len(_LEGACY_FALLBACK) :],
            "module": ev[len(_LEGACY_FALLBACK) :],
            "tier": None,
            "reason": None,
            "step": 0,
        }
        for ev, n in events.items()
        if ev.startswith(_LEGACY_FALLBACK)
        for _ in range(int(n))
    ]
    return {**usage, "fallbacks": records}
