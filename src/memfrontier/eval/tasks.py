"""The two units of work of an evaluation run, as every executor runs them: build one
conversation's memory (:func:`construct`) and answer one question (:func:`answer_question`), with
the run's memory, judge and strategy opened by :func:`open_run`. The local executor runs them in
this process, the Ray workers each in theirs (:mod:`memfrontier.eval.executor`,
:mod:`memfrontier.eval.ray_pool`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from ..answerer import DATED_PROMPT_VERSION, PROMPT_VERSION
from ..core.ledger import Ledger, use_ledger
from ..core.threads import run_cpu
from ..core.types import Conversation, Question, Scope
from ..strategies import get_strategy
from .config import EvalConfig
from .fallbacks import FallbackError, doomed_build, fallback_report, unrecorded_units
from .judge import judge_prompt_version, make_judge
from .metrics import DEFAULT_SCORER, Scorer, evidence_recall, exact_match, locomo_f1, token_f1


def score_f1(dataset: str, prediction: str, q: Question, scorer: Scorer = DEFAULT_SCORER) -> float:
    """LoCoMo: the official per-category F1 (category 5 as abstention); elsewhere plain token F1;
    words read by ``scorer`` (:func:`~memfrontier.eval.metrics.normalize_answer`)."""
    if dataset == "locomo":
        return locomo_f1(prediction, q.answer or "", int(q.category), scorer)
    return token_f1(prediction, q.answer or "", scorer)


def open_run(cfg: EvalConfig, open_memory=None):
    """The run's ``(memory, judge or None, strategy)``, as every worker of the run opens them.
    Opening loads no model (models load on their first call)."""
    from ..api import AsyncMemory

    mem = (open_memory or AsyncMemory.open)(
        cfg.store or Path(cfg.out) / "store",
        llm=cfg.llm,
        base_url=cfg.base_url,
        price_book=cfg.price_book,
        allow_unpriced=cfg.allow_unpriced,
        price_as=cfg.price_as,
    )
    judge = make_judge(mem, cfg.judge_llm, cfg.base_url, dataset=cfg.dataset) if cfg.judge else None
    return mem, judge, get_strategy(cfg.strategy, cfg.strategy_config())


async def construct(
    mem,
    strategy,
    conv: Conversation,
    progress=None,
    *,
    stop_above: float | None = None,
    settled: Sequence[dict] = (),
    turns_left: int = 0,
) -> dict:
    """Ingest one conversation (scope ``user_id = conversation id``; one store ``add``, so one
    transaction) and build ``strategy``'s view of it; returns the summary's ``construction`` entry
    for it (records added, chunks embedded, construction usage in tokens/USD/seconds, events,
    calls by role, first call errors).

    ``progress(event, **info)`` (optional, :func:`~memfrontier.eval.runner.run_eval`'s callback) gets ``embed`` events while
    the records are embedded (``conversation``, ``sessions``, ``done`` and ``total``: records
    embedded so far / to embed, each once; from the ingest's worker thread; none when
    every record is already stored), then ``build`` (``conversation``) before the strategy's
    offline construction, then a ``construct`` event after each of its steps (``conversation``,
    ``done``, ``total``, ``unit``: :data:`~memfrontier.strategies.base.BuildProgress`'s; ``calls``
    and ``failed`` so far: :func:`build_counts`; none for a strategy whose construction has no
    steps). Ends with one search of the scope, which loads the embedder and the scope's indexes.

    ``stop_above``: a fallback threshold; when the run's construction is bound to end above it
    (:func:`~memfrontier.eval.fallbacks.doomed_build`, over ``settled``, the construction entries of
    the conversations this run built before this one, and ``turns_left``, the turns of those it has
    still to build), the build stops after its current step with
    :class:`~memfrontier.eval.fallbacks.FallbackError` (no summary), keeping what it built (a view
    that stores its units, as MemoryCPT's bank does, resumes from there). Not judged when some unit's
    calls or failures were not recorded (built before they were kept)."""
    scope = Scope(user_id=conv.id)
    report = None
    if progress is not None:
        sessions = len({r.session_id for r in conv.records})

        def report(done: int, total: int) -> None:
            progress("embed", conversation=conv.id, sessions=sessions, done=done, total=total)

    added = await run_cpu(mem.store.add, conv.records, progress=report)
    ledger = Ledger()
    step = None
    if progress is not None:
        progress("build", conversation=conv.id)
    stored = getattr(strategy, "construction_usage", None)
    # what earlier runs recorded of the view's calls and failures (MemoryCPT's bank keeps them per session)
    before = stored(mem.env, scope) if stored is not None else {}
    prior = [*settled, before]
    # a unit built before its calls and failures were kept cannot be judged: no early stop then
    judged = stop_above is not None and not unrecorded_units(prior)
    turns_built = sum(int(e.get("records") or 0) for e in settled) + len(conv.records)
    future = 1.0 + turns_left / max(turns_built, 1)
    if progress is not None or judged:
        made = {"calls": 0, "units": 0}  # this run's calls so far and the units that made them

        def step(done: int, total: int, unit: str) -> None:
            counts = _calls_and_failures(ledger)
            calls = sum(counts["calls_by_role"].values())
            if calls > made["calls"]:  # a unit built by this run (one built earlier makes no call)
                made.update(calls=calls, units=made["units"] + 1)
            if progress is not None:
                progress("construct", conversation=conv.id, done=done, total=total, unit=unit, **build_counts(counts))
            if not judged or not made["units"] or done >= total:
                return
            doomed = doomed_build(
                counts, stop_above, growth=1.0 + (total - done) / made["units"], future=future, settled=prior
            )
            if doomed:
                raise FallbackError(
                    f"stopped building {conv.id}'s memory after {done} of {total} {unit}: {doomed}. "
                    f"What was built is kept; --allow-fallbacks builds on",
                    None,
                )

    await mem.construct(strategy, scope, ledger, progress=step)
    # one search loads what every question's search needs (the embedder, the scope's dense and BM25
    # indexes) now, in the build phase, not in the first wave of questions, which would all wait for it
    await mem.search("warm up", user_id=conv.id, k=1)
    usage = ledger.usage().construction.model_dump()
    ran = _calls_and_failures(ledger)
    if stored is not None:  # the view records its own cost, so a reused store still reports it
        usage = {
            **usage,
            **stored(mem.env, scope),
            "built_this_run_usd": usage["usd"],
            "built_this_run_calls": usage["calls"],
        }
        for key in ("calls_by_role", "events"):  # over every run that built the view: earlier runs' + this one's
            if isinstance(before.get(key), dict):
                ran[key] = dict(Counter(ran[key]) + Counter(before[key]))
        ran["fallbacks"] = [*(before.get("fallbacks") or []), *ran["fallbacks"]]
    return {
        "records": len(conv.records),
        "records_added": len(added.added),
        "chunks_embedded": added.chunks_embedded,
        **usage,
        **ran,
    }


def build_counts(entry: dict) -> dict[str, int]:
    """``{"calls", "failed", "built_calls"}`` of a construction entry (:func:`construct`'s): its
    model calls and how many of them failed or had their output fall back, as
    :func:`~memfrontier.eval.fallbacks.fallback_report` counts them (over every run that built the
    view when the view records them, as MemoryCPT's bank does; else this run's), and the calls
    made in this run."""
    shares = fallback_report([], construction=[entry])["by_role"].values()
    calls = sum((entry.get("calls_by_role") or {}).values())
    return {
        "calls": calls,
        "failed": sum(v["errors"] + v["fallbacks"] for v in shares),
        "built_calls": int(entry.get("built_this_run_calls", calls)),
    }


def _calls_and_failures(ledger: Ledger) -> dict:
    """A construction ledger's events, calls by role and first five call errors (the summary's
    construction fields that :func:`~memfrontier.eval.fallbacks.fallback_report` reads)."""
    return {
        "events": dict(ledger.events),
        "fallbacks": [f.model_dump() for f in ledger.fallbacks],
        "calls_by_role": {r: st.calls for r, st in ledger.usage().by_role.items()},
        "call_errors": [{"role": x.role, "error": x.error} for x in ledger.calls if x.error][:5],
    }


def prompt_versions(strategy, dataset: str, judged: bool, dated: bool = False) -> dict[str, str]:
    """The versions of the prompts a run's answers come from: the answerer's (its dated prompt when
    the questions carry the date they are asked, ``dated``), the strategy's (its memory-side roles: construction,
    planner, summarizer...) and, when judged, the judge's (dated as the answerer's is)."""
    return {
        "answerer": DATED_PROMPT_VERSION if dated else PROMPT_VERSION,
        "strategy": strategy.prompt_version,
        **({"judge": judge_prompt_version(dataset, dated)} if judged else {}),
    }


async def answer_question(mem, strategy, judge, dataset: str, q: Question, scorer: Scorer = DEFAULT_SCORER) -> dict:
    """Ask ``q`` in its conversation's scope, score it with ``scorer`` (and judge it when
    ``judge``); the ``predictions.jsonl`` row (prediction, F1, EM, evidence recall, USD, usage by
    stage...)."""
    ledger = Ledger()
    ans = await mem.answer(
        q.question,
        Scope(user_id=q.conversation_id),
        strategy,
        question_date=q.question_date,
        gold_evidence_ids=q.evidence_ids,
        ledger=ledger,
    )
    gold = q.answer
    row = {
        "id": q.id,
        "conversation_id": q.conversation_id,
        "category": q.category,
        "question": q.question,
        "question_date": q.question_date,
        "gold": gold,
        "prediction": ans.text,
        "f1": score_f1(dataset, ans.text, q, scorer),
        "em": bool(gold is not None and exact_match(ans.text, gold, scorer)),
        "evidence_ids": ans.evidence_ids,
        "gold_evidence_ids": q.evidence_ids,
        "evidence_recall": evidence_recall(q.evidence_ids, ans.evidence_ids),
        "usd": ans.usage.query.usd,
        "unpriced_calls": ans.usage.query.unpriced_calls,
        "proxy_s": ans.usage.query.proxy_s,
        "wall_s": ans.wall_s,
        "usage": ans.usage.model_dump(),
        "strategy_meta": ans.meta,
        "call_errors": [{"role": c.role, "error": c.error} for c in ledger.calls if c.error][:5],
        "prompt_versions": prompt_versions(strategy, dataset, judge is not None, q.question_date is not None),
    }
    if judge is not None:
        jl = Ledger()
        with use_ledger(jl, "query"):
            verdict = await judge(
                q.question,
                gold or "(no answer: the question is unanswerable)",
                ans.text,
                question_type=q.category,
                abstention=q.abstention,
                question_date=q.question_date,
            )
        row["judge"] = verdict
        row["judge_usd"] = jl.usd()
        row["judge_usage"] = jl.usage().query.model_dump()
        if verdict is None:
            row["judge_error"] = True
    return row
