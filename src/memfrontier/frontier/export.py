"""A frontier's results without the benchmark's text: what can be published and versioned.

:func:`export_results` writes, into a folder of its own, each finished configuration's ``run.json``,
``summary.json`` and a ``predictions.jsonl`` that keeps only :data:`PUBLISHED_FIELDS` of each row:
ids, category, the model's answer, its scores, cost, latency, usage, errors, prompt versions and the
judge's verdict. The question, the gold answer and any text a strategy attached to its answer
(``strategy_meta`` other than the router's and tiers' choices and numbers) stay in the dataset and
in ``runs/``. ``summary.json`` is copied as it is: its provenance names the data file's path.

The export's report is then built from the export itself (``memfrontier frontier --export`` runs
:func:`~memfrontier.frontier.run.run_frontier` with ``report_only`` on it), so it covers every
configuration the folder holds, including ones exported earlier from another run with the same
options (several machines' results merge into one folder).

What the export is good for:

- ``memfrontier frontier --report-only --out DEST`` rebuilds the same report from it (every
  interval and paired difference is computed from the rows it keeps);
- ``DEST/configs/<label>/`` copied into another frontier's ``configs/`` is a finished configuration
  there (``run.json`` records the run's options, not its paths), or, for one exported before it
  finished, a started one that resumes after its last answered question: a long frontier keeps
  what it has done when it moves to another machine.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..core.jsonio import read_jsonl_objects, write_text_atomic
from ..eval.summary import CHOICE_KEYS

#: The fields of a ``predictions.jsonl`` row that an export keeps (see :func:`published_row`).
PUBLISHED_FIELDS = (
    "id",
    "conversation_id",
    "category",
    "prediction",
    "f1",
    "em",
    "evidence_ids",
    "gold_evidence_ids",
    "evidence_recall",
    "usd",
    "unpriced_calls",
    "proxy_s",
    "wall_s",
    "usage",
    "call_errors",
    "prompt_versions",
    "judge",
    "judge_usd",
    "judge_usage",
    "judge_error",
)
#: ``strategy_meta`` entries kept whatever their value: the ``auto`` router's decision and the choices
#: the summary's ``choices`` counts (tier plans, routes). Other entries are kept only when numbers or
#: booleans (counts, flags): a string there may hold retrieved text.
PUBLISHED_META = ("auto", *CHOICE_KEYS)


def published_row(row: dict) -> dict:
    """``row`` (one ``predictions.jsonl`` line) with only :data:`PUBLISHED_FIELDS` and the
    publishable part of ``strategy_meta`` (:data:`PUBLISHED_META`, numbers, booleans)."""
    out = {k: row[k] for k in PUBLISHED_FIELDS if k in row}
    meta = row.get("strategy_meta")
    if isinstance(meta, dict):
        out["strategy_meta"] = {
            k: v for k, v in meta.items() if k in PUBLISHED_META or isinstance(v, (bool, int, float))
        }
    return out


def _copy_atomic(src: Path, dst: Path) -> None:
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def check_export_dest(out: Path, dest: Path) -> None:
    """Raise ValueError when ``dest`` is ``out`` or lies inside it (an export there would overwrite
    the run it reads), or when ``dest``, its ``configs`` or one of its configuration entries exists
    and is not a folder (nothing is written then)."""
    out, dest = Path(out).resolve(), Path(dest).resolve()
    if dest == out or out in dest.parents:
        raise ValueError(f"--export {dest} must be a folder outside the frontier's --out {out}")
    configs = dest / "configs"
    for p in (dest, configs, *(configs.iterdir() if configs.is_dir() else ())):
        if p.exists() and not p.is_dir():
            raise ValueError(f"--export {dest}: {p} exists and is not a folder")


def export_results(out: Path, dest: Path, labels: list[str]) -> dict[str, list[str]]:
    """Write the publishable results of the frontier in ``out`` into ``dest``: for each of ``labels``
    with a ``configs/<label>/run.json`` and at least one answered question there, ``run.json``, the
    rows of ``predictions.jsonl`` as :func:`published_row` keeps them and, once it has finished,
    ``summary.json``. A started configuration (no summary yet) is exported too: its folder copied
    into another frontier's ``configs/`` resumes there after its last answered question (its store
    is rebuilt), so a run longer than one machine's stay carries on elsewhere. Files are written
    atomically; configurations of ``dest`` not in ``labels`` are left as they are, and so is one
    finished there when it has only started in ``out``. The report is not written here (see the module's
    docstring).

    Returns ``{"finished": labels, "started": labels}`` exported and ``"kept"``: the labels started
    in ``out`` left as they are because they have finished in ``dest``. Raises ValueError as
    :func:`check_export_dest` does, before anything is written.
    """
    check_export_dest(out, dest)
    out, dest = Path(out), Path(dest)
    done: dict[str, list[str]] = {"finished": [], "started": [], "kept": []}
    for label in labels:
        src = out / "configs" / label
        if not (src / "run.json").is_file() or not (src / "predictions.jsonl").is_file():
            continue
        rows = [published_row(r) for _, r in read_jsonl_objects(src / "predictions.jsonl")]
        finished = (src / "summary.json").is_file()
        if not rows and not finished:
            continue
        target = dest / "configs" / label
        if not finished and (target / "summary.json").is_file():  # finished there: a partial run never replaces it
            done["kept"].append(label)
            continue
        target.mkdir(parents=True, exist_ok=True)
        write_text_atomic(target / "predictions.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        for name in ("run.json", "summary.json"):
            if (src / name).is_file():
                _copy_atomic(src / name, target / name)
        done["finished" if finished else "started"].append(label)
    return done


__all__ = ["PUBLISHED_FIELDS", "PUBLISHED_META", "check_export_dest", "export_results", "published_row"]
