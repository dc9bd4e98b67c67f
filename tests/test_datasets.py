"""Loaders on the real benchmark files (../shared/data); counts come from shared/data/README.md."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path

import pytest

from memfrontier.core.types import Conversation
from memfrontier.eval.datasets import (
    ENV_VAR,
    DatasetError,
    data_root,
    file_sha256,
    load_dataset,
    load_hotpotqa,
    load_locomo,
    load_longmemeval,
    locomo_split,
)
from memfrontier.eval.datasets.locomo import parse_locomo_datetime
from memfrontier.eval.datasets.longmemeval import parse_lme_datetime

ROOT = data_root()
LOCOMO = ROOT / "locomo" / "locomo10.json"
LME = ROOT / "longmemeval" / "longmemeval_oracle.json"
HOTPOT = ROOT / "hotpotqa" / "hotpot_dev_distractor_v1_103.json"

needs_data = pytest.mark.data


@pytest.fixture(scope="module")
def locomo() -> list[Conversation]:
    return load_locomo()


@pytest.fixture(scope="module")
def lme() -> list[Conversation]:
    return load_longmemeval()


@pytest.fixture(scope="module")
def hotpot() -> list[Conversation]:
    return load_hotpotqa()


def _q(convs, qid):
    return next(q for c in convs for q in c.questions if q.id == qid)


# --- date parsing (no data needed) ---------------------------------------------------------


def test_parse_locomo_datetime():
    assert parse_locomo_datetime("1:56 pm on 8 May, 2023") == "2023-05-08T13:56:00"
    assert parse_locomo_datetime("12:09 am on 13 September, 2023") == "2023-09-13T00:09:00"
    assert parse_locomo_datetime("12:30 pm on 1 January, 2024") == "2024-01-01T12:30:00"
    assert parse_locomo_datetime("10:04 am on 19 December, 2023") == "2023-12-19T10:04:00"
    assert parse_locomo_datetime("") is None
    assert parse_locomo_datetime("no date here at all") is None


def test_parse_lme_datetime():
    assert parse_lme_datetime("2023/05/23 (Tue) 19:11") == "2023-05-23T19:11:00"
    assert parse_lme_datetime("2023/01/02 (Mon) 00:05") == "2023-01-02T00:05:00"
    assert parse_lme_datetime(None) is None
    # never completed from the wall clock, never a swapped month/day
    assert parse_lme_datetime("(Mon) 17:50") is None
    assert parse_lme_datetime("2023/13/01 (Mon) 10:00") is None
    assert parse_lme_datetime("23 May 2023, 19:11") == "2023-05-23T19:11:00"  # another complete spelling


def test_parse_locomo_datetime_fallback_reads_only_complete_dates():
    assert parse_locomo_datetime("1:56 pm on Monday") is None  # no day, month or year: not today's date
    assert parse_locomo_datetime("May, 2023") is None
    assert parse_locomo_datetime("8 May 2023 13:56") == "2023-05-08T13:56:00"


# --- LoCoMo ------------------------------------------------------------------------------


@needs_data
def test_locomo_counts(locomo):
    assert len(locomo) == 10
    assert [c.id for c in locomo][:2] == ["conv-26", "conv-30"]
    assert sum(len({r.session_id for r in c.records}) for c in locomo) == 272
    assert sum(c.meta["n_sessions"] for c in locomo) == 272
    assert sum(len(c.records) for c in locomo) == 5882
    assert sum(len(c.questions) for c in locomo) == 1986
    cats = collections.Counter(q.category for c in locomo for q in c.questions)
    assert cats == {"1": 282, "2": 321, "3": 96, "4": 841, "5": 446}
    # every record id is unique and every turn has a parsed timestamp
    ids = [r.id for c in locomo for r in c.records]
    assert len(set(ids)) == 5882
    assert all(r.timestamp for c in locomo for r in c.records)
    # 1,226 turns carry a caption -> exactly one ImageRef each
    assert sum(len(r.images) for c in locomo for r in c.records) == 1226
    assert sum(1 for c in locomo for r in c.records if "img_urls" in r.meta) == 910


@needs_data
def test_locomo_first_turn_and_image(locomo):
    c = locomo[0]
    r = c.records[0]
    assert r.id == "conv-26:D1:1"
    assert r.kind == "turn"
    assert r.scope.user_id == "conv-26"
    assert r.session_id == "conv-26:session_1"
    assert r.speaker == "Caroline" and r.role == "user"
    assert r.timestamp == "2023-05-08T13:56:00+00:00"
    assert r.text == "Hey Mel! Good to see you! How have you been?"
    assert r.meta["dia_id"] == "D1:1" and r.meta["session"] == 1 and r.meta["turn_index"] == 0
    img = next(x for x in c.records if x.id == "conv-26:D1:5")
    assert img.images[0].id == "conv-26:D1:5:img0"
    assert img.images[0].caption == "a photo of a dog walking past a wall with a painting of a woman"
    assert img.images[0].path is None
    assert img.meta["img_urls"] == ["https://i.redd.it/l7hozpetnhlb1.jpg"]
    assert "shared image" in img.render()


@needs_data
def test_locomo_dangling_dates_ignored(locomo):
    c26 = locomo[0]
    assert c26.id == "conv-26"
    assert c26.meta["n_sessions"] == 19  # 35 date keys in the file, 19 sessions
    assert max(r.meta["session"] for r in c26.records) == 19


@needs_data
def test_locomo_questions(locomo):
    q = _q(locomo, "conv-26:q0")
    assert q.question == "When did Caroline go to the LGBTQ support group?"
    assert q.answer == "7 May 2023" and q.category == "2"
    assert q.evidence_ids == ["conv-26:D1:3"]
    assert q.question_date is None and q.conversation_id == "conv-26"
    cat5 = [q for c in locomo for q in c.questions if q.category == "5"]
    assert sum(1 for q in cat5 if q.answer is None) == 444
    assert all(q.adversarial_answer for q in cat5)
    assert all(q.abstention for q in cat5)
    both = [q for q in cat5 if q.answer is not None]
    assert sorted(q.answer for q in both) == ["No", "No"]
    assert all(q.answer is not None for c in locomo for q in c.questions if q.category != "5")


@needs_data
def test_locomo_int_answers_are_strings(locomo):
    raw = json.loads(LOCOMO.read_text(encoding="utf-8"))
    int_items = [(s["sample_id"], i) for s in raw for i, qa in enumerate(s["qa"]) if isinstance(qa.get("answer"), int)]
    assert len(int_items) == 6
    got = sorted(_q(locomo, f"{sid}:q{i}").answer for sid, i in int_items)
    assert got == ["2", "2022", "2022", "2022", "2022", "3"]


def test_a_data_file_without_questions_is_refused_before_anything_runs(tmp_path):
    from memfrontier.eval.runner import EvalConfig, load_questions

    sample = {
        "sample_id": "c1",
        "qa": [],
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}],
        },
    }
    f = tmp_path / "locomo_like.json"
    f.write_text(json.dumps([sample]))
    cfg = EvalConfig(strategy="rag", dataset="locomo", split="all", data_file=f, out=tmp_path / "out")
    with pytest.raises(
        DatasetError, match=f"locomo data file {f} holds no questions in split 'all': nothing to evaluate"
    ):
        load_questions(cfg)
    sample["qa"] = [{"question": "What did Ann adopt?", "answer": "a cat", "evidence": "D1:1", "category": 4}]
    f.write_text(json.dumps([sample]))
    (conv,), (q,) = load_questions(cfg)
    assert conv.id == "c1" and q.evidence_ids == ["c1:D1:1"]  # evidence given as one string
    # a bad model spec is found before the run writes anything (no empty --out, no store)
    import asyncio

    from memfrontier.eval.runner import run_eval

    with pytest.raises(ValueError, match="unknown LLM spec 'bogus'"):
        asyncio.run(run_eval(cfg.model_copy(update={"llm": "bogus"})))
    assert not (tmp_path / "out").exists()
    # a server's answerer with an embedded judge: --base-url is the server's, not the judge's
    from memfrontier.eval.runner import check_run

    served = cfg.model_copy(
        update={"llm": "openai:m", "base_url": "http://127.0.0.1:9/v1", "judge": True, "judge_llm": "local"}
    )
    assert [q.id for q in check_run(served)[1]] == [q.id]


def test_sessions_without_a_date_are_named():
    from memfrontier.eval.datasets.locomo import _convert_sample
    from memfrontier.eval.summary import undated_sessions

    conv = {
        "speaker_a": "Ann",
        "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_2_date_time": "",  # a date written but unreadable is an error (test_boundary)
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat."}],
        "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": "How is the cat?"}],
        "session_3": [{"speaker": "Ann", "dia_id": "D3:1", "text": "Fine."}],
    }  # no date field at all
    c = _convert_sample({"sample_id": "c1", "qa": [], "conversation": conv})
    assert undated_sessions([c]) == ["c1:session_2", "c1:session_3"]
    for r in c.records:  # a dataset without dates has nothing to miss
        r.timestamp = None
    assert undated_sessions([c]) == []


def test_locomo_evidence_given_as_one_string_is_one_item():
    from memfrontier.eval.datasets.locomo import _parse_evidence

    ids = {"D1:1", "D1:2"}
    assert _parse_evidence("D1:1", ids) == (["D1:1"], [])  # not "D", "1", ":", "1"
    assert _parse_evidence("D1:1; D1:2", ids) == (["D1:1", "D1:2"], [])
    assert _parse_evidence(["D1:2", "D7:7"], ids) == (["D1:2"], ["D7:7"])


@needs_data
def test_locomo_malformed_evidence(locomo):
    # several ids in one string
    q = next(q for q in locomo[0].questions if "D8:6; D9:17" in q.meta["evidence_raw"])
    assert q.evidence_ids == ["conv-26:D8:6", "conv-26:D9:17"]
    assert q.meta["unresolved_evidence"] == 0
    c49 = next(c for c in locomo if c.id == "conv-49")
    q = next(q for q in c49.questions if "D9:1 D4:4 D4:6" in q.meta["evidence_raw"])
    assert q.evidence_ids[:3] == ["conv-49:D9:1", "conv-49:D4:4", "conv-49:D4:6"]
    q = next(q for c in locomo for q in c.questions if "D:11:26" in q.meta["evidence_raw"])
    assert q.id.startswith("conv-43:") and q.meta["unresolved_evidence"] == 1
    # unresolvable tokens are dropped and counted
    unresolved = {tok: q.id for c in locomo for q in c.questions for tok in q.meta["unresolved_evidence_tokens"]}
    assert set(unresolved) == {"D", "D:11:26", "D30:05", "D10:19", "D4:36"}
    assert unresolved["D30:05"].startswith("conv-50:") and unresolved["D4:36"].startswith("conv-47:")
    assert sum(q.meta["unresolved_evidence"] for c in locomo for q in c.questions) == 5
    # every kept evidence id is a real record of the same conversation
    for c in locomo:
        rids = {r.id for r in c.records}
        for q in c.questions:
            assert set(q.evidence_ids) <= rids
    assert sum(1 for c in locomo for q in c.questions if not q.meta["evidence_raw"]) == 4


@needs_data
def test_locomo_splits(locomo):
    test = locomo_split(locomo, "test")
    train = locomo_split(locomo, "train")
    assert [c.id for c in test] == ["conv-49", "conv-50"]
    assert sum(len(c.questions) for c in test) == 314
    assert len(train) == 8
    assert sum(len(c.questions) for c in train) == 282 + 321 + 96 + 841 - 314
    assert all(q.category in {"1", "2", "3", "4"} for c in test + train for q in c.questions)
    assert len(locomo_split(locomo, "all")) == 10
    assert sum(len(c.questions) for c in locomo) == 1986  # the split did not mutate its input
    with pytest.raises(ValueError):
        locomo_split(locomo, "dev")
    assert sum(len(c.questions) for c in load_dataset("locomo", "test")) == 314


# --- LongMemEval -------------------------------------------------------------------------


@needs_data
def test_longmemeval(lme):
    assert len(lme) == 500
    qs = [c.questions[0] for c in lme]
    assert sum(q.abstention for q in qs) == 30
    assert all(q.id.endswith("_abs") == q.abstention for q in qs)
    assert collections.Counter(q.category for q in qs) == {
        "temporal-reasoning": 133,
        "multi-session": 133,
        "knowledge-update": 78,
        "single-session-user": 70,
        "single-session-assistant": 56,
        "single-session-preference": 30,
    }
    assert all(isinstance(q.answer, str) for q in qs)
    assert sum(len(q.evidence_ids) for q in qs) == 896
    assert sum(1 for q in qs if q.abstention and not q.evidence_ids) == 21
    assert sum(len(c.records) for c in lme) == 10960
    assert all(r.timestamp for c in lme for r in c.records)
    assert len({r.id for c in lme for r in c.records}) == 10960


@needs_data
def test_longmemeval_first(lme):
    c = lme[0]
    q = c.questions[0]
    assert c.id == q.id == "001be529"
    assert q.question_date == "2023-05-28T19:47:00"
    assert q.answer == "over a year" and q.category == "single-session-user"
    assert q.evidence_ids == ["001be529:answer_530960c1:5"]
    r = c.records[0]
    assert r.id == "001be529:answer_530960c1:1"
    assert r.session_id == "001be529:answer_530960c1"
    assert r.scope.user_id == "001be529"
    assert r.role == r.speaker == "user"
    assert r.timestamp == "2023-05-21T19:50:00+00:00"
    assert c.records[1].role == "assistant"
    ev = next(x for x in c.records if x.id == q.evidence_ids[0])
    assert ev.meta["has_answer"] is True


@needs_data
def test_longmemeval_int_answers(lme):
    raw = json.loads(LME.read_text(encoding="utf-8"))
    ints = {d["question_id"]: d["answer"] for d in raw if isinstance(d["answer"], int)}
    assert len(ints) == 32
    by_id = {c.id: c.questions[0] for c in lme}
    assert all(by_id[k].answer == str(v) for k, v in ints.items())


def test_longmemeval_repeated_session_ids_stay_unique(tmp_path):
    """S repeats a session id at two dates in 13 questions: records and sessions must stay unique."""
    turn = {"role": "user", "content": "I adopted a cat named Miso.", "has_answer": True}
    item = {
        "question_id": "q1_abs",
        "question_type": "single-session-user",
        "question": "What is my cat's name?",
        "answer": 7,
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/02 (Tue) 09:30"],
        "haystack_session_ids": ["sharegpt_x", "sharegpt_x"],
        "haystack_sessions": [[turn], [turn, {"role": "assistant", "content": "Nice!"}]],
        "answer_session_ids": ["sharegpt_x"],
    }
    f = tmp_path / "s.json"
    f.write_text(json.dumps([item]))
    (c,) = load_longmemeval(f)
    assert [r.id for r in c.records] == ["q1_abs:sharegpt_x:1", "q1_abs:sharegpt_x#1:1", "q1_abs:sharegpt_x#1:2"]
    assert [r.timestamp for r in c.records] == [
        "2023-05-01T09:00:00+00:00",
        "2023-05-02T09:30:00+00:00",
        "2023-05-02T09:30:00+00:00",
    ]
    q = c.questions[0]
    assert q.answer == "7" and q.abstention and q.question_date == "2023-06-01T10:00:00"
    assert q.evidence_ids == ["q1_abs:sharegpt_x:1", "q1_abs:sharegpt_x#1:1"]
    assert q.meta["evidence_session_ids"] == ["q1_abs:sharegpt_x", "q1_abs:sharegpt_x#1"]


# --- HotpotQA ----------------------------------------------------------------------------


@needs_data
def test_hotpotqa(hotpot):
    assert len(hotpot) == 103
    qs = [c.questions[0] for c in hotpot]
    assert collections.Counter(q.category for q in qs) == {"bridge": 82, "comparison": 21}
    assert [len(c.records) for c in hotpot].count(10) == 102
    assert hotpot[27].id == "5abd259d55429924427fcf1a" and len(hotpot[27].records) == 2
    assert all(r.kind == "paragraph" for c in hotpot for r in c.records)
    assert all(set(c.questions[0].evidence_ids) <= {r.id for r in c.records} for c in hotpot)
    assert all(2 <= len(q.evidence_ids) for q in qs)
    assert sum(1 for q in qs if q.answer in ("yes", "no")) == 12


@needs_data
def test_hotpotqa_first(hotpot):
    c = hotpot[0]
    q = c.questions[0]
    assert q.id == "5a8b57f25542995d1e6f1371"
    assert q.question == "Were Scott Derrickson and Ed Wood of the same nationality?"
    assert q.answer == "yes" and q.category == "comparison"
    assert q.evidence_ids == ["5a8b57f25542995d1e6f1371:Scott Derrickson", "5a8b57f25542995d1e6f1371:Ed Wood"]
    r = c.records[0]
    assert r.id == "5a8b57f25542995d1e6f1371:Ed Wood (film)" and r.speaker == "Ed Wood (film)"
    # sentences joined with "" (the later ones keep their leading space)
    assert r.text.startswith("Ed Wood is a 1994 American biographical period comedy-drama film")
    assert "Ed Wood. The film concerns" in r.text
    assert "  " not in r.text


def test_hotpotqa_repeated_titles(tmp_path):
    item = {
        "_id": "abc",
        "answer": "x",
        "question": "q?",
        "type": "bridge",
        "level": "hard",
        "supporting_facts": [["T", 1], ["T", 0], ["U", 0]],
        "context": [["T", ["One.", " Two."]], ["T", ["Three."]], ["U", ["Four."]]],
    }
    f = tmp_path / "h.json"
    f.write_text(json.dumps([item]))
    (c,) = load_hotpotqa(f)
    assert [r.id for r in c.records] == ["abc:T", "abc:T#2", "abc:U"]
    assert c.records[0].text == "One. Two."
    assert c.questions[0].evidence_ids == ["abc:T", "abc:U"]


# --- data root, errors, dispatch ---------------------------------------------------------


def test_missing_file_raises_helpful_error(tmp_path):
    missing = tmp_path / "nope" / "locomo10.json"
    with pytest.raises(DatasetError) as err:
        load_locomo(missing)
    msg = str(err.value)
    assert str(missing) in msg and ENV_VAR in msg and "--data-root" in msg
    with pytest.raises(DatasetError, match="not found"):
        load_dataset("hotpotqa", "all", data_root=tmp_path)
    with pytest.raises(DatasetError):
        file_sha256(missing)


@pytest.mark.parametrize("loader", [load_locomo, load_longmemeval, load_hotpotqa])
def test_corrupt_file_raises(tmp_path, loader):
    bad = tmp_path / "bad.json"
    bad.write_text('[{"sample_id": "conv-1", ')  # truncated JSON
    with pytest.raises(DatasetError, match="corrupt"):
        loader(bad)
    bad.write_text('[{"unexpected": 1}]')  # valid JSON, wrong schema
    with pytest.raises(DatasetError, match="schema"):
        loader(bad)
    bad.write_text('{"not": "a list"}')
    with pytest.raises(DatasetError, match="schema"):
        loader(bad)
    bad.write_text("[]")  # an empty file is not an empty benchmark: nothing would be evaluated
    with pytest.raises(DatasetError, match="holds no items"):
        loader(bad)


def test_env_var_override(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert data_root() == tmp_path
    assert data_root("/explicit/wins") == Path("/explicit/wins")
    with pytest.raises(DatasetError) as err:
        load_dataset("locomo", "test")
    assert str(tmp_path) in str(err.value)
    if LOCOMO.is_file():  # a link, not a copy: the override really is used for loading
        (tmp_path / "locomo").mkdir()
        (tmp_path / "locomo" / "locomo10.json").symlink_to(LOCOMO.resolve())
        convs = load_dataset("locomo", "all")
        assert len(convs) == 10 and convs[0].meta["source"].startswith(str(tmp_path))


def test_default_root_without_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    root = data_root()
    if not (root / "locomo" / "locomo10.json").is_file():
        pytest.skip(f"no data at the default root {root}")
    monkeypatch.chdir("/")  # cwd-relative candidate missing -> repo-relative fallback
    assert (data_root() / "locomo" / "locomo10.json").is_file()


def test_load_dataset_rejects_unknown():
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("squad", "all")
    with pytest.raises(ValueError, match="unknown split"):
        load_dataset("hotpotqa", "test")


@needs_data
def test_file_sha256_matches_readme():
    assert file_sha256(LOCOMO) == "79fa87e90f04081343b8c8debecb80a9a6842b76a7aa537dc9fdf651ea698ff4"
    assert file_sha256(HOTPOT) == "f764184c713165e24c511fa067f76217d2eb9ad5c87223f268a6feedf45e812b"
    assert os.path.getsize(LME) == 14230736


@needs_data
def test_data_file_reads_another_file_of_the_format(tmp_path):
    """--data-file: a LongMemEval-format file under any name loads as LongMemEval (e.g. the S/M files)."""
    from memfrontier.eval.datasets import load_dataset
    from memfrontier.eval.runner import EvalConfig

    two = json.loads(LME.read_text())[:2]
    f = tmp_path / "longmemeval_s_slice.json"
    f.write_text(json.dumps(two))
    convs = load_dataset("longmemeval", "all", data_file=f)
    assert [c.id for c in convs] == [x["question_id"] for x in two]
    a = EvalConfig(dataset="longmemeval", split="all", data_file=f).identity()
    assert a["data_file_sha256"] and "data_file_sha256" not in EvalConfig(dataset="longmemeval", split="all").identity()
    # a named file that is missing or a folder is the user's path, not the data root's
    with pytest.raises(DatasetError, match=r"data file not found: .*nope\.json \(the file given as the data file\)"):
        load_dataset("longmemeval", "all", data_file=tmp_path / "nope.json")
    with pytest.raises(DatasetError, match="is a folder: give a longmemeval file, or the folder that holds"):
        load_dataset("longmemeval", "all", data_file=tmp_path)


# --- a data file through eval's ingest and the ingest command (real MiniLM, real SQLite) -------


def _lme_file(tmp_path) -> Path:
    item = {
        "question_id": "q1",
        "question_type": "single-session-user",
        "question": "What is my cat's name?",
        "answer": "Miso",
        "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_dates": ["2023/05/01 (Mon) 09:00", "2023/05/02 (Tue) 09:30"],
        "haystack_session_ids": ["sharegpt_a", "answer_b"],
        "haystack_sessions": [
            [
                {"role": "user", "content": "Any tips for growing basil?"},
                {"role": "assistant", "content": "Sun and water."},
                {"role": "user", "content": "Thanks!"},
            ],
            [
                {"role": "user", "content": "I adopted a cat named Miso.", "has_answer": True},
                {"role": "assistant", "content": "What a lovely name."},
            ],
        ],
        "answer_session_ids": ["answer_b"],
    }
    f = tmp_path / "longmemeval_s_like.json"
    f.write_text(json.dumps([item]))
    return f


def test_eval_says_when_the_split_holds_fewer_questions_than_the_limit(tmp_path):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--dataset",
            "longmemeval",
            "--data-file",
            str(_lme_file(tmp_path)),
            "--strategy",
            "oracle",
            "--limit",
            "5",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "note: the split holds 1 question, fewer than --limit 5: all of them are answered" in " ".join(
        res.output.split()
    )
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["questions"] == 1


def test_eval_ingest_of_a_data_file_reports_turns_embedded(tmp_path):
    """construct (what eval runs per conversation) reports ``embed`` events in records, then
    ``build``; ingesting the same file again adds and embeds nothing, with no ``embed`` event."""
    import asyncio

    from memfrontier.eval.config import EvalConfig
    from memfrontier.eval.tasks import construct, open_run

    cfg = EvalConfig(
        dataset="longmemeval",
        split="all",
        data_file=_lme_file(tmp_path),
        strategy="rag",
        store=tmp_path / "store",
        out=tmp_path / "out",
    )
    (conv,) = load_dataset(cfg.dataset, cfg.split, data_file=cfg.data_file)
    for expect_added, expect_events in ((5, [("embed", 0), ("embed", 5), ("build", None)]), (0, [("build", None)])):
        mem, _judge, strategy = open_run(cfg)
        events = []
        try:
            entry = asyncio.run(construct(mem, strategy, conv, lambda ev, **info: events.append((ev, info))))
        finally:
            mem.close()
        assert entry["records_added"] == expect_added and entry["chunks_embedded"] == (2 if expect_added else 0)
        assert [(ev, info.get("done")) for ev, info in events] == expect_events
        assert all(
            info == {"conversation": "q1", "sessions": 2, "done": info["done"], "total": 5}
            for ev, info in events
            if ev == "embed"
        )


def test_ingest_command_reads_a_data_file_with_a_progress_bar_fit_for_logs(tmp_path):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    f = _lme_file(tmp_path)
    args = ["ingest", "--store", str(tmp_path / "store"), "--dataset", "longmemeval", "--data-file", str(f)]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "q1: +5 records, 0 already present" in first.output
    assert "\x1b" not in first.output  # not a terminal: no cursor movement or colour codes in logs
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "q1: +0 records, 5 already present" in again.output
    bad = CliRunner().invoke(app, ["ingest", "--store", str(tmp_path / "s2"), "--file", str(f), "--data-file", str(f)])
    assert bad.exit_code == 2 and "--data-file goes with --dataset" in bad.output
    assert not (tmp_path / "s2").exists()


@needs_data
def test_longmemeval_s_splits_hold_no_trained_question_and_its_report_slice_covers_every_type():
    from memfrontier.eval.runner import select_questions
    from memfrontier.retrieve.rerank import DEFAULT_RERANKER

    test, train = load_dataset("longmemeval_s", "test"), load_dataset("longmemeval_s", "train")
    assert (len(test), len(train)) == (106, 332)  # 438 S questions (shared/data/README.md)
    test_ids, train_ids = {c.id for c in test}, {c.id for c in train}
    assert not test_ids & train_ids
    trained = json.loads(DEFAULT_RERANKER.read_text("utf-8"))["provenance"]["data"]["longmemeval"]["conversations"]
    assert len(trained) == 160 and not test_ids & set(trained)  # the shipped reranker's draw (oracle ids)
    report = select_questions(test, 60, 42)  # the frontier's report slice (--limit 60, seed 42)
    counts = collections.Counter(q.category for q in report)
    assert counts == {
        "temporal-reasoning": 11,
        "multi-session": 11,
        "knowledge-update": 11,
        "single-session-user": 11,
        "single-session-assistant": 11,
        "single-session-preference": 5,  # all this type's test questions
    }
    first = test[0]
    assert 38 <= first.meta["n_sessions"] <= 58 and first.questions[0].question_date  # S: ~50 sessions, dated
    with pytest.raises(ValueError, match="unknown split"):
        load_dataset("longmemeval_s", "val")


def test_a_gzip_data_file_is_read_and_a_broken_one_named(tmp_path):
    import gzip

    item = {
        "question_id": "q1",
        "question_type": "knowledge-update",
        "question": "Where do I live?",
        "answer": "Boston",
        "question_date": "2023/05/30 (Tue) 23:40",
        "haystack_dates": ["2023/05/01 (Mon) 10:00"],
        "haystack_session_ids": ["answer_1"],
        "haystack_sessions": [[{"role": "user", "content": "I moved to Boston.", "has_answer": True}]],
        "answer_session_ids": ["answer_1"],
    }
    good = tmp_path / "s.json.gz"
    good.write_bytes(gzip.compress(json.dumps([item]).encode()))
    (conv,) = load_longmemeval(good)
    assert conv.questions[0].question_date == "2023-05-30T23:40:00" and conv.questions[0].evidence_ids == [
        "q1:answer_1:1"
    ]
    broken = tmp_path / "broken.json.gz"
    broken.write_bytes(gzip.compress(json.dumps([item]).encode())[:-20])  # cut short
    with pytest.raises(DatasetError, match="corrupt"):
        load_longmemeval(broken)
    (tmp_path / "plain.json.gz").write_text("[]")  # not gzip at all
    with pytest.raises(DatasetError, match="corrupt"):
        load_longmemeval(tmp_path / "plain.json.gz")


def test_longmemeval_s_splits_name_the_oracle_file_they_need(tmp_path):
    import gzip

    s_file = tmp_path / "longmemeval" / "longmemeval_s_dev.json.gz"
    s_file.parent.mkdir()
    s_file.write_bytes(gzip.compress(b"[]"))
    with pytest.raises(
        DatasetError, match=r"drawn from the LongMemEval oracle file.*longmemeval_oracle.json.*split 'all'"
    ):
        load_dataset("longmemeval_s", "test", data_root=tmp_path)
