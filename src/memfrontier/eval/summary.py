"""A run's ``summary.json``: per-category metrics, amortized cost, fallback shares, choices and
provenance (:func:`build_summary`)."""

from __future__ import annotations

import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ..core.cost import amortization_table, qpc
from ..core.provenance import provenance, sha256_file
from ..core.types import Conversation
from .config import EvalConfig
from .fallbacks import fallback_report
from .metrics import choice_ratios, overall_metrics, summarize
from .tasks import prompt_versions

AMORTIZATION_NS = (1, 10, 50, 100, 314, math.inf)
#: Context.meta keys holding a ``{component: choice}`` dict (BudgetMem: module -> tier chosen /
#: used; auto: ``configuration`` -> the label it routed to); the summary reports the share of each
#: choice per component under ``choices``.
CHOICE_KEYS = ("tiers", "tiers_used", "route")


def undated_sessions(convs: list[Conversation]) -> list[str]:
    """The sessions of ``convs`` whose turns have no timestamp (no date given for them in the
    data file), in order, when some other session has one (a dataset without dates, as HotpotQA, has
    none to miss): temporal questions about them cannot be dated."""
    dated, undated = set(), {}  # a dict keeps the sessions' order
    for c in convs:
        for r in c.records:
            if r.timestamp is not None:
                dated.add(r.session_id)
            else:
                undated.setdefault(r.session_id)
    return [s for s in undated if s not in dated] if dated else []


def build_summary(
    cfg: EvalConfig,
    rows: list[dict],
    construction: dict,
    data_file: Path,
    mem,
    strategy,
    structured_output: dict[str, str] | None = None,
    undated: Sequence[str] = (),
    skipped: Sequence[str] = (),
) -> dict:
    """Per-category metrics plus amortized cost C(n) (MemoryCPT Eq. 3 / Eq. 20) and provenance.

    ``amortized_usd_per_question``: USD per question, ``{str(n): C(n)}`` for n in
    :data:`AMORTIZATION_NS` and n = the questions this run answered, where C(n) = C_construction / n +
    C_online (the mean online cost of the scored questions, those F1 is over) spreads the construction
    of *every* conversation built for the run over n questions in all (the paper's store: App. C's
    n = 314 is LoCoMo's whole test split), the frontier's convention; None when a call was unpriced. ``qpc_amortized``: overall F1 / (C(n_run) x 1e4) (MemoryCPT Eq. 5-6;
    the metrics' ``qpc`` is online-only). ``structured_output``: the endpoints' structured-output
    modes (default: this process's). ``undated``: :func:`undated_sessions` of the run's
    conversations (``undated_sessions`` in the summary). ``skipped``: the ids of the empty turns the
    loader skipped (``empty_turns_skipped``: their count; ``empty_turns_skipped_ids``: the ids)."""
    groups = summarize(rows, by="category", dataset=cfg.dataset)
    n = len(rows)
    scored = overall_metrics(groups)  # the questions F1 is over (LoCoMo: categories 1-4), as the frontier's row
    online = scored.get("usd_per_question") or 0.0
    constr_usd = sum(c["usd"] for c in construction.values())
    unpriced = any(r.get("unpriced_calls") for r in rows) or any(c.get("unpriced_calls") for c in construction.values())
    # a cost with unpriced calls in it is unknown, not their priced part
    amortized = None if unpriced else amortization_table(constr_usd, online, {*AMORTIZATION_NS, n} - {0})
    f1_all = scored.get("f1")
    c_run = amortized.get(str(n)) if amortized and n else None
    return {
        "config": cfg.model_dump(mode="json"),
        "questions": n,
        "metrics": groups,
        "construction": construction,
        "amortized_usd_per_question": amortized,
        "qpc_amortized": qpc(f1_all, c_run) if f1_all is not None and c_run else None,
        "judge_errors": sum(1 for r in rows if r.get("judge_error")),
        "undated_sessions": list(undated),
        "empty_turns_skipped": len(skipped),
        "empty_turns_skipped_ids": list(skipped),
        "events": _sum_events(rows),
        "fallbacks": fallback_report(rows, cfg.fallback_threshold, construction=construction.values()),
        **_choices(rows),
        "provenance": provenance(
            data_file=str(data_file),
            data_sha256=sha256_file(data_file),
            seed=cfg.seed,
            scorer=cfg.scorer,
            answer_model=mem.env.answer_llm.model_id,
            memory_model=mem.env.llm.model_id,
            embedding_model=mem.store.embedder.model_id,
            judge_model=(cfg.judge_llm or mem.env.answer_llm.model_id) if cfg.judge else None,
            prompt_versions=prompt_versions(
                strategy, cfg.dataset, cfg.judge, any(r.get("question_date") is not None for r in rows)
            ),
            price_book_version=mem.env.answer_llm.prices.version,
            priced_as=cfg.price_as,
            structured_output=structured_output_modes() if structured_output is None else structured_output,
            **_config_provenance(strategy),
            recipes=list(strategy.recipes),
        ),
    }


def structured_output_modes() -> dict[str, str]:
    """The structured-output mode each OpenAI-compatible endpoint settled on (``{}`` when none
    was used; the SDK is not imported just to say so)."""
    mod = sys.modules.get("memfrontier.llm.openai_compat")
    return mod.structured_output_modes() if mod is not None else {}


def _config_provenance(strategy) -> dict:
    """``strategy_config`` (every option, defaults included) and ``strategy_config_hash``."""
    cfg = getattr(strategy, "config", None)
    if cfg is None:
        return {}
    return {"strategy_config": cfg.as_json(), "strategy_config_hash": cfg.config_hash()}


def _choices(rows: list[dict]) -> dict:
    """``{"choices": {key: {component: {choice: ratio}}}}`` over the rows whose strategy meta has a
    :data:`CHOICE_KEYS` dict; ``{}`` when none has (the summary then has no ``choices``)."""
    out = {}
    for key in CHOICE_KEYS:
        dicts = [m[key] for r in rows if isinstance(m := r.get("strategy_meta"), dict) and isinstance(m.get(key), dict)]
        if any(dicts):
            out[key] = choice_ratios(dicts)
    return {"choices": out} if out else {}


def _sum_events(rows: list[dict]) -> dict[str, int]:
    total: dict[str, int] = defaultdict(int)
    for r in rows:
        for k, v in r.get("usage", {}).get("events", {}).items():
            total[k] += v
    return dict(total)
