"""The single place where model calls are priced, timed and written to the ledger."""

from __future__ import annotations

import contextlib
import math
import time

from ..core.ledger import (
    BudgetExceededError,
    Call,
    count_event,
    current_ledger,
    current_stage,
)
from ..core.pricebook import PriceBook, UnpricedModelError
from ..core.types import Budget
from .base import ChatClient, Completion, LLMError, Message

#: Tokens allowed per message for the chat template around its content when a prompt's size is
#: predicted before the call (role markers, separators).
MESSAGE_OVERHEAD_TOKENS = 8


def _bad(x) -> bool:
    """A provider figure that cannot be used: not a number, not finite, or negative."""
    return not isinstance(x, (int, float)) or isinstance(x, bool) or not math.isfinite(x) or x < 0


class MeteredLLM:
    """Wraps a :class:`ChatClient`; every ``complete`` is recorded in the current ledger with its
    stage, role, model id, tokens, USD (MemoryCPT Eq. 4; the API's exact cost when it gives one),
    latency proxy (MemPilot Eq. 15/17) and measured wall time.

    Raises :class:`UnpricedModelError` at construction when the model is unknown to the price book
    and ``allow_unpriced`` is False, so a run fails before it spends anything. ``price_as`` prices
    (and latency-profiles) the calls as another book entry, e.g. the embedded model's tokens at
    Qwen3-14B rates, to read a local run in a hosted model's dollars; calls keep their real model id
    and record the entry they were priced as (``Call.priced_as``). Build clients through
    :meth:`memfrontier.strategies.base.MemoryEnv.model` so they follow the run's pricing.

    Provider figures are checked, never trusted blindly (a negative or non-finite cost or token
    count, ``cached_tokens > input_tokens``): the call is re-priced from its tokens (re-counted
    with :meth:`count_tokens` when the token counts themselves are unusable), the repair is named
    in ``Call.flags`` and counted as ``usage_repaired.<flag>``.
    """

    def __init__(
        self, client: ChatClient, prices: PriceBook, *, allow_unpriced: bool = False, price_as: str | None = None
    ):
        self.client = client
        self.prices = prices
        self.allow_unpriced = allow_unpriced
        self.price_as = price_as
        try:
            self.price = prices.get(price_as or client.model_id)
            self.priced_as = prices.resolve(price_as or client.model_id)
        except UnpricedModelError:
            if price_as or not allow_unpriced:
                raise
            self.price, self.priced_as = None, None

    @property
    def model_id(self) -> str:
        return self.client.model_id

    @property
    def context_tokens(self) -> int:
        return self.client.context_tokens

    def count_tokens(self, text: str) -> int:
        return self.client.count_tokens(text)

    # --- prediction: what a call will cost before it is made (hard budgets) ----------------------
    def prompt_tokens(self, messages: list[Message]) -> tuple[int, int]:
        """(input tokens, images) of ``messages`` as predicted before the call: each message's text
        in this model's tokenizer plus :data:`MESSAGE_OVERHEAD_TOKENS` for its template."""
        n_tok = n_img = 0
        for m in messages:
            content = m.get("content")
            if isinstance(content, list):
                for p in content:
                    if isinstance(p, dict) and p.get("type") == "image_url":
                        n_img += 1
                    elif isinstance(p, dict):
                        n_tok += self.count_tokens(str(p.get("text", "")))
            else:
                n_tok += self.count_tokens(content or "")
            n_tok += MESSAGE_OVERHEAD_TOKENS
        return n_tok, n_img

    def _usd(self, n_in: int, n_out: int, cached: int = 0, reasoning: int = 0) -> float | None:
        return self.price.usd(n_in, n_out, cached, reasoning) if self.price is not None else None

    def _proxy_s(self, n_in: int, n_out: int, n_img: int) -> float:
        profile = (self.price.latency if self.price else None) or self.prices.fallback_latency
        return profile.seconds(n_in, n_out, n_img) if profile else 0.0

    def _charged(self, messages: list[Message], new_input_tokens: int | None) -> tuple[int, int, int]:
        """(predicted input tokens, of which charged, images)."""
        n_in, n_img = self.prompt_tokens(messages)
        return n_in, n_in if new_input_tokens is None else min(max(new_input_tokens, 0), n_in), n_img

    def max_cost_usd(
        self, messages: list[Message], max_tokens: int, *, new_input_tokens: int | None = None
    ) -> float | None:
        """The most a call with ``messages`` and output capped at ``max_tokens`` can cost, USD
        (MemoryCPT Eq. 4 at the predicted input and the full output cap; with
        ``new_input_tokens`` only those are charged, MemPilot Eq. 14). None when unpriced."""
        _, charged, _ = self._charged(messages, new_input_tokens)
        return self._usd(charged, max_tokens)

    def max_proxy_s(self, messages: list[Message], max_tokens: int, *, new_input_tokens: int | None = None) -> float:
        """The latency proxy of that worst case, seconds (MemPilot Eq. 15-17)."""
        _, charged, n_img = self._charged(messages, new_input_tokens)
        return self._proxy_s(charged, max_tokens, n_img)

    def max_prompt_tokens(self, budget: Budget, max_tokens: int) -> int | None:
        """The largest prompt, in tokens, whose call with output at ``max_tokens`` fits every cap of
        ``budget`` (what is left of a question's budget: :meth:`~memfrontier.core.ledger.Ledger.remaining`),
        by the model's price (MemoryCPT Eq. 4) and latency profile (MemPilot Eq. 15); None when no
        cap applies (or an unpriced model meets only a USD cap). May be negative: not even an empty
        prompt fits."""
        caps = []
        if budget.max_tokens is not None:
            caps.append(budget.max_tokens - max_tokens)
        price = self.price
        if budget.max_usd is not None and price is not None:
            left = budget.max_usd - 1e-6 * price.output_usd_per_mtok * max_tokens
            caps.append(int(left / (1e-6 * price.input_usd_per_mtok)) if price.input_usd_per_mtok > 0 else 10**9)
        if budget.max_proxy_s is not None:
            profile = (price.latency if price else None) or self.prices.fallback_latency
            if profile is not None:
                left = budget.max_proxy_s - profile.base_s - profile.out_s_per_token * max_tokens
                caps.append(int(left / profile.in_s_per_token) if profile.in_s_per_token > 0 else 10**9)
        return min(caps) if caps else None

    def over_budget(
        self, messages: list[Message], max_tokens: int, budget: Budget | None, *, new_input_tokens: int | None = None
    ) -> str | None:
        """Why a call could cross ``budget`` given the current ledger's query-stage spend and the
        calls in flight (a message), or None when it cannot (or no ledger / no cap applies)."""
        ledger = current_ledger()
        if budget is None or ledger is None or current_stage() != "query":
            return None
        n_in, _, _ = self._charged(messages, new_input_tokens)
        return ledger.would_exceed(
            budget,
            usd=self.max_cost_usd(messages, max_tokens, new_input_tokens=new_input_tokens),
            tokens=n_in + max_tokens,
            proxy_s=self.max_proxy_s(messages, max_tokens, new_input_tokens=new_input_tokens),
        )

    # --- the call ---------------------------------------------------------------------------
    async def complete(
        self,
        messages: list[Message],
        *,
        role: str,
        budget: Budget | None = None,
        new_input_tokens: int | None = None,
        **kwargs,
    ) -> Completion:
        """Run one call as ``role`` (e.g. ``answerer``, ``judge``, ``segmenter``) and record it.

        ``budget``: a hard budget of the query stage; when the call's worst case
        (:meth:`over_budget`, output at ``max_tokens``) could cross it, no call is made:
        ``budget.call_refused.<role>`` is counted and :class:`BudgetExceededError` raised, for the
        caller to fall back visibly. ``new_input_tokens``: with ideal KV-prefix reuse (MemPilot
        Eq. 14, App. A.1) only the prompt's last ``new_input_tokens`` (appended since the previous
        turn) are charged and enter the latency proxy (Eq. 16); the rest of the prompt is recorded
        as ``cached_tokens`` at no cost. None: the whole prompt is charged.
        """
        max_tokens = int(kwargs.get("max_tokens", 256))
        ledger = current_ledger()
        reserve = contextlib.nullcontext()
        if budget is not None and ledger is not None:
            why = self.over_budget(messages, max_tokens, budget, new_input_tokens=new_input_tokens)
            if why is not None:
                ledger.count(f"budget.call_refused.{role}")
                raise BudgetExceededError(f"{role} call not made: {why}")
            n_in, _, _ = self._charged(messages, new_input_tokens)
            usd = self.max_cost_usd(messages, max_tokens, new_input_tokens=new_input_tokens)
            reserve = ledger.reserve(
                usd or 0.0, n_in + max_tokens, self.max_proxy_s(messages, max_tokens, new_input_tokens=new_input_tokens)
            )
        t0 = time.perf_counter()
        with reserve:
            try:
                out = await self.client.complete(messages, **kwargs)
            except LLMError as e:
                if ledger is not None:
                    ledger.record(
                        Call(
                            stage=current_stage(),
                            role=role,
                            model_id=self.model_id,
                            wall_s=time.perf_counter() - t0,
                            error=str(e)[:500],
                            usd=0.0,
                        )
                    )
                    ledger.count(f"llm_error.{role}")
                raise
        wall = time.perf_counter() - t0
        if ledger is not None:
            ledger.record(self._call(out, messages, role, new_input_tokens, wall))
        return out

    def _call(self, out: Completion, messages: list[Message], role: str, new_input: int | None, wall: float) -> Call:
        """The ledger entry of ``out``, with provider figures checked (see the class docstring)."""
        flags: list[str] = []
        n_in, cached, n_out, reasoning, n_img = (
            out.input_tokens,
            out.cached_tokens,
            out.output_tokens,
            out.reasoning_tokens,
            out.images,
        )
        if _bad(n_in):
            n_in = self.prompt_tokens(messages)[0]
            flags.append("input_tokens_rejected")
        if _bad(n_out):
            n_out = self.count_tokens(out.text or "")
            flags.append("output_tokens_rejected")
        if _bad(cached):
            cached = 0
            flags.append("cached_tokens_rejected")
        elif cached > n_in:
            cached = n_in
            flags.append("cached_tokens_clamped")
        if _bad(reasoning):
            reasoning = 0
            flags.append("reasoning_tokens_rejected")
        elif reasoning > n_out:
            reasoning = n_out
            flags.append("reasoning_tokens_clamped")
        if _bad(n_img):
            n_img = 0
            flags.append("images_rejected")
        n_in, cached, n_out, reasoning, n_img = int(n_in), int(cached), int(n_out), int(reasoning), int(n_img)
        # free under ideal KV-prefix reuse (MemPilot Eq. 14): all but the newly appended tokens
        prefix = 0 if new_input is None else n_in - min(max(int(new_input), 0), n_in)
        paid_cached = max(cached - prefix, 0)
        exact = out.exact_usd
        if exact is not None and _bad(exact):
            flags.append("provider_cost_rejected")
            exact = None
        if exact is not None:
            usd, usd_exact = float(exact), True
        else:
            usd, usd_exact = self._usd(n_in - prefix, n_out, paid_cached, reasoning), False
        for f in flags:
            count_event(f"usage_repaired.{f}")
        return Call(
            stage=current_stage(),
            role=role,
            model_id=self.model_id,
            input_tokens=n_in,
            cached_tokens=max(cached, prefix),
            output_tokens=n_out,
            reasoning_tokens=reasoning,
            images=n_img,
            usd=usd,
            usd_exact=usd_exact,
            unpriced=usd is None,
            priced_as=self.priced_as,
            proxy_s=self._proxy_s(n_in - prefix, n_out, n_img),
            wall_s=wall,
            flags=flags,
        )
