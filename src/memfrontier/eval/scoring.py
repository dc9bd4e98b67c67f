"""Score predictions made by any system under our protocol (``memfrontier score``)."""

from __future__ import annotations

import json
from pathlib import Path

from ..core.files import private_dir
from ..core.jsonio import read_jsonl_objects, write_json_atomic, write_text_atomic
from ..core.provenance import provenance, sha256_file
from .metrics import DEFAULT_SCORER, Scorer, exact_match, locomo_f1, summarize, token_f1


class ScoreInputError(ValueError):
    """A line of the predictions file is not JSON or lacks a required field."""


#: The keys a row may hold its gold answer under: ``answer`` (the documented format) or ``gold``
#: (the rows ``memfrontier eval`` writes to ``predictions.jsonl``).
GOLD_KEYS = ("answer", "gold")


def gold_answer(row: dict):
    """The row's gold answer: ``answer`` if present, else ``gold``, else None."""
    for key in GOLD_KEYS:
        if row.get(key) is not None:
            return row[key]
    return None


def score_row(row: dict, dataset: str, scorer: Scorer = DEFAULT_SCORER) -> dict:
    """Adds ``f1`` and ``em`` to one ``{prediction, answer? (or gold?), category}`` row (LoCoMo
    official rules, words read by ``scorer``: :func:`~memfrontier.eval.metrics.normalize_answer`);
    ``eval``'s own prediction rows, which hold ``gold``, score as they are."""
    pred = str(row.get("prediction") or "")
    gold = gold_answer(row)
    gold = None if gold is None else str(gold)
    if dataset == "locomo":
        try:
            cat = int(row["category"])
        except (KeyError, TypeError, ValueError):
            raise ScoreInputError(f"row {row.get('id', '?')}: LoCoMo scoring needs an integer 'category'") from None
        if gold is None and cat != 5:
            raise ScoreInputError(f"row {row.get('id', '?')}: category {cat} needs an 'answer' (or 'gold')")
        f1 = locomo_f1(pred, gold or "", cat, scorer)
    else:
        if gold is None:
            raise ScoreInputError(f"row {row.get('id', '?')}: needs an 'answer' (or 'gold')")
        f1 = token_f1(pred, gold, scorer)
    return {
        **row,
        "category": str(row.get("category", "all")),
        "f1": f1,
        "em": bool(gold is not None and exact_match(pred, gold, scorer)),
    }


def score_file(path: Path, *, dataset: str = "locomo", out: Path, scorer: Scorer = DEFAULT_SCORER) -> dict:
    """Writes ``out/scored.jsonl`` and ``out/summary.json`` (its ``config.scorer`` and
    ``provenance.scorer`` name ``scorer``); returns the summary.
    Raises FileNotFoundError or ScoreInputError (with the line number)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such predictions file: {path}")
    rows = []
    for n, row in read_jsonl_objects(path, ScoreInputError):
        try:
            rows.append(score_row(row, dataset, scorer))
        except ScoreInputError as e:
            raise ScoreInputError(f"{path}:{n}: {e}") from None
    if not rows:
        raise ScoreInputError(f"{path}: no predictions to score")
    out = Path(out)
    private_dir(out)
    write_text_atomic(out / "scored.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    summary = {
        "config": {"dataset": dataset, "split": "", "strategy": f"external:{path.name}", "scorer": scorer},
        "questions": len(rows),
        "metrics": summarize(rows, by="category", dataset=dataset),
        "provenance": provenance(predictions_file=str(path), predictions_sha256=sha256_file(path), scorer=scorer),
    }
    write_json_atomic(out / "summary.json", summary)
    return summary
