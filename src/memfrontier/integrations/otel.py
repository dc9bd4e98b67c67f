"""Questions as OpenTelemetry traces, with what they cost (``pip install 'memfrontier[otel]'``).

>>> from memfrontier.integrations.otel import instrument
>>> instrument()          # spans go to the global tracer provider            # doctest: +SKIP

After :func:`instrument`, every question the facade answers (``Memory.ask``, REST, MCP, ``eval``)
becomes one span ``memfrontier.ask {strategy}`` (the name asked for: ``rag-turns-rr``) with a child
span per model call and per unit of local work its ledger recorded (``memfrontier.local {role}``:
BudgetMem's router and rules), in the caller's current trace; a question refused before its
answer step (an empty scope, an unbuilt view) is a span too. The model calls follow the
OpenTelemetry GenAI semantic conventions: ``chat {model}`` spans with
``gen_ai.operation.name`` (``chat``), ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` and
``gen_ai.usage.output_tokens``. The conventions have no cost attribute, so ours carry it:

====================================  ===========================================================
``memfrontier.cost.usd``              the call's (the question's, on the ask span) USD
``memfrontier.latency.proxy_s``       the latency proxy (MemPilot Eq. 15-19), seconds
``memfrontier.call.role`` / ``.stage``  the role (``answerer``, ``policy``...) and stage
``memfrontier.strategy``              the strategy that answered, ``memfrontier.config_hash`` its
                                      configuration
``memfrontier.budget.max_usd`` ...    the effective budget's caps (``max_usd``, ``max_tokens``,
                                      ``max_proxy_s``) when set, and ``memfrontier.budget.spent_usd``
                                      / ``.spent_tokens`` / ``.spent_proxy_s`` (query stage)
``memfrontier.events.<name>``         each counted event (``budget.call_refused.answerer``...)
``memfrontier.fallbacks``             outputs replaced by a fallback
====================================  ===========================================================

A question refused or failed ends its span with status ERROR and the exception recorded. The spans
are written from the ledger once the question ends (a call's start is its end less its wall
time), so tracing adds no work to the calls themselves. Nothing is traced until :func:`instrument`
is called, in the application, or by :data:`OTEL_ENV` in the command line (``ask``, ``eval``,
``frontier``, ``mcp``) and the service's workers: ``MEMFRONTIER_OTEL=console`` prints the spans to
stderr, ``MEMFRONTIER_OTEL=global`` sends them to the global provider that ``opentelemetry-instrument``
sets up from the standard ``OTEL_*`` environment variables. ``instrument()`` called again replaces
the provider it was given before.
"""

from __future__ import annotations

import os
import sys

from ..core.extras import require_extra
from ..core.ledger import Call
from ..core.observers import AskRecord, add_ask_observer, remove_ask_observer

require_extra("otel", "opentelemetry.sdk", feature="memfrontier.integrations.otel")

from opentelemetry import trace  # noqa: E402
from opentelemetry.trace import Status, StatusCode  # noqa: E402

#: The instrumentation scope of the spans.
TRACER_NAME = "memfrontier"


def _ns(unix_s: float) -> int:
    return int(unix_s * 1e9)


def call_attributes(call: Call) -> dict[str, object]:
    """A model call's span attributes (GenAI conventions plus ``memfrontier.*``); local work (a
    router, rules: ``Call.local``) carries only the ``memfrontier.*`` ones."""
    if call.local:
        return {
            "memfrontier.call.role": call.role,
            "memfrontier.call.stage": call.stage,
            "memfrontier.local.model": call.model_id,
        }
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": call.model_id,
        "gen_ai.usage.input_tokens": call.input_tokens,
        "gen_ai.usage.output_tokens": call.output_tokens,
        "memfrontier.call.role": call.role,
        "memfrontier.call.stage": call.stage,
        "memfrontier.cost.usd": call.usd or 0.0,
        "memfrontier.latency.proxy_s": call.proxy_s,
    }
    if call.cached_tokens:
        attrs["memfrontier.usage.cached_tokens"] = call.cached_tokens
    if call.unpriced:
        attrs["memfrontier.cost.unpriced"] = True
    if call.flags:
        attrs["memfrontier.call.flags"] = list(call.flags)
    return attrs


def ask_attributes(record: AskRecord) -> dict[str, object]:
    """The question's span attributes: strategy, configuration, budget and what it spent."""
    usage = record.ledger.usage()
    q = usage.query
    attrs: dict[str, object] = {
        "memfrontier.strategy": record.strategy,
        "memfrontier.cost.usd": sum(s.usd for s in usage.by_stage.values()),
        "memfrontier.budget.spent_usd": q.usd,
        "memfrontier.budget.spent_tokens": q.input_tokens + q.output_tokens,
        "memfrontier.budget.spent_proxy_s": q.proxy_s,
        "gen_ai.usage.input_tokens": sum(s.input_tokens for s in usage.by_stage.values()),
        "gen_ai.usage.output_tokens": sum(s.output_tokens for s in usage.by_stage.values()),
        "memfrontier.fallbacks": len(usage.fallbacks),
    }
    if (config_hash := record.config_hash()) is not None:
        attrs["memfrontier.config_hash"] = config_hash
    for cap, value in record.budget.model_dump().items():
        if value is not None:
            attrs[f"memfrontier.budget.{cap}"] = value
    for event, n in usage.events.items():
        attrs[f"memfrontier.events.{event}"] = n
    return attrs


_provider: trace.TracerProvider | None = None


def _observe(record: AskRecord) -> None:
    tracer = (_provider or trace.get_tracer_provider()).get_tracer(TRACER_NAME)
    calls = list(record.ledger.calls)
    starts = [c.ended_unix_s - c.wall_s for c in calls if c.ended_unix_s is not None]
    start = min([record.started_unix_s, *starts])  # a build run by the same ask came first
    span = tracer.start_span(
        f"memfrontier.ask {record.strategy}", start_time=_ns(start), attributes=ask_attributes(record)
    )
    parent = trace.set_span_in_context(span)
    for c in calls:
        end = c.ended_unix_s if c.ended_unix_s is not None else record.ended_unix_s
        name = f"memfrontier.local {c.role}" if c.local else f"chat {c.model_id}"
        child = tracer.start_span(name, context=parent, start_time=_ns(end - c.wall_s), attributes=call_attributes(c))
        if c.error is not None:
            child.set_status(Status(StatusCode.ERROR, c.error))
        child.end(end_time=_ns(end))
    if record.error is not None:
        span.record_exception(record.error)
        span.set_status(Status(StatusCode.ERROR, f"{type(record.error).__name__}: {record.error}"))
    span.end(end_time=_ns(max(record.ended_unix_s, start)))


def instrument(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace every question from now on (idempotent), through ``tracer_provider`` (None: the
    global one, ``opentelemetry.trace.get_tracer_provider()``, looked up at each question)."""
    global _provider
    _provider = tracer_provider
    add_ask_observer(_observe)


def uninstrument() -> None:
    """Stop tracing questions."""
    remove_ask_observer(_observe)


#: Environment variable that turns tracing on in the command line and the service's workers:
#: ``console`` (spans printed to stderr), ``global`` (the global tracer provider, as
#: ``opentelemetry-instrument`` configures it from the ``OTEL_*`` variables); unset, empty or ``0``: off.
OTEL_ENV = "MEMFRONTIER_OTEL"


def instrument_from_env() -> str | None:
    """:func:`instrument` as :data:`OTEL_ENV` says (the mode, or None when off). Raises ValueError
    naming the values for any other."""
    mode = os.environ.get(OTEL_ENV, "").strip().lower()
    if mode in ("", "0"):
        return None
    if mode == "console":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
        instrument(provider)
    elif mode in ("1", "global"):
        instrument()
    else:
        raise ValueError(f"{OTEL_ENV}={mode!r}: use console, global (or 1), or leave it unset")
    return mode


__all__ = [
    "OTEL_ENV",
    "TRACER_NAME",
    "ask_attributes",
    "call_attributes",
    "instrument",
    "instrument_from_env",
    "uninstrument",
]
