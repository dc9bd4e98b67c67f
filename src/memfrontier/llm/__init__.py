"""Model access: the :class:`ChatClient` protocol, its backends, metering and output parsing.

:data:`DEFAULT_LLM` (``"local:qwen2.5-1.5b"``, the embedded Qwen2.5-Coder-1.5B-Instruct) is the
default model of ``Memory.open``, every CLI command, ``memfrontier serve`` and ``mcp``;
:func:`default_llm` reads it at call time, with the environment variable ``MEMFRONTIER_LLM``
overriding it (the test suite sets ``local``); both live in :mod:`memfrontier.llm.defaults`.
``make_llm("local")`` is the packaged Gemma 3 270M (llama-cpp-python, no network);
``make_llm("local:NAME")`` a model of the registry :data:`memfrontier.llm.local_models.LOCAL_MODELS`
(installed by ``python -m memfrontier.llm.local_models install NAME``);
``make_llm("openai:MODEL", base_url=...)`` is any OpenAI-compatible endpoint. Backends are
imported lazily so that importing :mod:`memfrontier.llm` loads neither llama.cpp nor the SDK.
"""

from __future__ import annotations

from typing import Any

from .base import ChatClient, Completion, LLMError, LLMTimeoutError, Message
from .defaults import DEFAULT_LLM, LLM_ENV, default_llm

__all__ = [
    "DEFAULT_LLM",
    "LLM_ENV",
    "ChatClient",
    "Completion",
    "LLMError",
    "LLMTimeoutError",
    "Message",
    "check_llm_spec",
    "default_llm",
    "local_model",
    "make_llm",
    "parse_llm_spec",
    "served_base_url",
]


def local_model(spec: str):
    """The registry entry (:class:`~memfrontier.llm.local_models.LocalModel`) that an embedded
    spec of :func:`make_llm` runs: ``"local"`` / ``"embedded"`` -> the packaged Gemma 3 270M,
    ``"local:NAME"`` -> ``NAME``; None for any other spec (``openai:``, ``hf``). Loads nothing.
    Raises ValueError for ``"local:"`` without a name or an unknown ``NAME``."""
    if (spec or "").strip().partition(":")[0] not in ("local", "embedded"):
        return None
    _, name = parse_llm_spec(spec)
    from .local_models import resolve_local

    return resolve_local(name or None)


def make_llm(spec: str, *, base_url: str | None = None, **kw: Any) -> ChatClient:
    """Build a client from a spec string.

    * ``"local"`` (also ``"embedded"``) / ``"local:NAME"``:
      :class:`~memfrontier.llm.embedded.EmbeddedLLM` running the registry model ``NAME``
      (``"local"``: ``gemma-3-270m``; ``qwen2.5-1.5b``, ``qwen2.5-0.5b``); ``kw`` go to its
      constructor (``n_ctx``, ``repeat_penalty``, ``model_path``...). ``base_url`` must be None.
      A registered model that is not installed raises
      :class:`~memfrontier.llm.local_models.ModelNotInstalledError` (an :class:`LLMError`).
    * ``"openai:MODEL"``: :class:`~memfrontier.llm.openai_compat.OpenAICompatLLM` for ``MODEL``
      (everything after the first colon, so ``"openai:qwen/qwen3-8b:free"`` works) at
      ``base_url``; ``kw`` go to its constructor (``api_key``, ``timeout_s``, ``max_retries``,
      ``model_id``, ``context_tokens``, ``schema_format``...).
    * ``"hf"`` / ``"hf:PATH"``: :class:`~memfrontier.llm.hf.HFLLM` (transformers, local) over the
      packaged Gemma GGUF / the checkpoint directory or ``.gguf`` file ``PATH``; ``kw`` go to its
      constructor (``adapter`` = a PEFT adapter dir, ``model_id``, ``context_tokens``, ``device``).
      ``base_url`` must be None.

    Raises ValueError for an unknown or malformed spec.
    """
    kind, name = parse_llm_spec(spec, base_url)
    if kind == "local":
        from .embedded import EmbeddedLLM

        return EmbeddedLLM(model=name or None, **kw)
    if kind == "openai":
        from .openai_compat import OpenAICompatLLM

        return OpenAICompatLLM(name, base_url=base_url, **kw)
    from .hf import HFLLM

    return HFLLM(name or None, **kw)


def parse_llm_spec(spec: str, base_url: str | None = None) -> tuple[str, str]:
    """``(kind, name)`` of a :func:`make_llm` spec: ``("local", NAME or "")``, ``("openai", MODEL)``
    or ``("hf", PATH or "")``. Loads and constructs nothing. Raises ValueError for an unknown or
    malformed spec, or a ``base_url`` given to a backend that runs in-process."""
    s = (spec or "").strip()
    head, _, name = s.partition(":")
    if head in ("local", "embedded"):
        if base_url is not None:
            raise ValueError(f"make_llm({s!r}) takes no base_url (an embedded model runs in-process)")
        if ":" in s and not name.strip():
            raise ValueError(f"no model name in LLM spec {spec!r} (expected 'local:NAME')")
        return "local", name.strip()
    if s.startswith("openai:"):
        model = s[len("openai:") :].strip()
        if not model:
            raise ValueError(f"no model name in LLM spec {spec!r} (expected 'openai:MODEL')")
        return "openai", model
    if s == "hf" or s.startswith("hf:"):
        if base_url is not None:
            raise ValueError("make_llm('hf') takes no base_url")
        return "hf", s[len("hf:") :].strip() if s.startswith("hf:") else ""
    raise ValueError(f"unknown LLM spec {spec!r}: expected 'local', 'local:NAME', 'openai:MODEL', 'hf' or 'hf:PATH'")


def served_base_url(spec: str, base_url: str | None) -> str | None:
    """``base_url`` when ``spec`` names a server's model (``openai:MODEL``), else None: a run's
    --base-url is its server's, and an embedded or ``hf`` model beside it (a judge, a role) runs
    in-process."""
    return base_url if (spec or "").strip().startswith("openai:") else None


def check_llm_spec(spec: str, base_url: str | None = None) -> None:
    """Check, before a run writes anything, that ``spec`` (a :func:`make_llm` spec) can be built:
    it parses (:func:`parse_llm_spec`) and an embedded model is known and installed. Loads no model.
    Raises ValueError (unknown or malformed spec, unknown local model) or
    :class:`~memfrontier.llm.local_models.ModelNotInstalledError` (an :class:`LLMError` saying
    how to install it)."""
    kind, name = parse_llm_spec(spec, base_url)
    if kind == "local":
        from .local_models import require_installed

        require_installed(name or None)
