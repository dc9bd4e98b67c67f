"""Named configurations: a strategy with options under a name of its own, usable wherever a
strategy name is (``Memory.ask(strategy=...)``, ``--strategy``, REST and MCP, a frontier spec's
``strategy``). A name resolves to its strategy and options before anything else reads them, so a
run under a name is the same run as one under the strategy and its options (same ``run.json``
identity, same ``config_hash``); options given with the name override its own.

The configurations are those the frontier measured on LoCoMo's whole test split and the docs
recommend (``docs/which-memory.md``); their options were chosen on the training pool with
``benchmarks/bench_retrieval.py``.
"""

from __future__ import annotations

import copy
from typing import Any

_TURNS: dict[str, Any] = {"unit": "turn", "retrievers": ["dense", "bm25", "chunk"], "k": 64, "max_tokens": 672}

#: name -> (strategy, options).
NAMED_CONFIGURATIONS: dict[str, tuple[str, dict[str, Any]]] = {
    # single turns ranked by turn dense + BM25 + their chunk's rank (RRF), taken in rank order within
    # 672 retriever tokens, grouped by session and day under its date
    "rag-turns": ("rag", _TURNS),
    # rag-turns' 64 candidates re-ordered by the learned turn reranker (trained on the training
    # pool's gold evidence: memfrontier train turn-reranker), read as "Ana: text"
    "rag-turns-rr": ("rag", {**_TURNS, "turn_style": "colon", "rerank": True}),
}


def resolve_named(name: str, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """``(strategy, options)`` of ``name``: for a named configuration its strategy and its options
    overridden by ``options``; for any other name ``name`` and ``options`` as given (``{}`` for
    None). Never raises: an unknown name is the strategy registry's to refuse."""
    if name not in NAMED_CONFIGURATIONS:
        return name, dict(options or {})
    strategy, own = NAMED_CONFIGURATIONS[name]
    return strategy, {**copy.deepcopy(own), **(options or {})}


__all__ = ["NAMED_CONFIGURATIONS", "resolve_named"]
