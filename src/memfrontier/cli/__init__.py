"""The ``memfrontier`` command line: eval, frontier, score, config, ingest, ask, search, train, sweep, export,
serve-model, mcp, serve, keys. ``memfrontier.cli:app`` is the console script; importing this package
registers every command on it."""

from __future__ import annotations

import os
import sys

from . import evaluate, memory, serve, sweep, train  # noqa: F401  (registers the commands)
from .app import RESUME_HINT, app, console, err, known_errors
from .options import store_location
from .progress import IngestRow
from .tables import frontier_table, route_table, tier_table

__all__ = [
    "RESUME_HINT",
    "IngestRow",
    "app",
    "console",
    "err",
    "frontier_table",
    "known_errors",
    "main",
    "route_table",
    "store_location",
    "tier_table",
]


def main():  # pragma: no cover
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    app()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
