"""The optional extras of the package (``pip install 'memfrontier[EXTRA]'``) and the check that a
feature's extra is installed before it imports that extra's packages.

The core (``pip install memfrontier``) holds the memory, the ``rag`` / ``longctx`` / ``oracle``
strategies, the SQLite store, the embedded model, the embeddings, the evaluation and the CLI.
Each extra adds one concern: ``serve`` (the REST service, a local model served over HTTP),
``postgres`` (the PostgreSQL store and its embedded server), ``mcp`` (the MCP server), ``graph``
(AutoMEM's graph index), ``train`` (LoRA / GRPO training, the strategy router's fit, the Hugging
Face backend), ``ray``, ``neo4j``; ``all`` is every one of them.
"""

from __future__ import annotations

import importlib.util


class MissingExtraError(ImportError):
    """A feature was used whose optional extra is not installed; the message names the extra and
    the ``pip install`` command that adds it."""

    def __init__(self, feature: str, extra: str, missing: list[str]):
        self.feature, self.extra, self.missing = feature, extra, list(missing)
        super().__init__(
            f"{feature} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'memfrontier[{extra}]'",
            name=missing[0] if missing else None,
        )


def missing_modules(*modules: str) -> list[str]:
    """The names among ``modules`` (importable top-level module names, e.g. ``"psycopg"``) that
    cannot be found; imports nothing."""
    out = []
    for m in modules:
        try:
            found = importlib.util.find_spec(m) is not None
        except (ImportError, ValueError):  # a broken or half-installed package counts as missing
            found = False
        if not found:
            out.append(m)
    return out


def require_extra(extra: str, *modules: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when any of ``modules`` is not installed;
    ``feature`` says what needed it (``"memfrontier serve"``, ``"a postgresql:// store"``)."""
    missing = missing_modules(*modules)
    if missing:
        raise MissingExtraError(feature, extra, missing)
