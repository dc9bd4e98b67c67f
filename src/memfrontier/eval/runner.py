"""The evaluation protocol: ingest -> build -> ask every question -> score -> summary.

Writes ``predictions.jsonl`` (one line per question, appended and fsynced as each finishes, so an
interrupted run resumes where it stopped) and ``summary.json`` (per-category metrics, cost,
latency, QPC, amortized cost and provenance: :mod:`memfrontier.eval.summary`) into the output
directory. The work runs on an executor (:mod:`memfrontier.eval.executor`): this process's event
loop, or Ray workers (``EvalConfig.ray``: :mod:`memfrontier.eval.ray_pool`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path

from ..core.files import open_private, private_dir
from ..core.jsonio import jsonl_lines, write_json_atomic, write_text_atomic
from ..core.types import Conversation, Question
from . import datasets
from .config import EvalConfig
from .datasets.sampling import select_questions
from .executor import Executor, LocalExecutor
from .fallbacks import FallbackError, exceeded_message
from .summary import build_summary, undated_sessions
from .tasks import build_counts, open_run, prompt_versions


def _read_done(path: Path) -> dict[str, dict]:
    """Rows already written; a torn last line (crash mid-write) is dropped and rewritten."""
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    good_lines = []
    for line in jsonl_lines(path.read_text("utf-8")):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        done[row["id"]] = row
        good_lines.append(line)
    write_text_atomic(path, "".join(line + "\n" for line in good_lines))
    return done


def load_questions(cfg: EvalConfig) -> tuple[list[Conversation], list[Question]]:
    """The run's conversations (those its questions are asked about, in dataset order) and questions
    (:func:`select_questions`). Raises DatasetError for missing or corrupt data, or data that holds
    no question of the split (nothing to evaluate)."""
    convs = datasets.load_dataset(cfg.dataset, cfg.split, data_root=cfg.data_root, data_file=cfg.data_file)
    questions = select_questions(convs, cfg.limit, cfg.seed)
    if not questions:
        where = cfg.data_file or datasets.dataset_path(cfg.dataset, cfg.data_root)
        raise datasets.DatasetError(
            f"{cfg.dataset} data file {where} holds no questions in split {cfg.split!r}: nothing to evaluate"
        )
    needed = {q.conversation_id for q in questions}
    return [c for c in convs if c.id in needed], questions


def check_run(cfg: EvalConfig) -> tuple[list[Conversation], list[Question]]:
    """What a run of ``cfg`` needs from outside, checked before anything is written: the data file
    loads and holds questions of the split (:func:`load_questions`, whose result is returned), and
    its LLM specs (answerer, memory side, judge) parse and name installed embedded models. Loads no
    model; :func:`run_eval` checks this first, a frontier once for all its configurations. Raises
    DatasetError, ValueError or :class:`~memfrontier.llm.local_models.ModelNotInstalledError`.

    The records are checked as the store's ``add`` will check them (:func:`check_records`), so a
    file the store would refuse is refused here, not after minutes of embedding."""
    from ..llm import check_llm_spec, served_base_url

    loaded = load_questions(cfg)
    check_records(loaded[0], cfg.data_file or datasets.dataset_path(cfg.dataset, cfg.data_root))
    check_llm_spec(cfg.llm, cfg.base_url)
    if cfg.judge and cfg.judge_llm:  # the judge gets --base-url only when it is a server's model, as in MemoryEnv.model
        check_llm_spec(cfg.judge_llm, served_base_url(cfg.judge_llm, cfg.base_url))
    return loaded


def check_records(convs: list[Conversation], where) -> None:
    """Run the store's batch checks (:func:`~memfrontier.store.records.checked_batch`: empty
    records, id and scope sizes, one id twice with other content) on each conversation's records,
    the batch :func:`~memfrontier.eval.tasks.construct` adds; raises DatasetError naming ``where``
    (the data file) and the record. Writes nothing."""
    from ..store.records import checked_batch

    for c in convs:
        try:
            checked_batch(c.records)
        except ValueError as e:  # RecordConflictError is a ValueError too
            why = (
                str(e)
                .replace(" (nothing of this batch was written)", "")
                .replace("; nothing of this batch was written", "")
            )
            raise datasets.DatasetError(f"data file {where}: conversation {c.id!r}: {why}; nothing was written") from e


def empty_turns_skipped(convs: list[Conversation]) -> list[str]:
    """The ids of the turns the loader skipped for being empty (``meta["empty_turns_skipped"]``), in order."""
    return [rid for c in convs for rid in c.meta.get("empty_turns_skipped", ())]


class RunMismatchError(RuntimeError):
    """The output directory holds a different run; resuming it would mix results."""


def _append_durably(f, line: str) -> None:
    """Append ``line`` to the open file ``f`` and fsync it."""
    f.write(line)
    f.flush()
    os.fsync(f.fileno())


async def run_eval(cfg: EvalConfig, *, on_progress=None, open_memory=None) -> dict:
    """Run the protocol; returns the summary dict (also written to ``cfg.out/summary.json``).

    ``on_progress(event, **info)`` is called with ``start``, then per conversation ``embed`` (during
    its ingest, see :func:`~memfrontier.eval.tasks.construct`; not under Ray), ``build`` and ``ingest`` (done), then
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
                f"choose another --out or delete it"
            )

    convs, questions = check_run(cfg)  # a bad data file or model spec leaves nothing behind
    private_dir(out)
    data_file = cfg.data_file or datasets.dataset_path(cfg.dataset, cfg.data_root)

    if cfg.ray is not None and open_memory is not None:
        raise ValueError("open_memory cannot be sent to Ray workers: run without ray")
    mem, judge, strategy = open_run(cfg, open_memory)
    if not run_file.exists():  # only once the data, models and strategy are known to be valid
        write_json_atomic(run_file, cfg.identity())

    pred_path = out / "predictions.jsonl"
    done = _read_done(pred_path)
    dated = {q.id: q.question_date is not None for q in questions}
    current = {d: prompt_versions(strategy, cfg.dataset, cfg.judge, d) for d in (False, True)}
    other = [
        r["prompt_versions"]
        for r in done.values()
        if r.get("prompt_versions", current[dated.get(r["id"], False)]) != current[dated.get(r["id"], False)]
    ]
    if other:  # answers from older prompts and newer ones would be one row under one label
        mem.close()
        raise RunMismatchError(
            f"{out} holds {len(other)} answer{'s' if len(other) != 1 else ''} made with other prompt versions "
            f"({other[0]}; this memfrontier: {current[False]}, or {current[True]} for a dated question); choose another --out or delete {out}"
        )
    pending = [q for q in questions if q.id not in done]
    progress(
        "start",
        total=len(questions),
        done=len(done),
        conversations=len(convs),
        empty_turns_skipped=len(empty_turns_skipped(convs)),
    )

    executor = open_executor(cfg, mem, strategy, judge, progress, items=max(len(convs), len(pending)))
    try:
        construction: dict[str, dict] = {}
        # every conversation is built before any question is asked
        built = executor.construct(convs)
        async with contextlib.aclosing(built):
            async for c_id, entry in built:
                construction[c_id] = entry
                progress("ingest", conversation=c_id, added=entry["records_added"], **build_counts(entry))
        construction = {c.id: construction[c.id] for c in convs}  # dataset order, whatever finished first

        rows_done = executor.answer(pending)
        async with contextlib.aclosing(rows_done):  # an early exit stops the unfinished questions first
            with open_private(pred_path, "a", encoding="utf-8") as f:
                async for row in rows_done:
                    # the row is durable before it counts as done; the fsync waits on the disk, so
                    # it runs in a worker thread while the other questions' calls go on
                    await asyncio.to_thread(_append_durably, f, json.dumps(row, ensure_ascii=False) + "\n")
                    done[row["id"]] = row
                    progress("question", row=row)
        modes = executor.structured_output_modes()
    finally:
        executor.close()
        mem.close()

    rows = [done[q.id] for q in questions if q.id in done]
    summary = build_summary(
        cfg,
        rows,
        construction,
        data_file,
        mem,
        strategy,
        structured_output=modes,
        undated=undated_sessions(convs),
        skipped=empty_turns_skipped(convs),
    )
    write_json_atomic(out / "summary.json", summary)
    if summary["fallbacks"]["exceeded"] and not cfg.allow_fallbacks:
        raise FallbackError(exceeded_message(summary["fallbacks"]), summary)
    return summary


def open_executor(cfg: EvalConfig, mem, strategy, judge, progress, *, items: int) -> Executor:
    """The executor of ``cfg``'s run: Ray workers (at most ``items``, the most tasks either loop
    has) when ``cfg.ray`` is set, else :class:`~memfrontier.eval.executor.LocalExecutor` on
    ``mem``, ``strategy`` and ``judge`` (its builds stop at ``cfg.fallback_threshold`` unless
    ``cfg.allow_fallbacks``)."""
    if cfg.ray is not None:
        from .ray_pool import RayPool

        return RayPool(cfg, items=items)
    return LocalExecutor(
        mem,
        strategy,
        judge,
        cfg.dataset,
        concurrency=cfg.concurrency,
        progress=progress,
        stop_above=None if cfg.allow_fallbacks else cfg.fallback_threshold,
        scorer=cfg.scorer,
    )
