"""End to end with real components: LoCoMo records -> SQLite/BM25/MiniLM store -> strategy ->
the embedded Gemma 3 270M answerer -> metrics, ledger and result files."""

import asyncio
import hashlib
import json

import pytest

from memfrontier import Memory
from memfrontier.core.errors import EmptyScopeError
from memfrontier.core.provenance import sha256_file
from memfrontier.core.types import Budget, Scope
from memfrontier.eval.datasets import load_dataset
from memfrontier.eval.metrics import locomo_f1
from memfrontier.eval.runner import EvalConfig, RunMismatchError, run_eval
from memfrontier.strategies import get_strategy

pytestmark = [pytest.mark.slow, pytest.mark.data]


@pytest.fixture(scope="module")
def conv49():
    (conv,) = [c for c in load_dataset("locomo", "test") if c.id == "conv-49"]
    return conv


@pytest.fixture(scope="module")
def memory(tmp_path_factory, conv49):
    m = Memory.open(tmp_path_factory.mktemp("mem"))
    first_sessions = {f"conv-49:session_{i}" for i in (1, 2, 3)}
    m.aio.store.add([r for r in conv49.records if r.session_id in first_sessions])
    yield m
    m.close()


def _oracle(memory, q):
    """The oracle's answer to ``q``: the facade's unchecked answer step, which takes the gold evidence."""
    return memory._run(
        memory.aio.answer(
            q.question, Scope(user_id="conv-49"), get_strategy("oracle"), gold_evidence_ids=q.evidence_ids
        )
    )


def test_oracle_context_real_answer_scores(memory, conv49):
    # greedy decoding is deterministic: with its gold evidence the 270M model answers this one
    q = next(q for q in conv49.questions if q.id == "conv-49:q5")
    assert (q.question, q.answer) == ("Which country was Evan visiting in May 2023?", "Canada")
    ans = _oracle(memory, q)
    assert locomo_f1(ans.text, q.answer, 4) > 0, ans.text


def test_rag_runs_the_real_pipeline_and_meters_it(memory, conv49):
    q = next(q for q in conv49.questions if q.evidence_ids and q.evidence_ids[0].startswith("conv-49:D1:"))
    ans = memory.ask(q.question, user_id="conv-49", strategy="rag")
    # the weak base model may give an empty line; that must be a counted event, never silent
    assert (ans.text.strip() == "") == (ans.usage.events.get("empty_output.answerer") == 1)  # empty iff counted
    assert ans.evidence_ids and all(i.startswith("conv-49:D") for i in ans.evidence_ids)
    u = ans.usage.query
    assert u.calls == 1 and ans.usage.by_role["answerer"].calls == 1
    assert u.input_tokens > 50 and 0 < u.output_tokens <= 32
    # priced from the book's nominal entry for the embedded model: 0.01 in / 0.02 out per 1M
    assert u.usd == pytest.approx(1e-6 * (0.01 * u.input_tokens + 0.02 * u.output_tokens))
    assert u.proxy_s > 0 and ans.wall_s > 0


def test_oracle_reads_only_gold_evidence(memory, conv49):
    q = next(q for q in conv49.questions if q.evidence_ids and q.evidence_ids[0].startswith("conv-49:D2:"))
    ans = _oracle(memory, q)
    stored = {r.id for r in memory.aio.store.get(q.evidence_ids, Scope(user_id="conv-49"))}  # sessions 1-3 ingested
    order = [r.id for r in conv49.records]
    assert stored and ans.evidence_ids == sorted(stored, key=order.index)
    assert set(ans.meta["missing_evidence"]) == set(q.evidence_ids) - stored


def test_longctx_truncates_newest_first_and_budget_cuts_context(memory):
    ans = memory.ask("What did Evan say?", user_id="conv-49", strategy="longctx")
    records = memory.aio.store.records(Scope(user_id="conv-49"))
    kept = len(ans.evidence_ids)
    assert ans.meta["records"] == len(records) and ans.meta["dropped_records"] == len(records) - kept
    assert ans.evidence_ids == [r.id for r in records[len(records) - kept :]]  # the newest ones are kept
    assert ans.usage.query.input_tokens > 500
    capped = memory.ask("What did Evan say?", user_id="conv-49", strategy="rag", budget=Budget(max_tokens=300))
    assert capped.usage.query.input_tokens <= 300 - 32
    assert capped.usage.events.get("budget.context_truncated") == 1


def test_scope_isolation_in_answers(memory):
    """A scope with no records is refused before any model call; its unchecked answer reads nothing of
    another scope's records."""
    with pytest.raises(EmptyScopeError):
        memory.ask("What did Evan say?", user_id="nobody", strategy="rag")
    ans = memory._run(memory.aio.answer("What did Evan say?", Scope(user_id="nobody"), get_strategy("rag")))
    assert ans.evidence_ids == [] and ans.context == ""


def test_questions_run_in_the_order_given_under_a_semaphore_of_one():
    """asyncio.as_completed schedules a set (hash order); the runner schedules its questions in
    dataset order, so a local model reuses a conversation's shared prompt prefix."""
    from memfrontier.eval.executor import as_completed_in_order as _as_completed

    started: list[int] = []

    async def go() -> list[int]:
        sem = asyncio.Semaphore(1)

        async def one(i: int) -> int:
            async with sem:
                started.append(i)
                await asyncio.sleep(0)
                return i

        return [i async for i in _as_completed([one(i) for i in range(50)])]

    assert asyncio.run(go()) == list(range(50)) and started == list(range(50))


def test_closing_the_questions_early_cancels_the_unfinished_ones():
    """An error or Ctrl-C while answering closes the generator: the questions still running are
    cancelled and awaited there, before the store closes (none is left to fail against it)."""
    import contextlib

    from memfrontier.eval.executor import as_completed_in_order as _as_completed

    finished: list[int] = []

    async def go():
        async def one(i: int) -> int:
            await asyncio.sleep(0.01 * i)
            finished.append(i)
            return i

        gen = _as_completed([one(i) for i in (1, 20, 30)])
        async with contextlib.aclosing(gen):
            first = await anext(gen)
        left = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        await asyncio.sleep(0.05)  # long enough for the others to have finished, had they run on
        return first, left

    first, left = asyncio.run(go())
    assert first == 1 and left == [] and finished == [1]


def test_eval_writes_results_and_resumes(tmp_path, locomo_slice):
    root = locomo_slice("conv-49", "conv-50")
    cfg = EvalConfig(dataset="locomo", split="test", strategy="oracle", limit=4, out=tmp_path / "run", data_root=root)
    summary = asyncio.run(run_eval(cfg))
    lines = [json.loads(line) for line in (tmp_path / "run" / "predictions.jsonl").read_text().splitlines()]
    assert len(lines) == 4
    for row in lines:
        for key in (
            "id",
            "category",
            "question",
            "gold",
            "prediction",
            "f1",
            "em",
            "evidence_ids",
            "evidence_recall",
            "usage",
            "usd",
            "proxy_s",
            "wall_s",
        ):
            assert key in row, key
        assert row["usage"]["by_stage"]["query"]["calls"] == 1
        if row["gold_evidence_ids"]:
            assert row["evidence_recall"] == 1.0  # the oracle context holds every gold turn
    assert {r["category"] for r in lines} == {"1", "2", "3", "4"}
    ids = [r["id"] for r in lines]  # answered in dataset order: a conversation's questions one after another
    assert ids == sorted(ids, key=lambda i: (i.split(":q")[0], int(i.split(":q")[1])))
    prov = summary["provenance"]
    data_file = root / "locomo" / "locomo10.json"
    assert prov["data_file"] == str(data_file) and prov["data_sha256"] == sha256_file(data_file)
    assert prov["answer_model"] == "gemma-3-270m-q4_k_m" and prov["seed"] == 42
    assert prov["price_book_version"] and prov["prompt_versions"]["answerer"]
    assert prov["strategy_config"] == {}  # oracle has no options
    assert prov["strategy_config_hash"] == hashlib.sha256(b'{"strategy":"oracle"}').hexdigest()[:16]
    assert prov["recipes"] == []  # the oracle searches nothing
    amortized = summary["amortized_usd_per_question"]  # the oracle builds nothing: C(n) is the online cost
    assert list(amortized) == ["1", "4", "10", "50", "100", "314", "inf"]
    assert set(amortized.values()) == {amortized["inf"]} and amortized["inf"] > 0
    assert summary["qpc_amortized"] == pytest.approx(summary["metrics"]["all (1-4)"]["qpc"])
    assert summary["metrics"]["all (1-4)"]["n_questions"] == 4
    assert summary["undated_sessions"] == []  # every LoCoMo session date parses

    # a crash mid-write leaves a torn line: the resumed run drops it and answers that question again
    p = tmp_path / "run" / "predictions.jsonl"
    kept = p.read_text().splitlines()[:2]
    p.write_text("\n".join(kept) + "\n" + '{"id": "torn')
    again = asyncio.run(run_eval(cfg))
    rows = [json.loads(line) for line in p.read_text().splitlines()]
    assert len(rows) == 4 and len({r["id"] for r in rows}) == 4
    assert again["metrics"]["all (1-4)"]["n_questions"] == 4

    with pytest.raises(RunMismatchError):
        asyncio.run(run_eval(cfg.model_copy(update={"strategy": "rag"})))

    # every row records the prompt versions it was made with; a resume never mixes two versions
    assert {json.dumps(r["prompt_versions"], sort_keys=True) for r in rows} == {
        json.dumps(prov["prompt_versions"], sort_keys=True)
    }
    rows[0]["prompt_versions"] = {**rows[0]["prompt_versions"], "answerer": "qa-v0"}
    del rows[1]["prompt_versions"]  # a row written before versions were recorded: not a mismatch
    p.write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))  # one question left to answer
    with pytest.raises(RunMismatchError, match="1 answer made with other prompt versions"):
        asyncio.run(run_eval(cfg))
    assert len(p.read_text().splitlines()) == 3  # nothing answered
