"""The single place where model calls are priced, timed and written to the ledger."""

from __future__ import annotations

import time

from ..core.ledger import Call, current_ledger, current_stage
from ..core.pricebook import PriceBook, UnpricedModelError
from .base import ChatClient, Completion, LLMError, Message


class MeteredLLM:
    """Wraps a :class:`ChatClient`; every ``complete`` is recorded in the current ledger with its
    stage, role, model id, tokens, USD (MemoryCPT Eq. 4; the API's exact cost when it gives one),
    latency proxy (MemPilot Eq. 15/17) and measured wall time.

    Raises :class:`UnpricedModelError` at construction when the model is unknown to the price book
    and ``allow_unpriced`` is False, so a run fails before it spends anything. ``price_as`` prices
    (and latency-profiles) the calls as another book entry, e.g. the embedded model's tokens at
    Qwen3-14B rates, to read a local run in a hosted model's dollars; calls keep their real model id.
    """

    def __init__(self, client: ChatClient, prices: PriceBook, *, allow_unpriced: bool = False,
                 price_as: str | None = None):
        self.client = client
        self.prices = prices
        self.allow_unpriced = allow_unpriced
        self.price_as = price_as
        try:
            self.price = prices.get(price_as or client.model_id)
        except UnpricedModelError:
            if price_as or not allow_unpriced:
                raise
            self.price = None

    @property
    def model_id(self) -> str:
        return self.client.model_id

    @property
    def context_tokens(self) -> int:
        return self.client.context_tokens

    def count_tokens(self, text: str) -> int:
        return self.client.count_tokens(text)

    def _proxy_s(self, n_in: int, n_out: int, n_img: int) -> float:
        profile = (self.price.latency if self.price else None) or self.prices.fallback_latency
        return profile.seconds(n_in, n_out, n_img) if profile else 0.0

    async def complete(self, messages: list[Message], *, role: str, **kwargs) -> Completion:
        """Run one call as ``role`` (e.g. ``answerer``, ``judge``, ``segmenter``) and record it."""
        t0 = time.perf_counter()
        ledger = current_ledger()
        try:
            out = await self.client.complete(messages, **kwargs)
        except LLMError as e:
            if ledger is not None:
                ledger.record(Call(stage=current_stage(), role=role, model_id=self.model_id,
                                   wall_s=time.perf_counter() - t0, error=str(e)[:500], usd=0.0))
                ledger.count(f"llm_error.{role}")
            raise
        wall = time.perf_counter() - t0
        if out.exact_usd is not None:
            usd, exact, unpriced = out.exact_usd, True, False
        elif self.price is not None:
            usd = self.price.usd(out.input_tokens, out.output_tokens, out.cached_tokens, out.reasoning_tokens)
            exact, unpriced = False, False
        else:
            usd, exact, unpriced = None, False, True
        if ledger is not None:
            ledger.record(Call(
                stage=current_stage(), role=role, model_id=self.model_id,
                input_tokens=out.input_tokens, cached_tokens=out.cached_tokens,
                output_tokens=out.output_tokens, reasoning_tokens=out.reasoning_tokens, images=out.images,
                usd=usd, usd_exact=exact, unpriced=unpriced,
                proxy_s=self._proxy_s(out.input_tokens, out.output_tokens, out.images), wall_s=wall,
            ))
        return out
