"""AutoMEM-specific numbers of an eval run, read from its ``predictions.jsonl`` (AutoMEM, arXiv
2606.04315, Table 9: per-question calls and tokens; Sec. 5: the prefix-cache hit rate).

Per category and overall: questions, model calls per question (query stage, all roles), input
and output tokens per question, USD per question, steps per question, the share of questions
whose judge found the trace sufficient, and the stable-prefix fraction (token-weighted over every
question's calls that had a previous call; see :mod:`memfrontier.strategies.automem.prefix`).
"""

from __future__ import annotations

import json
from pathlib import Path

from ...core.jsonio import jsonl_lines
from ...strategies.automem.meta import AutoMemMeta


def _stats(rows: list[dict]) -> dict:
    n = len(rows)
    q = [r.get("usage", {}).get("by_stage", {}).get("query", {}) for r in rows]
    metas = [AutoMemMeta.of_row(r) for r in rows]
    prefixed = [c for m in metas for c in m.calls if c.stable_prefix_fraction is not None]
    pre_tok = sum(c.stable_prefix_tokens for c in prefixed)
    all_tok = sum(c.prompt_tokens for c in prefixed)
    roles: dict[str, int] = {}
    for r in rows:
        for role, u in r.get("usage", {}).get("by_role", {}).items():
            roles[role] = roles.get(role, 0) + u.get("calls", 0)
    return {
        "n_questions": n,
        "calls_per_question": sum(u.get("calls", 0) for u in q) / n if n else None,
        "calls_per_question_by_role": {k: v / n for k, v in sorted(roles.items())} if n else {},
        "input_tokens_per_question": sum(u.get("input_tokens", 0) for u in q) / n if n else None,
        "output_tokens_per_question": sum(u.get("output_tokens", 0) for u in q) / n if n else None,
        "usd_per_question": sum(r.get("usd", 0.0) for r in rows) / n if n else None,
        "steps_per_question": sum(m.steps for m in metas) / n if n else None,
        "judged_sufficient": sum(1 for m in metas if m.stopped == "sufficient") / n if n else None,
        "stable_prefix_fraction": pre_tok / all_tok if all_tok else None,
        "f1": sum(r.get("f1", 0.0) for r in rows) / n if n else None,
    }


def automem_report(predictions: str | Path) -> dict[str, dict]:
    """``{category: stats, "all": stats}`` from an eval's ``predictions.jsonl`` (see module doc).
    Raises FileNotFoundError when the file is missing; unreadable lines are skipped."""
    rows = []
    for line in jsonl_lines(Path(predictions).read_text("utf-8")):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    groups: dict[str, list[dict]] = {}
    for r in rows:
        groups.setdefault(str(r.get("category")), []).append(r)
    out = {c: _stats(groups[c]) for c in sorted(groups)}
    out["all"] = _stats(rows)
    return out


def automem_table(predictions: str | Path):
    """The report as a rich table."""
    from rich.table import Table

    rep = automem_report(predictions)
    t = Table(title="automem: calls, tokens, cost and stable prefix per question")
    cols = [
        ("category", None),
        ("n", "n_questions"),
        ("F1", "f1"),
        ("calls/q", "calls_per_question"),
        ("steps/q", "steps_per_question"),
        ("in tok/q", "input_tokens_per_question"),
        ("out tok/q", "output_tokens_per_question"),
        ("USD×1e4/q", "usd_per_question"),
        ("sufficient", "judged_sufficient"),
        ("stable prefix", "stable_prefix_fraction"),
    ]
    for name, _ in cols:
        t.add_column(name, justify="left" if name == "category" else "right")
    for cat, s in rep.items():
        cells = [cat]
        for _, key in cols[1:]:
            v = s.get(key)
            if v is not None and key == "usd_per_question":
                v *= 1e4
            cells.append("-" if v is None else (str(v) if isinstance(v, int) else f"{v:.3f}"))
        t.add_row(*cells, style="bold" if cat == "all" else None)
    return t
