"""The versioned price book: USD per 1M tokens and latency profiles per model id.

A model that is not in the book raises :class:`UnpricedModelError`; a caller may opt in to
``allow_unpriced=True``, in which case the call is recorded with ``unpriced=True`` and
``usd=None`` (never a silent $0).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import BaseModel, Field

DEFAULT_BOOK = "v1.yaml"


class UnpricedModelError(KeyError):
    """Raised when a call's model id has no price-book entry and unpriced calls were not allowed."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else "unpriced model"


class LatencyProfile(BaseModel):
    """Affine latency proxy phi_m = (b, a_in, a_out, a_img); MemPilot Eq. 15-17. Units: s, s/token, s/image."""

    base_s: float
    in_s_per_token: float
    out_s_per_token: float
    img_s_per_image: float = 0.0

    def seconds(self, n_in: int, n_out: int, n_img: int = 0) -> float:
        """L = b + a_in*n_in + a_out*n_out + a_img*n_img seconds (MemPilot Eq. 15 / Eq. 17)."""
        return self.base_s + self.in_s_per_token * n_in + self.out_s_per_token * n_out + self.img_s_per_image * n_img


class ModelPrice(BaseModel):
    """Prices in USD per 1M tokens; ``cached_input`` defaults to the input price when a provider gives none.
    ``source`` cites where the numbers come from; ``proxy_for`` is set when they are not this
    model's own price but a hosted model's of the same size class (a local model read in hosted
    dollars)."""

    input_usd_per_mtok: float = Field(ge=0)
    output_usd_per_mtok: float = Field(ge=0)
    cached_input_usd_per_mtok: float | None = Field(default=None, ge=0)
    latency: LatencyProfile | None = None
    aliases: list[str] = Field(default_factory=list)
    source: str = ""
    proxy_for: str | None = None

    def usd(self, input_tokens: int, output_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> float:
        """USD of one call; MemoryCPT Eq. 4 / MemPilot Eq. 14.

        ``input_tokens`` includes ``cached_tokens`` (as the OpenAI usage object reports them);
        ``output_tokens`` includes ``reasoning_tokens``. Neither is counted twice.
        """
        if cached_tokens > input_tokens:
            raise ValueError(f"cached_tokens ({cached_tokens}) exceeds input_tokens ({input_tokens})")
        cached_price = (
            self.cached_input_usd_per_mtok if self.cached_input_usd_per_mtok is not None else self.input_usd_per_mtok
        )
        return 1e-6 * (
            self.input_usd_per_mtok * (input_tokens - cached_tokens)
            + cached_price * cached_tokens
            + self.output_usd_per_mtok * output_tokens
        )


class PriceBook(BaseModel):
    """A versioned mapping model id -> :class:`ModelPrice`. Lookup is case-insensitive and honours aliases."""

    version: str
    models: dict[str, ModelPrice]
    roles: dict[str, str] = Field(default_factory=dict)
    fallback_latency: LatencyProfile | None = None

    def _index(self) -> dict[str, str]:
        idx = {}
        for mid, price in self.models.items():
            idx[mid.lower()] = mid
            for a in price.aliases:
                idx[a.lower()] = mid
        return idx

    def resolve(self, model_id: str) -> str | None:
        """The canonical id for ``model_id`` (or an alias), or None."""
        return self._index().get(model_id.lower())

    def get(self, model_id: str) -> ModelPrice:
        """Raises UnpricedModelError for an unknown id."""
        canon = self.resolve(model_id)
        if canon is None:
            raise UnpricedModelError(
                f"model {model_id!r} is not in price book {self.version!r}; add it to a price book "
                f"(--price-book FILE; price_book= in Python) or allow unpriced calls (--allow-unpriced; "
                "allow_unpriced=True) to record its calls as unpriced"
            )
        return self.models[canon]

    def for_role(self, role: str) -> ModelPrice:
        """The price of the model that the book maps a paper role to (e.g. ``memorycpt.summarizer``)."""
        if role not in self.roles:
            raise UnpricedModelError(f"price book {self.version!r} maps no model to role {role!r}")
        return self.get(self.roles[role])

    @classmethod
    def load(cls, path: str | Path | None = None) -> "PriceBook":
        """Load a YAML price book; ``None`` loads the packaged default. Raises ValueError on a malformed file."""
        if path is None:
            text = resources.files("memfrontier.core.prices").joinpath(DEFAULT_BOOK).read_text("utf-8")
            where = f"packaged {DEFAULT_BOOK}"
        else:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"price book {p} does not exist")
            text, where = p.read_text("utf-8"), str(p)
        try:
            data = yaml.safe_load(text)
            return cls.model_validate(data)
        except Exception as e:  # yaml.YAMLError or pydantic.ValidationError
            raise ValueError(f"malformed price book {where}: {e}") from e
