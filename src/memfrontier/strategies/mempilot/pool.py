"""MemPilot's heterogeneous model pool as configuration (MemPilot Sec. 3.2, App. A.2, Table 3).

A pool *profile* is YAML: an opaque route id -> the price-book model it stands for, its input
modalities and parameter count (what the policy's model cards show), and how it is served
(``endpoint: openai`` through any OpenAI-compatible API, or ``embedded``: in-process llama.cpp,
the model named by the route's ``local_model`` - a registry name of
:data:`memfrontier.llm.local_models.LOCAL_MODELS` - or, without one, the run's embedded model).
Prices and latency profiles (Eq. 15-17) are *not* repeated here: they are the price book's entry
for ``model``, so a run's numbers have one source. Packaged profiles (``core/prices/pool-*.yaml``):

* ``table3`` - MemPilot's 12 routes on OpenRouter (needs network and ``$OPENROUTER_API_KEY``);
* ``local``  - the same 12 routes, cards, prices and latency profiles, every one *served by the
  run's embedded model* (the 270M by default; a clearly labelled stand-in so the whole loop runs
  offline: routing changes the recorded cost and latency, not the quality);
* ``bench``  - three routes of real, different sizes, each served by its own embedded model
  (Gemma 3 270M, Qwen2.5-Coder 0.5B and 1.5B Instruct; the Qwen models are installed by ``make
  bench-model``) and priced and latency-profiled as that model's own price-book entry, so cost,
  latency *and* quality differ per route. Its policy is priced as the model that runs it
  (``policy_price_as: null``), not as the paper's Qwen3-4B.

:class:`ModelPool` turns a profile into metered clients (one :class:`MeteredLLM` per route, made by
:meth:`~memfrontier.strategies.base.MemoryEnv.model` as standing for the route's model: priced as
that model unless the run prices every call as one model with ``price_as``; role ``delegate``),
built lazily so an unused remote route never connects. An embedded model is loaded once per
process (:func:`memfrontier.llm.embedded.load_llama`), however many routes or strategies use it.
A route's embedded model that is not installed is refused when the pool is made
(:class:`~memfrontier.llm.local_models.ModelNotInstalledError`, naming ``make bench-model``).
Image pixels reach a route only when it lists the ``image`` modality and is not served by a
text-only embedded model (:meth:`ModelPool.sees_pixels`); image parts sent to any other route are
dropped before the call.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, Field, field_validator, model_validator

from ...core.pricebook import PriceBook
from ...llm.base import ChatClient, Completion, Message
from ...llm.local_models import require_installed, resolve_local
from ...llm.metered import MeteredLLM

Endpoint = Literal["embedded", "openai"]
PROFILES = ("local", "table3", "bench")
_ID_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class Route(BaseModel):
    """One pool entry. ``model`` is a price-book id; ``api_model`` the name the endpoint expects
    (default ``model``); ``endpoint`` / ``base_url`` override the profile's; ``local_model``
    (embedded routes only) the registry name of the embedded model serving the route (default:
    the run's embedded model). Raises ValueError for an unknown ``local_model``."""

    id: str
    model: str
    modalities: list[Literal["text", "image"]] = Field(default_factory=lambda: ["text"])
    params: str = ""
    endpoint: Endpoint | None = None
    api_model: str | None = None
    base_url: str | None = None
    local_model: str | None = None

    @field_validator("id")
    @classmethod
    def _opaque(cls, v: str) -> str:
        if not _ID_RE.match(v):
            raise ValueError(f"route id {v!r} must be letters, digits, '_', '.', '-'")
        return v

    @field_validator("local_model")
    @classmethod
    def _registered(cls, v: str | None) -> str | None:
        return None if v is None else resolve_local(v).name  # ValueError listing the known names


class PoolProfile(BaseModel):
    """A pool profile (see the module docstring). ``policy_price_as``: the price-book model the
    policy's calls are priced as (Eq. 14; None = the model that runs the policy). Raises pydantic
    ValidationError on duplicate or missing routes, or a ``local_model`` on a non-embedded route."""

    name: str
    description: str = ""
    endpoint: Endpoint = "openai"
    base_url: str | None = None
    api_key_env: str | None = None
    policy_price_as: str | None = "qwen3-4b-instruct-2507"
    max_output_tokens: int = Field(512, ge=1)
    timeout_s: float = Field(60.0, gt=0)
    routes: list[Route]

    @model_validator(mode="after")
    def _unique(self) -> "PoolProfile":
        if not self.routes:
            raise ValueError("a pool needs at least one route")
        ids = [r.id for r in self.routes]
        dup = sorted({i for i in ids if ids.count(i) > 1})
        if dup:
            raise ValueError(f"duplicate route ids: {', '.join(dup)}")
        remote = [r.id for r in self.routes if r.local_model is not None and self.endpoint_of(r) != "embedded"]
        if remote:
            raise ValueError(f"local_model is for embedded routes only: {', '.join(remote)}")
        return self

    @classmethod
    def load(cls, spec: str | Path = "local") -> "PoolProfile":
        """A packaged profile by name (``local``, ``table3``, ``bench``) or a YAML file path. Raises
        FileNotFoundError for a missing file, ValueError for an unknown name or a malformed file."""
        if isinstance(spec, str) and spec in PROFILES:
            text = resources.files("memfrontier.core.prices").joinpath(f"pool-{spec}.yaml").read_text("utf-8")
            where = f"packaged pool {spec!r}"
        else:
            p = Path(spec)
            if p.suffix not in (".yaml", ".yml") and not p.exists():
                raise ValueError(f"unknown pool {spec!r}: give one of {', '.join(PROFILES)} or a YAML file")
            if not p.is_file():
                raise FileNotFoundError(f"pool file {p} does not exist")
            text, where = p.read_text("utf-8"), str(p)
        try:
            return cls.model_validate(yaml.safe_load(text))
        except Exception as e:  # yaml.YAMLError or pydantic.ValidationError
            raise ValueError(f"malformed pool {where}: {e}") from e

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.routes]

    def route(self, route_id: str) -> Route:
        """Raises KeyError naming the known ids for an unknown route."""
        for r in self.routes:
            if r.id == route_id:
                return r
        raise KeyError(f"no route {route_id!r} in pool {self.name!r}; known: {', '.join(self.ids)}")

    def endpoint_of(self, route: Route) -> Endpoint:
        return route.endpoint or self.endpoint

    def require_models(self) -> None:
        """Check that every route's named embedded model is installed (cheap: nothing is loaded).
        Raises :class:`~memfrontier.llm.local_models.ModelNotInstalledError` naming ``make bench-model``."""
        for r in self.routes:
            if r.local_model is not None:
                require_installed(r.local_model)

    def card(self, route_id: str) -> str:
        """The model card the policy sees: opaque id, input modalities, parameter count (nothing else)."""
        r = self.route(route_id)
        return f"- {r.id}: input {' + '.join(r.modalities)}; parameters {r.params or 'unknown'}"


class _RouteClient:
    """Sends a route's messages to its backend: image parts are dropped unless the route may see
    pixels, and the images sent are counted on the completion (latency proxy, Eq. 17)."""

    def __init__(self, client: ChatClient, pixels: bool):
        self.client = client
        self.pixels = pixels
        self.model_id = client.model_id

    @property
    def context_tokens(self) -> int:
        return self.client.context_tokens

    def count_tokens(self, text: str) -> int:
        return self.client.count_tokens(text)

    async def complete(self, messages: list[Message], **kw) -> Completion:
        n_img = 0
        out_msgs = []
        for m in messages:
            content = m.get("content")
            if isinstance(content, list):
                parts = [
                    p for p in content if self.pixels or not (isinstance(p, dict) and p.get("type") == "image_url")
                ]
                n_img += sum(1 for p in parts if isinstance(p, dict) and p.get("type") == "image_url")
                m = {**m, "content": parts}
            out_msgs.append(m)
        out = await self.client.complete(out_msgs, **kw)
        if n_img and not out.images:
            out = out.model_copy(update={"images": n_img})
        return out


class ModelPool:
    """Metered clients for a profile's routes (lazy).

    Args:
        profile: the :class:`PoolProfile` (or a name / path for :meth:`PoolProfile.load`).
        prices: the price book; every route's ``model`` and the policy's price must be in it
            (:class:`~memfrontier.core.pricebook.UnpricedModelError` at construction otherwise),
            and every route's ``local_model`` installed (:meth:`PoolProfile.require_models`).
        embedded: the client serving ``embedded`` routes without a ``local_model`` (share the
            run's model); built with ``make_llm("local")`` on first use when None. A route with a
            ``local_model`` gets ``make_llm("local:<local_model>")`` (the loaded model is shared).
        backends: route id -> a ChatClient that serves that route instead (e.g. a local server
            standing in for one API model).
    """

    def __init__(
        self,
        profile: PoolProfile | str | Path,
        prices: PriceBook,
        *,
        embedded: ChatClient | None = None,
        backends: dict[str, ChatClient] | None = None,
    ):
        self.profile = profile if isinstance(profile, PoolProfile) else PoolProfile.load(profile)
        self.prices = prices
        self._embedded = embedded
        self._backends = dict(backends or {})
        unknown = sorted(set(self._backends) - set(self.profile.ids))
        if unknown:
            raise KeyError(f"backends for unknown routes: {', '.join(unknown)}")
        self._clients: dict[str, _RouteClient] = {}
        if self.profile.policy_price_as is not None:
            prices.get(self.profile.policy_price_as)
        for r in self.profile.routes:
            prices.get(r.model)
        self.profile.require_models()

    @property
    def ids(self) -> list[str]:
        return self.profile.ids

    def is_vision(self, route_id: str) -> bool:
        """The route's card lists the image modality."""
        return "image" in self.profile.route(route_id).modalities

    def sees_pixels(self, route_id: str) -> bool:
        """Image pixels can reach the route: a vision card and a backend that is not the text-only embedded model."""
        r = self.profile.route(route_id)
        return "image" in r.modalities and self.profile.endpoint_of(r) != "embedded"

    def _backend(self, r: Route) -> ChatClient:
        from ...llm import make_llm

        if r.id in self._backends:
            return self._backends[r.id]
        if self.profile.endpoint_of(r) == "embedded":
            if r.local_model is not None:
                return make_llm(f"local:{r.local_model}")
            if self._embedded is None:
                self._embedded = make_llm("local")
            return self._embedded
        key = os.environ.get(self.profile.api_key_env) if self.profile.api_key_env else None
        return make_llm(
            f"openai:{r.api_model or r.model}",
            base_url=r.base_url or self.profile.base_url,
            api_key=key,
            timeout_s=self.profile.timeout_s,
            model_id=r.model,
            extra_body={"usage": {"include": True}},
        )

    def llm(self, route_id: str, env) -> MeteredLLM:
        """The metered client of ``route_id``, made by ``env.model`` (a
        :class:`~memfrontier.strategies.base.MemoryEnv`): priced and latency-profiled as the
        route's model, or as the run's ``price_as``. Raises KeyError for an unknown route."""
        if route_id not in self._clients:
            r = self.profile.route(route_id)
            self._clients[route_id] = _RouteClient(self._backend(r), self.sees_pixels(route_id))
        return env.model(self._clients[route_id], "delegate", stands_for=self.profile.route(route_id).model)


__all__ = ["PROFILES", "ModelPool", "PoolProfile", "Route"]
