"""Questions as OpenTelemetry traces (``memfrontier.integrations.otel``), checked with the SDK's
in-memory exporter: one span per question, a GenAI child span per model call, tokens and USD equal
to the ledger's, the budget and its refusals on the question's span (a scripted model priced as a
local one: control flow; the arithmetic is the ledger's)."""

from __future__ import annotations

import asyncio

import pytest
from fakes import ScriptedClient

pytest.importorskip("opentelemetry.sdk", reason="the otel extra")

from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from memfrontier.api import AsyncMemory  # noqa: E402
from memfrontier.core.ledger import BudgetExceededError, Ledger  # noqa: E402
from memfrontier.core.types import Budget, Scope  # noqa: E402
from memfrontier.integrations import otel  # noqa: E402

MODEL = "gemma-3-270m-q4_k_m"


@pytest.fixture
def traced(tmp_path, minilm):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    mem = AsyncMemory.open(
        tmp_path / "store", llm=ScriptedClient(["Lisbon"], repeat_last=True, model_id=MODEL), embedder=minilm
    )
    asyncio.run(
        mem.add(
            [{"role": "user", "content": f"Fact {i}: Ana keeps item {i} in Lisbon."} for i in range(40)], user_id="ana"
        )
    )
    otel.instrument(provider)
    try:
        yield mem, exporter, provider
    finally:
        otel.uninstrument()
        mem.close()


def ask(mem, budget=None, ledger=None):
    ledger = ledger if ledger is not None else Ledger()
    strategy = mem.strategy("rag", {"k": 4})
    try:
        return asyncio.run(
            mem.answer("Where is item 7?", Scope(user_id="ana"), strategy, budget=budget, ledger=ledger)
        ), ledger
    except BudgetExceededError as e:
        return e, ledger


def test_a_question_is_a_span_with_a_genai_child_per_model_call(traced):
    mem, exporter, _ = traced
    ans, ledger = ask(mem, budget=Budget(max_usd=1e-3, max_tokens=260))
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.name == "memfrontier.ask rag"]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    (call,) = ledger.calls
    (child,) = children
    assert child.name == f"chat {MODEL}" and len(spans) == 2
    a = child.attributes
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"]) == ("chat", MODEL)
    assert (a["gen_ai.usage.input_tokens"], a["gen_ai.usage.output_tokens"]) == (call.input_tokens, call.output_tokens)
    assert a["memfrontier.cost.usd"] == call.usd > 0 and a["memfrontier.call.role"] == "answerer"
    assert a["memfrontier.latency.proxy_s"] == call.proxy_s
    assert child.end_time - child.start_time == pytest.approx(call.wall_s * 1e9, abs=1e3)
    r = root.attributes
    q = ans.usage.query
    assert r["memfrontier.cost.usd"] == q.usd and r["memfrontier.budget.spent_usd"] == q.usd
    assert r["memfrontier.budget.spent_tokens"] == q.input_tokens + q.output_tokens <= 260
    assert (r["memfrontier.budget.max_usd"], r["memfrontier.budget.max_tokens"]) == (1e-3, 260)
    assert "memfrontier.budget.max_proxy_s" not in r  # a cap not set is not shown
    assert r["memfrontier.config_hash"] == mem.strategy("rag", {"k": 4}).config.config_hash()
    assert r["memfrontier.events.budget.context_truncated"] == 1  # the cut, on the question's span
    assert (
        root.status.status_code == StatusCode.UNSET
        and root.start_time <= child.start_time <= child.end_time <= root.end_time
    )


def test_a_refused_question_is_an_error_span_naming_the_refusal(traced):
    mem, exporter, _ = traced
    err, _ = ask(mem, budget=Budget(max_tokens=5))
    assert isinstance(err, BudgetExceededError)
    (root,) = exporter.get_finished_spans()  # no call was made: no child
    assert root.status.status_code == StatusCode.ERROR and "BudgetExceededError" in root.status.description
    assert root.attributes["memfrontier.events.budget.call_refused.answerer"] == 1
    assert root.attributes["memfrontier.budget.spent_usd"] == 0.0
    assert [e.name for e in root.events] == ["exception"]


def test_spans_join_the_callers_trace_and_stop_when_uninstrumented(traced):
    mem, exporter, provider = traced
    with provider.get_tracer("app").start_as_current_span("agent turn") as outer:
        ask(mem)
    (root,) = [s for s in exporter.get_finished_spans() if s.name.startswith("memfrontier.ask")]
    assert root.parent is not None and root.parent.span_id == outer.get_span_context().span_id
    assert root.context.trace_id == outer.get_span_context().trace_id
    otel.uninstrument()
    exporter.clear()
    ask(mem)
    assert exporter.get_finished_spans() == ()


def test_every_call_of_a_many_call_strategy_is_a_child_and_they_add_up(traced):
    mem, exporter, _ = traced
    strategy = mem.strategy("budgetmem", {"tiers": "high"})  # five module calls, then the answer call
    ledger = Ledger()
    ans = asyncio.run(mem.answer("Where is item 7?", Scope(user_id="ana"), strategy, ledger=ledger))
    spans = exporter.get_finished_spans()
    (root,) = [s for s in spans if s.name == "memfrontier.ask budgetmem"]
    children = [s for s in spans if s.parent is not None and s.parent.span_id == root.context.span_id]
    assert len(children) == len(ledger.calls) >= 2
    assert sorted(c.attributes["memfrontier.call.role"] for c in children) == sorted(c.role for c in ledger.calls)
    chats = [c for c in children if c.name.startswith("chat ")]
    local = [c for c in children if c.name.startswith("memfrontier.local ")]
    assert len(chats) == sum(not c.local for c in ledger.calls) and len(local) == sum(c.local for c in ledger.calls)
    assert all("gen_ai.operation.name" not in c.attributes for c in local)  # rules and routers are no chat
    assert sum(c.attributes["memfrontier.cost.usd"] for c in chats) == pytest.approx(ans.usage.query.usd)
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == root.attributes["gen_ai.usage.input_tokens"]


def test_ask_names_the_configuration_asked_for_and_traces_refusals_before_the_answer(traced):
    from memfrontier.strategies import ViewNotBuiltError

    mem, exporter, _ = traced
    with pytest.raises(ViewNotBuiltError):  # its turn view was never built: refused before any call
        asyncio.run(mem.ask("Where is item 7?", user_id="ana", strategy="rag-turns-rr"))
    (refused,) = exporter.get_finished_spans()
    assert refused.name == "memfrontier.ask rag-turns-rr" and refused.status.status_code == StatusCode.ERROR
    assert "ViewNotBuiltError" in refused.status.description
    exporter.clear()
    ans = asyncio.run(mem.ask("Where is item 7?", user_id="ana", strategy="rag-turns-rr", build=True))
    (root,) = [s for s in exporter.get_finished_spans() if s.name.startswith("memfrontier.ask")]
    assert root.name == "memfrontier.ask rag-turns-rr" and root.attributes["memfrontier.strategy"] == ans.strategy
    assert root.status.status_code == StatusCode.UNSET


def test_the_command_line_traces_to_stderr_when_the_environment_says_so(tmp_path, monkeypatch):
    import subprocess
    import sys

    from memfrontier.integrations.otel import OTEL_ENV

    env = {**__import__("os").environ, OTEL_ENV: "console", "MEMFRONTIER_LLM": "local"}
    cli = [sys.executable, "-m", "memfrontier.cli"]
    store = str(tmp_path / "mem")
    chat = tmp_path / "chat.jsonl"
    chat.write_text('{"role": "user", "content": "I moved to Lisbon in May 2023."}\n', "utf-8")
    subprocess.run([*cli, "ingest", "--store", store, "--file", str(chat), "--user-id", "ana"], env=env, check=True)
    p = subprocess.run(
        [*cli, "ask", "--store", store, "--user-id", "ana", "--json", "Where does Ana live?"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    assert __import__("json").loads(p.stdout)["text"]  # stdout stays the answer's JSON
    assert '"name": "memfrontier.ask rag"' in p.stderr and '"gen_ai.request.model"' in p.stderr
    bad = subprocess.run([*cli, "ask", "--help"], env={**env, OTEL_ENV: "loud"}, capture_output=True, text=True)
    assert bad.returncode != 0 and "MEMFRONTIER_OTEL='loud'" in bad.stderr
