"""The evaluation protocol: ingest -> build -> ask every question -> score -> summary.

Writes ``predictions.jsonl`` (one line per question, appended and fsynced as each finishes, so an
interrupted run resumes where it stopped) and ``summary.json`` (per-category metrics, cost,
latency, QPC, amortized cost and provenance) into the output directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, Field, field_validator, model_validator

from ..answerer import PROMPT_VERSION as QA_PROMPT_VERSION
from ..core.cost import amortization_table, qpc
from ..core.jsonio import write_json_atomic
from ..core.ledger import Ledger, use_ledger
from ..core.pricebook import PriceBook
from ..core.provenance import provenance, sha256_file
from ..core.types import Conversation, Question, Scope
from ..strategies import StrategyConfig, get_strategy, strategy_config
from . import datasets
from .fallbacks import (
    DEFAULT_THRESHOLD,
    FallbackError,
    doomed_build,
    exceeded_message,
    fallback_report,
    unrecorded_units,
)
from .judge import judge_prompt_version, make_judge
from .metrics import (
    choice_ratios,
    evidence_recall,
    exact_match,
    locomo_f1,
    overall_metrics,
    summarize,
    token_f1,
)

AMORTIZATION_NS = (1, 10, 50, 100, 314, math.inf)
#: Context.meta keys holding a ``{component: choice}`` dict (BudgetMem: module -> tier chosen /
#: used; auto: ``configuration`` -> the label it routed to); the summary reports the share of each
#: choice per component under ``choices``.
CHOICE_KEYS = ("tiers", "tiers_used", "route")


class EvalConfig(BaseModel):
    """One evaluation run. ``strategy_options`` are the options of the strategy's config (e.g.
    ``{"k": 8}`` for :class:`~memfrontier.strategies.rag.RagConfig`), given as a dict or as the
    config itself; they are validated when the EvalConfig is made (a ValidationError names the
    key and the allowed values)."""

    dataset: str = "locomo"
    #: None: the dataset's default split (:func:`~memfrontier.eval.datasets.default_split`: ``test``
    #: where it has one, else ``all``)
    split: str | None = None
    strategy: str = "rag"
    strategy_options: dict = Field(default_factory=dict)
    limit: int | None = None
    llm: str = "local"
    base_url: str | None = None
    judge: bool = False
    judge_llm: str | None = None
    out: Path = Path("runs/latest")
    #: a store directory, or a PostgreSQL URL (kept as a string)
    store: Path | str | None = None
    data_root: Path | None = None
    #: a file in the dataset's format read instead of the data root's default (e.g. LongMemEval S/M)
    data_file: Path | None = None
    seed: int = 42
    concurrency: int = 1
    #: Run ingest/construction (one task per conversation) and the questions (one task each) on
    #: Ray: ``"local"`` starts Ray on this machine, ``"auto"`` joins the running cluster, or a
    #: cluster address (``"ray://host:10001"``). ``concurrency`` is then the number of Ray workers,
    #: each a process with its own models. ``None``: in this process (asyncio). Not part of the
    #: run's identity: both give the same results (:mod:`memfrontier.eval.ray_pool`).
    ray: str | None = None
    price_book: Path | None = None
    allow_unpriced: bool = False
    price_as: str | None = None
    #: A run whose error or fallback share of any role is above ``fallback_threshold`` raises
    #: :class:`~memfrontier.eval.fallbacks.FallbackError` (after writing its summary) unless
    #: ``allow_fallbacks``. Neither changes the run's results, so neither is part of its identity.
    allow_fallbacks: bool = False
    fallback_threshold: float = Field(default=DEFAULT_THRESHOLD, ge=0.0, le=1.0)

    @field_validator("out")
    @classmethod
    def _out_is_a_folder(cls, v: Path) -> Path:
        for p in (v, *v.parents):  # the nearest existing path must be a folder (it is created below it)
            if p.exists():
                if not p.is_dir():
                    raise ValueError(f"{p} is a file, not a folder" + (f" (in {v})" if p != v else ""))
                break
        return v

    @field_validator("store", mode="before")
    @classmethod
    def _store_location(cls, v):
        from ..store.postgres import is_postgres_url

        return v if v is None or is_postgres_url(v) else Path(v)

    @field_validator("strategy_options", mode="before")
    @classmethod
    def _config_as_options(cls, v):
        return v.as_json() if isinstance(v, StrategyConfig) else v

    @field_validator("ray")
    @classmethod
    def _ray_address(cls, v):
        if v is not None and not v.strip():
            raise ValueError("ray must be 'local', 'auto' or a cluster address such as ray://head:10001")
        return v

    @model_validator(mode="after")
    def _default_split(self):
        if self.split is None:
            self.split = datasets.default_split(self.dataset)
        return self

    @model_validator(mode="after")
    def _valid_strategy_options(self):
        self.strategy_config()
        return self

    def strategy_config(self) -> StrategyConfig:
        """The strategy's validated config (raises ValueError naming a rejected option)."""
        return strategy_config(self.strategy, self.strategy_options)

    def identity(self) -> dict:
        """The fields that must match for a resumed run to be the same run, and the price book's
        version (a changed price book is another run). A strategy option that
        names a file (e.g. a router checkpoint) also contributes the file's sha256, so a retrained
        file at the same path is a different run."""
        ident = self.model_dump(mode="json", include={"dataset", "split", "strategy", "strategy_options", "llm",
                                                      "base_url", "seed", "limit", "judge", "judge_llm", "price_as"})
        # prices and latency profiles are part of every recorded call: a resumed run under another
        # price-book version would mix two books in one summary
        ident["price_book_version"] = PriceBook.load(self.price_book).version
        files = {k: sha256_file(v) for k, v in sorted(self.strategy_options.items())
                 if isinstance(v, (str, Path)) and str(v) and Path(v).is_file()}
        if files:
            ident["strategy_option_sha256"] = files
        if self.data_file is not None:  # another data file is another run (absent: the default file)
            ident["data_file_sha256"] = sha256_file(self.data_file) if Path(self.data_file).is_file() else None
        return ident


def select_questions(convs: list[Conversation], limit: int | None, seed: int) -> list[Question]:
    """All questions, or a ``limit``-sized slice that covers every category: shuffle each category
    with ``seed`` and take them round-robin (categories in sorted order). Returned in dataset order."""
    return stratified_sample([q for c in convs for q in c.questions], limit, seed)


def stratified_sample(allq: list[Question], limit: int | None, seed: int) -> list[Question]:
    """:func:`select_questions` over a list of questions (kept in their given order)."""
    if limit is None or limit >= len(allq):
        return allq
    by_cat: dict[str, list[Question]] = defaultdict(list)
    for q in allq:
        by_cat[q.category].append(q)
    rng = random.Random(seed)
    for qs in by_cat.values():
        rng.shuffle(qs)
    picked: set[str] = set()
    cats = sorted(by_cat)
    while len(picked) < limit:
        for c in cats:
            if by_cat[c] and len(picked) < limit:
                picked.add(by_cat[c].pop().id)
    return [q for q in allq if q.id in picked]


def score_f1(dataset: str, prediction: str, q: Question) -> float:
    """LoCoMo: the official per-category F1 (category 5 as abstention); elsewhere plain token F1."""
    if dataset == "locomo":
        return locomo_f1(prediction, q.answer or "", int(q.category))
    return token_f1(prediction, q.answer or "")


def _read_done(path: Path) -> dict[str, dict]:
    """Rows already written; a torn last line (crash mid-write) is dropped and rewritten."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    good_lines = []
    for line in path.read_text("utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[row["id"]] = row
        good_lines.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(l + "\n" for l in good_lines), "utf-8")
    os.replace(tmp, path)
    return done


def open_run(cfg: EvalConfig, open_memory=None):
    """The run's ``(memory, judge or None, strategy)``, as every worker of the run opens them.
    Opening loads no model (models load on their first call)."""
    from ..api import AsyncMemory

    mem = (open_memory or AsyncMemory.open)(
        cfg.store or Path(cfg.out) / "store", llm=cfg.llm, base_url=cfg.base_url,
        price_book=cfg.price_book, allow_unpriced=cfg.allow_unpriced, price_as=cfg.price_as)
    judge = make_judge(mem, cfg.judge_llm, cfg.base_url, dataset=cfg.dataset) if cfg.judge else None
    return mem, judge, get_strategy(cfg.strategy, cfg.strategy_config())


async def construct(mem, strategy, conv: Conversation, progress=None, *, stop_above: float | None = None,
                    settled: Sequence[dict] = (), turns_left: int = 0) -> dict:
    """Ingest one conversation (scope ``user_id = conversation id``; one store ``add``, so one
    transaction) and build ``strategy``'s view of it; returns the summary's ``construction`` entry
    for it (records added, chunks embedded, construction usage in tokens/USD/seconds, events,
    calls by role, first call errors).

    ``progress(event, **info)`` (optional, :func:`run_eval`'s callback) gets ``embed`` events while
    the records are embedded (``conversation``, ``sessions``, ``done`` and ``total``: records
    whose chunks are embedded so far / to embed; from the ingest's worker thread; none when
    every record is already stored), then ``build`` (``conversation``) before the strategy's
    offline construction, then a ``construct`` event after each of its steps (``conversation``,
    ``done``, ``total``, ``unit``: :data:`~memfrontier.strategies.base.BuildProgress`'s; ``calls``
    and ``failed`` so far: :func:`build_counts`; none for a strategy whose construction has no
    steps).

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

    added = await asyncio.to_thread(mem.store.add, conv.records, progress=report)
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
            doomed = doomed_build(counts, stop_above, growth=1.0 + (total - done) / made["units"], future=future,
                                  settled=prior)
            if doomed:
                raise FallbackError(f"stopped building {conv.id}'s memory after {done} of {total} {unit}: {doomed}. "
                                    f"What was built is kept; --allow-fallbacks builds on", None)

    await mem.construct(strategy, scope, ledger, progress=step)
    usage = ledger.usage().construction.model_dump()
    ran = _calls_and_failures(ledger)
    if stored is not None:  # the view records its own cost, so a reused store still reports it
        usage = {**usage, **stored(mem.env, scope), "built_this_run_usd": usage["usd"],
                 "built_this_run_calls": usage["calls"]}
        for key in ("calls_by_role", "events"):  # over every run that built the view: earlier runs' + this one's
            if isinstance(before.get(key), dict):
                ran[key] = dict(Counter(ran[key]) + Counter(before[key]))
        ran["fallbacks"] = [*(before.get("fallbacks") or []), *ran["fallbacks"]]
    return {"records": len(conv.records), "records_added": len(added.added),
            "chunks_embedded": added.chunks_embedded, **usage, **ran}


def build_counts(entry: dict) -> dict[str, int]:
    """``{"calls", "failed", "built_calls"}`` of a construction entry (:func:`construct`'s): its
    model calls and how many of them failed or had their output fall back, as
    :func:`~memfrontier.eval.fallbacks.fallback_report` counts them (over every run that built the
    view when the view records them, as MemoryCPT's bank does; else this run's), and the calls
    made in this run."""
    shares = fallback_report([], construction=[entry])["by_role"].values()
    calls = sum((entry.get("calls_by_role") or {}).values())
    return {"calls": calls, "failed": sum(v["errors"] + v["fallbacks"] for v in shares),
            "built_calls": int(entry.get("built_this_run_calls", calls))}


def _calls_and_failures(ledger: Ledger) -> dict:
    """A construction ledger's events, calls by role and first five call errors (the summary's
    construction fields that :func:`~memfrontier.eval.fallbacks.fallback_report` reads)."""
    return {"events": dict(ledger.events), "fallbacks": [f.model_dump() for f in ledger.fallbacks],
            "calls_by_role": {r: st.calls for r, st in ledger.usage().by_role.items()},
            "call_errors": [{"role": x.role, "error": x.error} for x in ledger.calls if x.error][:5]}


def prompt_versions(strategy, dataset: str, judged: bool) -> dict[str, str]:
    """The versions of the prompts a run's answers come from: the answerer's, the strategy's
    (its memory-side roles: construction, planner, summarizer...) and, when judged, the judge's."""
    return {"answerer": QA_PROMPT_VERSION, "strategy": strategy.prompt_version,
            **({"judge": judge_prompt_version(dataset)} if judged else {})}


async def answer_question(mem, strategy, judge, dataset: str, q: Question) -> dict:
    """Ask ``q`` in its conversation's scope, score it (and judge it when ``judge``); the
    ``predictions.jsonl`` row (prediction, F1, EM, evidence recall, USD, usage by stage...)."""
    ledger = Ledger()
    ans = await mem.answer(q.question, Scope(user_id=q.conversation_id), strategy,
                           question_date=q.question_date, gold_evidence_ids=q.evidence_ids, ledger=ledger)
    gold = q.answer
    row = {
        "id": q.id, "conversation_id": q.conversation_id, "category": q.category,
        "question": q.question, "gold": gold, "prediction": ans.text,
        "f1": score_f1(dataset, ans.text, q),
        "em": bool(gold is not None and exact_match(ans.text, gold)),
        "evidence_ids": ans.evidence_ids, "gold_evidence_ids": q.evidence_ids,
        "evidence_recall": evidence_recall(q.evidence_ids, ans.evidence_ids),
        "usd": ans.usage.query.usd, "unpriced_calls": ans.usage.query.unpriced_calls, "proxy_s": ans.usage.query.proxy_s, "wall_s": ans.wall_s,
        "usage": ans.usage.model_dump(),
        "strategy_meta": ans.meta,
        "call_errors": [{"role": c.role, "error": c.error} for c in ledger.calls if c.error][:5],
        "prompt_versions": prompt_versions(strategy, dataset, judge is not None),
    }
    if judge is not None:
        jl = Ledger()
        with use_ledger(jl, "query"):
            verdict = await judge(q.question, gold or "(no answer: the question is unanswerable)", ans.text,
                                  question_type=q.category, abstention=q.abstention)
        row["judge"] = verdict
        row["judge_usd"] = jl.usd()
        row["judge_usage"] = jl.usage().query.model_dump()
        if verdict is None:
            row["judge_error"] = True
    return row


async def _as_completed(aws):
    """Yield the results of ``aws`` as they finish. They are scheduled in the given order, so under a
    semaphore of one they also run in it: questions in dataset order, a conversation's questions one
    after another (a local model then reuses the shared prompt prefix, e.g. longctx's whole history).
    ``asyncio.as_completed`` alone schedules a set, in hash order. Closed early (an error, Ctrl-C),
    it cancels the questions not yet finished and waits for them, so none is left running against
    a store that is about to close."""
    futs = [asyncio.ensure_future(a) for a in aws]
    try:
        for fut in asyncio.as_completed(futs):
            yield await fut
    finally:
        unfinished = [f for f in futs if not f.done()]
        for f in unfinished:
            f.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)


def load_questions(cfg: EvalConfig) -> tuple[list[Conversation], list[Question]]:
    """The run's conversations (those its questions are asked about, in dataset order) and questions
    (:func:`select_questions`). Raises DatasetError for missing or corrupt data, or data that holds
    no question of the split (nothing to evaluate)."""
    convs = datasets.load_dataset(cfg.dataset, cfg.split, data_root=cfg.data_root, data_file=cfg.data_file)
    questions = select_questions(convs, cfg.limit, cfg.seed)
    if not questions:
        where = cfg.data_file or datasets.dataset_path(cfg.dataset, cfg.data_root)
        raise datasets.DatasetError(f"{cfg.dataset} data file {where} holds no questions in split {cfg.split!r}: "
                                    "nothing to evaluate")
    needed = {q.conversation_id for q in questions}
    return [c for c in convs if c.id in needed], questions


def check_run(cfg: EvalConfig) -> tuple[list[Conversation], list[Question]]:
    """What a run of ``cfg`` needs from outside, checked before anything is written: the data file
    loads and holds questions of the split (:func:`load_questions`, whose result is returned), and
    its LLM specs (answerer, memory side, judge) parse and name installed embedded models. Loads no
    model; :func:`run_eval` checks this first, a frontier once for all its configurations. Raises
    DatasetError, ValueError or :class:`~memfrontier.llm.local_models.ModelNotInstalledError`."""
    from ..llm import check_llm_spec, served_base_url

    loaded = load_questions(cfg)
    check_llm_spec(cfg.llm, cfg.base_url)
    if cfg.judge and cfg.judge_llm:  # the judge gets --base-url only when it is a server's model, as in MemoryEnv.model
        check_llm_spec(cfg.judge_llm, served_base_url(cfg.judge_llm, cfg.base_url))
    return loaded


class RunMismatchError(RuntimeError):
    """The output directory holds a different run; resuming it would mix results."""


async def run_eval(cfg: EvalConfig, *, on_progress=None, open_memory=None) -> dict:
    """Run the protocol; returns the summary dict (also written to ``cfg.out/summary.json``).

    ``on_progress(event, **info)`` is called with ``start``, then per conversation ``embed`` (during
    its ingest, see :func:`construct`; not under Ray), ``build`` and ``ingest`` (done), then
    ``question`` events.
    Raises DatasetError for missing data, RunMismatchError when ``cfg.out`` holds another run,
    FallbackError (summary written) when a role's error or fallback share is above
    ``cfg.fallback_threshold`` and ``cfg.allow_fallbacks`` is False.
    """

    progress = on_progress or (lambda *a, **k: None)
    if cfg.ray is not None:  # before anything is read or written
        from .ray_pool import require_ray

        require_ray()
    out = Path(cfg.out)
    run_file = out / "run.json"
    if run_file.exists():
        prev = json.loads(run_file.read_text("utf-8"))
        if prev != cfg.identity():
            diff = {k: (prev.get(k), v) for k, v in cfg.identity().items() if prev.get(k) != v}
            raise RunMismatchError(
                f"{out} holds a different run (differs in {', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in diff.items())}); "
                f"choose another --out or delete it")

    convs, questions = check_run(cfg)  # a bad data file or model spec leaves nothing behind
    out.mkdir(parents=True, exist_ok=True)
    data_file = cfg.data_file or datasets.dataset_path(cfg.dataset, cfg.data_root)

    if cfg.ray is not None and open_memory is not None:
        raise ValueError("open_memory cannot be sent to Ray workers: run without ray")
    mem, judge, strategy = open_run(cfg, open_memory)
    if not run_file.exists():  # only once the data, models and strategy are known to be valid
        write_json_atomic(run_file, cfg.identity())

    pred_path = out / "predictions.jsonl"
    done = _read_done(pred_path)
    current = prompt_versions(strategy, cfg.dataset, cfg.judge)
    other = [r["prompt_versions"] for r in done.values() if r.get("prompt_versions", current) != current]
    if other:  # answers from older prompts and newer ones would be one row under one label
        mem.close()
        raise RunMismatchError(
            f"{out} holds {len(other)} answer{'s' if len(other) != 1 else ''} made with other prompt versions "
            f"({other[0]}; this memfrontier: {current}); choose another --out or delete {out}")
    pending = [q for q in questions if q.id not in done]
    progress("start", total=len(questions), done=len(done), conversations=len(convs))

    pool = None
    if cfg.ray is not None:
        from .ray_pool import RayPool

        pool = RayPool(cfg, items=max(len(convs), len(pending)))
    try:
        construction: dict[str, dict] = {}
        if pool is None:
            for i, c in enumerate(convs):
                construction[c.id] = await construct(
                    mem, strategy, c, progress, stop_above=None if cfg.allow_fallbacks else cfg.fallback_threshold,
                    settled=list(construction.values()), turns_left=sum(len(x.records) for x in convs[i + 1:]))
                progress("ingest", conversation=c.id, added=construction[c.id]["records_added"],
                         **build_counts(construction[c.id]))
        else:  # every conversation is built before any question is asked, as above
            async for c_id, entry in pool.construct(convs):
                construction[c_id] = entry
                progress("ingest", conversation=c_id, added=entry["records_added"], **build_counts(entry))
        construction = {c.id: construction[c.id] for c in convs}  # dataset order, whatever finished first

        if pool is None:
            sem = asyncio.Semaphore(max(1, cfg.concurrency))

            async def one(q: Question) -> dict:
                async with sem:
                    return await answer_question(mem, strategy, judge, cfg.dataset, q)

            rows_done = _as_completed([one(q) for q in pending])
        else:
            rows_done = pool.answer(pending)
        async with contextlib.aclosing(rows_done):  # an early exit stops the unfinished questions first
            with pred_path.open("a", encoding="utf-8") as f:
                async for row in rows_done:
                    f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    f.flush()
                    os.fsync(f.fileno())
                    done[row["id"]] = row
                    progress("question", row=row)
        modes = pool.structured_output_modes() if pool is not None else _structured_output_modes()
    finally:
        if pool is not None:
            pool.close()
        mem.close()

    rows = [done[q.id] for q in questions if q.id in done]
    summary = build_summary(cfg, rows, construction, data_file, mem, strategy, structured_output=modes,
                            undated=undated_sessions(convs))
    write_json_atomic(out / "summary.json", summary)
    if summary["fallbacks"]["exceeded"] and not cfg.allow_fallbacks:
        raise FallbackError(exceeded_message(summary["fallbacks"]), summary)
    return summary


def undated_sessions(convs: list[Conversation]) -> list[str]:
    """The sessions of ``convs`` whose turns have no timestamp (a date missing or not parseable in the
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


def build_summary(cfg: EvalConfig, rows: list[dict], construction: dict, data_file: Path, mem, strategy,
                  structured_output: dict[str, str] | None = None, undated: Sequence[str] = ()) -> dict:
    """Per-category metrics plus amortized cost C(n) (MemoryCPT Eq. 3 / Eq. 20) and provenance.

    ``amortized_usd_per_question``: USD per question, ``{str(n): C(n)}`` for n in
    :data:`AMORTIZATION_NS` and n = the questions this run answered, where C(n) = C_construction / n +
    C_online (the mean online cost of the scored questions, those F1 is over) spreads the construction
    of *every* conversation built for the run over n questions in all (the paper's store: App. C's
    n = 314 is LoCoMo's whole test split), the frontier's convention; None when a call was unpriced. ``qpc_amortized``: overall F1 / (C(n_run) x 1e4) (MemoryCPT Eq. 5-6;
    the metrics' ``qpc`` is online-only). ``structured_output``: the endpoints' structured-output
    modes (default: this process's). ``undated``: :func:`undated_sessions` of the run's
    conversations (``undated_sessions`` in the summary)."""
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
        "events": _sum_events(rows),
        "fallbacks": fallback_report(rows, cfg.fallback_threshold, construction=construction.values()),
        **_choices(rows),
        "provenance": provenance(
            data_file=str(data_file), data_sha256=sha256_file(data_file), seed=cfg.seed,
            answer_model=mem.env.answer_llm.model_id, memory_model=mem.env.llm.model_id,
            embedding_model=mem.store.embedder.model_id,
            judge_model=(cfg.judge_llm or mem.env.answer_llm.model_id) if cfg.judge else None,
            prompt_versions=prompt_versions(strategy, cfg.dataset, cfg.judge),
            price_book_version=mem.env.answer_llm.prices.version, priced_as=cfg.price_as,
            structured_output=_structured_output_modes() if structured_output is None else structured_output,
            **_config_provenance(strategy),
            recipes=list(strategy.recipes),
        ),
    }


def _structured_output_modes() -> dict[str, str]:
    """The structured-output mode each OpenAI-compatible endpoint settled on (``{}`` when none
    was used; the SDK is not imported just to say so)."""
    import sys

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
