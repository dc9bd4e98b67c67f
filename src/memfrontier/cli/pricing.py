"""How the command line labels a USD figure: a model whose price-book entry is a proxy (``proxy_for``:
a local model read at a hosted model's price, or a nominal price) has its dollars called proxy USD,
with what they stand for, wherever a cost is printed."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path


def proxy_prices(
    models: Iterable[str | None], *, priced_as: str | None = None, price_book: str | Path | None = None
) -> dict[str, str]:
    """``{model id: what its price stands for}`` for the models (or the ``priced_as`` entry every
    call was priced as) whose price-book entry is a proxy; ``{}`` when every one is priced at its
    own price, is unknown to the book, or the book cannot be read."""
    from ..core.pricebook import PriceBook

    try:
        book = PriceBook.load(price_book)
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    for model in [priced_as] if priced_as else [m for m in models if m]:
        canon = book.resolve(model)
        if canon is not None and book.models[canon].proxy_for:
            out[model] = book.models[canon].proxy_for
    return out


def usd_label(
    models: Iterable[str | None], *, priced_as: str | None = None, price_book: str | Path | None = None
) -> str:
    """What follows a printed dollar figure: ``"(USD)"`` for models at their own price,
    ``"(proxy USD: FOR)"`` when the book's entry is a proxy (``FOR`` its ``proxy_for``; one clause
    per model when several differ)."""
    proxies = proxy_prices(models, priced_as=priced_as, price_book=price_book)
    if not proxies:
        return "(USD)"
    if len(set(proxies.values())) == 1:
        return f"(proxy USD: {next(iter(proxies.values()))})"
    return "(proxy USD: " + "; ".join(f"{m}: {p}" for m, p in proxies.items()) + ")"


def proxy_caption(
    models: Iterable[str | None], *, priced_as: str | None = None, price_book: str | Path | None = None
) -> str | None:
    """A table caption saying the table's USD are proxy prices (and of what), or None."""
    proxies = proxy_prices(models, priced_as=priced_as, price_book=price_book)
    if not proxies:
        return None
    return "USD are proxy prices: " + "; ".join(f"{m}: {p}" for m, p in proxies.items())


def run_proxy_caption(summaries: Iterable[dict]) -> str | None:
    """:func:`proxy_caption` for the models of run summaries (``summary.json``: provenance
    ``answer_model``, ``memory_model``, ``priced_as``; config ``price_book``)."""
    proxies: dict[str, str] = {}
    for s in summaries:
        prov, cfg = s.get("provenance") or {}, s.get("config") or {}
        proxies.update(
            proxy_prices(
                (prov.get("answer_model"), prov.get("memory_model")),
                priced_as=prov.get("priced_as"),
                price_book=cfg.get("price_book"),
            )
        )
    if not proxies:
        return None
    return "USD are proxy prices: " + "; ".join(f"{m}: {p}" for m, p in proxies.items())
