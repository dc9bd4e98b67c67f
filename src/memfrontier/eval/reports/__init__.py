"""Run reports: the summary tables, and the report of a strategy whose context carries a typed meta
of its own (``Strategy.meta_model``), read through that model (:func:`meta_report`)."""

from __future__ import annotations

from pathlib import Path


def meta_report(meta_model: type | None, predictions: Path):
    """The rich table of a run whose strategy's ``meta_model`` is ``meta_model``, from its
    ``predictions.jsonl``; None for a strategy without one. FileNotFoundError when the file is
    missing."""
    from ...strategies.automem.meta import AutoMemMeta
    from ...strategies.mempilot.meta import MemPilotMeta

    if meta_model is MemPilotMeta:
        from .mempilot import read_rows, run_stats, stats_table

        return stats_table(run_stats(read_rows(predictions)))
    if meta_model is AutoMemMeta:
        from .automem import automem_table

        return automem_table(predictions)
    return None


__all__ = ["meta_report"]
