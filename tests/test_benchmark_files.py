"""Benchmark files read as their authors publish them: empty turns (LongMemEval S's ShareGPT
distractors) are skipped and counted, and every check that can refuse a data file runs before the
first write."""

import asyncio
import json

import pytest

from memfrontier.eval.datasets import DatasetError, load_dataset
from memfrontier.eval.runner import EvalConfig, check_run, run_eval


def _lme_item(qid: str, sessions: list[list[dict]]) -> dict:
    return {
        "question_id": qid,
        "question_type": "single-session-user",
        "question": "What colour is my bike?",
        "answer": "red",
        "question_date": "2023/05/30 (Tue) 10:00",
        "haystack_session_ids": [f"s{i}" for i in range(len(sessions))],
        "haystack_dates": ["2023/05/2%d (Mon) 09:00" % i for i in range(len(sessions))],
        "haystack_sessions": sessions,
        "answer_session_ids": ["s0"],
    }


def _lme_file(tmp_path, *, long_id: bool = False):
    evidence = [
        {"role": "user", "content": "My bike is red.", "has_answer": True},
        {"role": "assistant", "content": "Nice, a red bike."},
    ]
    distractor = [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": "How can I help?"},
        {"role": "user", "content": "  \n"},
        {"role": "assistant", "content": "Anything else?"},
    ]
    items = [_lme_item("q1", [evidence, distractor]), _lme_item("q2", [[{"role": "user", "content": "hi"}]])]
    if long_id:
        items[1]["haystack_session_ids"] = ["x" * 2000]
    p = tmp_path / "lme_s.json"
    p.write_text(json.dumps(items), "utf-8")
    return p


def test_longmemeval_loader_skips_and_counts_empty_turns(tmp_path):
    convs = load_dataset("longmemeval", data_file=_lme_file(tmp_path))
    c1 = convs[0]
    assert [r.id for r in c1.records] == ["q1:s0:1", "q1:s0:2", "q1:s1:2", "q1:s1:4"]
    assert c1.meta["empty_turns_skipped"] == ["q1:s1:1", "q1:s1:3"]
    assert c1.questions[0].evidence_ids == ["q1:s0:1"]
    assert convs[1].meta["empty_turns_skipped"] == []


def test_a_file_the_store_would_refuse_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "run"
    cfg = EvalConfig(dataset="longmemeval", strategy="oracle", out=out, data_file=_lme_file(tmp_path, long_id=True))
    with pytest.raises(
        DatasetError,
        match=r"lme_s\.json: conversation 'q2': record 'q2:x+': its id is 2005 bytes .*; nothing was written$",
    ):
        check_run(cfg)
    with pytest.raises(DatasetError, match="its id is 2005 bytes"):
        asyncio.run(run_eval(cfg))
    assert not out.exists()


@pytest.mark.slow
def test_eval_on_a_file_with_empty_turns_answers_and_reports_them(tmp_path):
    out = tmp_path / "run"
    cfg = EvalConfig(dataset="longmemeval", strategy="oracle", out=out, data_file=_lme_file(tmp_path))
    events = []
    summary = asyncio.run(run_eval(cfg, on_progress=lambda e, **i: events.append((e, i))))
    assert summary["questions"] == 2
    assert summary["empty_turns_skipped"] == 2
    assert summary["empty_turns_skipped_ids"] == ["q1:s1:1", "q1:s1:3"]
    assert json.loads((out / "summary.json").read_text())["empty_turns_skipped"] == 2
    start = next(i for e, i in events if e == "start")
    assert start["empty_turns_skipped"] == 2
    assert summary["construction"]["q1"]["records_added"] == 4
