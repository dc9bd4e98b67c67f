"""BudgetMem tiering strategies: how Low / Mid / High are realised (BudgetMem Sec. 4.2).

* :class:`ImplementationTiering` - Low = rules and patterns, Mid = a compact learned model run
  locally (MiniLM), High = an LLM call with the module's prompt (``direct`` style).
* :class:`ReasoningTiering` - one model; Low = direct, Mid = step-by-step, High = plan, act,
  reflect (prompt styles of :mod:`.prompts`).
* :class:`CapacityTiering` - the plan-act-reflect prompt on three models of increasing size: a
  preset of :data:`CAPACITY_PRESETS` (``hosted``, the default: the MemPilot pool's Llama 3.2 3B /
  3.1 8B / 3.3 70B, over an OpenAI-compatible API; ``local``: the embedded Gemma 3 270M / Qwen2.5
  0.5B / 1.5B, no network) or an explicit ``{low, mid, high}`` map. From a config:
  ``--set tiering=capacity --set tiering_options='{"models": "local"}'``.

A tiering never parses or post-processes by itself: it asks the module (duck-typed, see
:class:`memfrontier.strategies.budgetmem.modules.Module`) for its rules, its learned variant, its
prompt body, answer schema and parser. Every execution is written to the current ledger: LLM
calls by :class:`~memfrontier.llm.metered.MeteredLLM` under role ``budgetmem.<module>.<tier>``,
non-LLM tiers with :meth:`~memfrontier.core.ledger.Ledger.record_local` under role
``budgetmem.<module>``, model id ``rules`` / ``minilm``, ``usd=0`` and the measured wall time
(latency proxy 0). Models named by spec are made by
:meth:`~memfrontier.strategies.base.MemoryEnv.model`, so they follow the run's pricing
(price book, ``price_as``, ``allow_unpriced``).

A failed LLM call, an unusable output, or a call whose worst-case cost could cross the query's
hard budget (:class:`~memfrontier.core.ledger.BudgetExceededError`, counted
``budget.call_refused.<role>``) raises :class:`ModuleOutputError`; the module runner then falls
back to the next lower tier and counts it (``fallback.<module>.<tier>``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, ClassVar

from ...core.ledger import BudgetExceededError, current_ledger
from ...core.types import Budget
from ...llm import local_model
from ...llm.base import ChatClient, LLMError
from ...llm.local_models import require_installed
from ...llm.metered import MeteredLLM
from ...llm.parsing import parse_json
from . import prompts
from .config import TIERS

#: Capacity tiering default pool (MemPilot Table 3 / BudgetMem released ``model_tier``).
DEFAULT_CAPACITY_MODELS: dict[str, str] = {
    "low": "openai:meta-llama/llama-3.2-3b-instruct",
    "mid": "openai:meta-llama/llama-3.1-8b-instruct",
    "high": "openai:meta-llama/llama-3.3-70b-instruct",
}
#: Capacity tiering on the embedded models of the registry (270M / 0.5B / 1.5B parameters), each
#: priced as its own price-book entry; the Qwen models are installed by ``make bench-model``.
LOCAL_CAPACITY_MODELS: dict[str, str] = {
    "low": "local:gemma-3-270m",
    "mid": "local:qwen2.5-0.5b",
    "high": "local:qwen2.5-1.5b",
}
#: Named model sets of :class:`CapacityTiering` (``tiering_options: {models: NAME}``).
CAPACITY_PRESETS: dict[str, dict[str, str]] = {"hosted": DEFAULT_CAPACITY_MODELS, "local": LOCAL_CAPACITY_MODELS}


class ModuleOutputError(ValueError):
    """A tier produced no usable module output (the call failed or its output did not parse).

    ``reason``: a short name of what was wrong (``call_failed``, ``over_budget``, ``unparseable``,
    ``no_answer``, ``empty``, ``not_a_list``, ``wrong_count``, ``not_a_number``, ``unknown_chunk``,
    ``not_a_string``), counted as the event ``output_rejected.MODULE.TIER.REASON`` when the tier
    falls back, so a refused run can say why."""

    def __init__(self, message: str, reason: str = "invalid"):
        super().__init__(message)
        self.reason = reason


def lower_tier(tier: str) -> str | None:
    """The next cheaper tier (``high -> mid -> low -> None``)."""
    i = TIERS.index(tier)
    return TIERS[i - 1] if i > 0 else None


def record_local(module: str, model_id: str, wall_s: float) -> None:
    """Write a non-LLM module execution to the current ledger: $0, proxy 0, measured wall time."""
    ledger = current_ledger()
    if ledger is not None:
        ledger.record_local(f"budgetmem.{module}", wall_s, model_id=model_id)


def run_local(module, fn_name: str, model_id: str, query: str, module_input: Any) -> Any:
    """Run ``module.<fn_name>(query, module_input)`` (``rules`` / ``learned``) and record it."""
    t0 = time.perf_counter()
    out = getattr(module, fn_name)(query, module_input)
    record_local(module.name, model_id, time.perf_counter() - t0)
    return out


async def run_llm(
    module, query: str, module_input: Any, tier: str, llm: MeteredLLM, style: str, budget: Budget | None = None
) -> Any:
    """One schema-constrained LLM call for ``module`` in prompt ``style``; returns the module output.

    The reply is parsed defensively (:func:`~memfrontier.llm.parsing.parse_json`); the ``answer``
    field is taken, else (truncated reply) the ``draft`` of the reflect style, else a bare array.
    Raises :class:`ModuleOutputError` when the call fails, could cross the hard ``budget``
    (not made), or nothing usable comes back.
    """
    body = module.prompt_body(query, module_input)
    schema = prompts.output_schema(style, module.answer_schema(module_input))
    try:
        out = await llm.complete(
            prompts.messages(module.name, style, body),
            role=f"budgetmem.{module.name}.{tier}",
            max_tokens=module.max_tokens(style, module_input),
            temperature=0.0,
            json_schema=schema,
            budget=budget,
        )
    except BudgetExceededError as e:
        raise ModuleOutputError(f"{module.name}.{tier}: {e}", "over_budget") from e
    except LLMError as e:
        raise ModuleOutputError(f"{module.name}.{tier}: call failed: {e}", "call_failed") from e
    res = parse_json(out.text, expect=None)
    if not res.ok:
        raise ModuleOutputError(f"{module.name}.{tier}: {res.error}", "unparseable")
    value = res.value
    if isinstance(value, dict):
        value = value.get("answer", value.get("draft"))
    if value is None:
        raise ModuleOutputError(f"{module.name}.{tier}: no 'answer' in the reply", "no_answer")
    return module.from_llm(value, module_input)  # raises ModuleOutputError on a bad shape


def _model(env, spec: ChatClient | MeteredLLM | str, tier: str, base_url: str | None, **kw) -> MeteredLLM:
    """``env.model`` for a tier's model (``base_url`` / ``kw`` reach ``openai:`` specs only)."""
    if isinstance(spec, str) and not spec.strip().startswith("openai:"):
        base_url, kw = None, {}
    return env.model(spec, f"budgetmem.{tier}", base_url=base_url, **kw)


class Tiering:
    """Base class: ``execute(module, query, module_input, tier, env)`` -> module output."""

    name: str = ""

    def fingerprint(self, env) -> str:
        """What besides the input decides a tier's output (salts the module cache)."""
        raise NotImplementedError

    def uses_llm(self, tier: str) -> bool:
        raise NotImplementedError

    async def execute(self, module, query: str, module_input: Any, tier: str, env, budget: Budget | None = None) -> Any:
        """Run ``module`` at ``tier``; LLM calls that could cross the hard ``budget`` are not made."""
        raise NotImplementedError


class ImplementationTiering(Tiering):
    """Low = ``module.rules`` (model id ``rules``), Mid = ``module.learned`` (``minilm``),
    High = ``env.llm`` with the module prompt in ``high_style`` (default ``direct``)."""

    name = "implementation"

    def __init__(self, high_style: str = "direct"):
        if high_style not in prompts.STYLES:
            raise ValueError(f"unknown prompt style {high_style!r}")
        self.high_style = high_style

    def fingerprint(self, env) -> str:
        return f"{self.name}|{self.high_style}|{env.llm.model_id}"

    def uses_llm(self, tier: str) -> bool:
        return tier == "high"

    async def execute(self, module, query, module_input, tier, env, budget=None):
        if tier == "low":
            return run_local(module, "rules", "rules", query, module_input)
        if tier == "mid":
            return run_local(module, "learned", "minilm", query, module_input)
        if tier == "high":
            return await run_llm(module, query, module_input, tier, env.llm, self.high_style, budget)
        raise ValueError(f"unknown tier {tier!r}")


class ReasoningTiering(Tiering):
    """One model (``env.llm``, or ``llm`` if given); Low/Mid/High = direct / cot / reflect."""

    name = "reasoning"
    STYLE_OF: ClassVar[dict[str, str]] = {"low": "direct", "mid": "cot", "high": "reflect"}

    def __init__(self, llm: ChatClient | MeteredLLM | str | None = None, base_url: str | None = None):
        self._spec, self._base_url = llm, base_url

    def _model(self, env) -> MeteredLLM:
        return env.llm if self._spec is None else _model(env, self._spec, "reasoning", self._base_url)

    def fingerprint(self, env) -> str:
        return f"{self.name}|{self._model(env).model_id}"

    def uses_llm(self, tier: str) -> bool:
        return True

    async def execute(self, module, query, module_input, tier, env, budget=None):
        return await run_llm(module, query, module_input, tier, self._model(env), self.STYLE_OF[tier], budget)


class CapacityTiering(Tiering):
    """Low/Mid/High = three models of increasing size, all with the ``reflect`` prompt.

    ``models`` is a preset name of :data:`CAPACITY_PRESETS` (``hosted`` = the default
    :data:`DEFAULT_CAPACITY_MODELS`, which need an OpenAI-compatible ``base_url`` such as
    OpenRouter's; ``local`` = :data:`LOCAL_CAPACITY_MODELS`) or a map tier -> ``"openai:MODEL"``
    spec, ``"local[:NAME]"`` (an embedded model of the registry), a ChatClient or a MeteredLLM.
    Clients are built on first use by ``env.model`` (the run's price book, ``price_as`` and
    ``allow_unpriced``; an embedded model is priced as its own price-book entry and loaded once
    per process, whichever tier or module uses it).

    Raises ValueError for an unknown preset, tier set or style;
    :class:`~memfrontier.llm.local_models.ModelNotInstalledError` (naming ``make bench-model``)
    at construction when an embedded model it names is not installed - never a fallback.
    """

    name = "capacity"

    def __init__(
        self,
        models: Mapping[str, Any] | str | None = None,
        *,
        base_url: str | None = None,
        style: str = "reflect",
        **client_kw,
    ):
        if isinstance(models, str):
            if models not in CAPACITY_PRESETS:
                raise ValueError(
                    f"unknown capacity preset {models!r}; choose one of {', '.join(CAPACITY_PRESETS)} "
                    "or give {low, mid, high} model specs"
                )
            models = CAPACITY_PRESETS[models]
        models = dict(DEFAULT_CAPACITY_MODELS if models is None else models)
        missing = [t for t in TIERS if t not in models]
        if missing or set(models) - set(TIERS):
            raise ValueError(f"capacity tiering needs exactly the tiers {TIERS}, got {sorted(models)}")
        if style not in prompts.STYLES:
            raise ValueError(f"unknown prompt style {style!r}")
        for spec in models.values():
            entry = local_model(spec) if isinstance(spec, str) else None
            if entry is not None:
                require_installed(entry)
        self.specs, self._base_url, self._client_kw, self.style = (
            models,
            base_url,
            client_kw,
            style,
        )  # specs: tier -> model

    def model(self, tier: str, env) -> MeteredLLM:
        return _model(env, self.specs[tier], tier, self._base_url, **self._client_kw)

    def fingerprint(self, env) -> str:
        return f"{self.name}|{self.style}|" + "|".join(f"{t}={self.model(t, env).model_id}" for t in TIERS)

    def uses_llm(self, tier: str) -> bool:
        return True

    async def execute(self, module, query, module_input, tier, env, budget=None):
        return await run_llm(module, query, module_input, tier, self.model(tier, env), self.style, budget)


TIERING_CLASSES = {"implementation": ImplementationTiering, "reasoning": ReasoningTiering, "capacity": CapacityTiering}


def make_tiering(tiering: str | Tiering, **options) -> Tiering:
    """A tiering by name (``implementation`` / ``reasoning`` / ``capacity``) or the instance itself."""
    if isinstance(tiering, Tiering):
        if options:
            raise ValueError("options are given to a tiering by name only")
        return tiering
    try:
        cls = TIERING_CLASSES[tiering]
    except KeyError:
        raise ValueError(f"unknown tiering {tiering!r}; choose one of {', '.join(TIERING_CLASSES)}") from None
    return cls(**options)
