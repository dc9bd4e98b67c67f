"""MemPilot's search recipes (run by :func:`~memfrontier.retrieve.hybrid.hybrid_search`)."""

from __future__ import annotations

from ...retrieve.recipes import Recipe

#: MemPilot RETRIEVE: dense top-k over the compressed bank (cosine is the hit score).
MEMPILOT_BANK = Recipe(name="mempilot_bank", retrievers=("dense",), candidates="all", kind="compressed")
#: MemPilot CURATE's raw evidence: dense top-k raw chunks.
MEMPILOT_RAW = Recipe(name="mempilot_raw", retrievers=("dense",))

RECIPES: dict[str, Recipe] = {r.name: r for r in (MEMPILOT_BANK, MEMPILOT_RAW)}

__all__ = ["MEMPILOT_BANK", "MEMPILOT_RAW", "RECIPES"]
