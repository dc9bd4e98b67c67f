"""Time and repeats: the question's date reaches the context and the answer prompt; near-duplicate
hits are folded, so a later correction and distinct facts reach a small context (real SQLite,
bm25s and MiniLM; the small packaged model where an answer is asked)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

import pytest

from memfrontier.answerer import DATED_PROMPT_VERSION, PROMPT_VERSION, Answerer, prompt_version
from memfrontier.api import Memory
from memfrontier.core.render import age_words, asked_on, date_label, days_before, render_dated
from memfrontier.core.types import Budget, Scope
from memfrontier.retrieve.fold import LOOKAHEAD, fold_near_duplicates, repeats, word_set
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import HYBRID_RRF
from memfrontier.strategies import Query, get_strategy

# --- dates in words, from the day the question is asked -------------------------------------


def test_days_and_age_words_by_hand():
    assert days_before("2023-05-08T23:59:00", "2023-05-30T00:01:00") == 22  # calendar days, not 24 h blocks
    assert days_before("2023-05-30T10:00:00+00:00", "2023-05-30T23:40:00") == 0
    assert days_before("2023-06-02T10:00:00", "2023-05-30T10:00:00") == -3  # stamped after the question
    assert days_before(None, "2023-05-30T10:00:00") is None and days_before("2023-05-30", None) is None
    assert age_words(0) == "today"
    assert age_words(1) == "1 day ago"
    assert age_words(13) == "13 days ago"
    assert age_words(22) == "22 days (3 weeks) ago"
    assert age_words(75) == "75 days (10 weeks, about 2 months) ago"  # 75 / 30.44 = 2.46
    assert age_words(365) == "365 days (52 weeks, about 12 months) ago"
    assert age_words(800) == "800 days (about 2 years) ago"
    assert age_words(-1) == "1 day later" and age_words(-3) == "3 days later"


def test_date_labels_and_the_dated_context():
    assert date_label("2023-05-08T10:00:00") == "8 May 2023"  # undated question: the date alone, as before
    assert date_label("2023-05-08T10:00:00", "2023-05-30T23:40:00") == "8 May 2023, 22 days (3 weeks) ago"
    assert date_label(None, "2023-05-30T23:40:00") is None
    assert asked_on("2023-05-30T23:40:00") == "Tuesday, 30 May 2023"
    blocks = [("2023-05-29T09:00:00", "a"), (None, "b")]
    assert render_dated(blocks) == "(29 May 2023) a\nb"
    assert render_dated(blocks, "2023-05-30T23:40:00") == "(29 May 2023, 1 day ago) a\nb"


class _Counter:
    """What the answerer reads of its model to build a prompt (no call is made here)."""

    context_tokens = 4096
    price = None

    def count_tokens(self, text: str) -> int:
        return len(text.split())


def test_the_answer_prompt_gives_the_day_asked_and_keeps_the_undated_one_byte_for_byte():
    a = Answerer(_Counter())
    undated = a.prompt("Where do I live?", "(8 May 2023) I live in Seattle.")
    assert undated == (  # the prompt every exported LoCoMo answer was made with
        "You are a QA assistant. Use ONLY the context below to answer the question.\n"
        "If the context lacks the info, answer with your best guess from it.\n"
        "Answer in <=6 words, no explanation.\n"
        "Context: (8 May 2023) I live in Seattle.\n\n"
        "Question: Where do I live?\n\n"
        "Answer:"
    )
    dated = a.prompt("Where do I live?", "ctx", "2023-05-30T23:40:00+00:00")
    assert "Today is Tuesday, 30 May 2023.\nQuestion: Where do I live?" in dated
    assert "when two disagree, the later one is current" in dated
    assert prompt_version(None) == PROMPT_VERSION and prompt_version("2023-05-30") == DATED_PROMPT_VERSION


# --- near-duplicate folding ----------------------------------------------------------------


def test_word_sets_and_repeats_by_hand():
    assert word_set("I live in Seattle!") == {"i", "live", "in", "seattle"}
    assert repeats(word_set("I live in Seattle"), word_set("I still live in Seattle"))  # 4 of 5 words, one added
    assert not repeats(word_set("I live in Seattle"), word_set("Oh and I still live in Seattle"))  # 4 of 7
    assert repeats(word_set("I live in Seattle"), word_set("Oh and I still live in Seattle"), threshold=0.5)
    # a changed word is never a repeat, whatever the overlap (12 of 14 words shared)
    monday = "I have a dentist appointment with Dr Smith on Monday at the downtown clinic"
    assert not repeats(word_set(monday), word_set(monday.replace("Monday", "Friday")), threshold=0.5)
    assert repeats(frozenset(), frozenset())


def test_fold_keeps_the_latest_copy_at_the_best_copys_rank():
    docs = [  # (id, text, time), best first
        ("a1", "I live in Seattle", "2024-01-05T10:00:00"),
        ("x", "I like pizza", "2024-02-01T10:00:00"),
        ("a2", "I still live in Seattle", "2024-06-05T10:00:00"),  # a1's words and one more: a copy
        ("b", "I live in Boston", "2024-09-10T10:00:00"),  # one word changed: distinct
        ("a3", "I live in Seattle", "2024-03-05T10:00:00"),
    ]
    out = fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2])
    assert [(kept[0], best[0], [c[0] for c in copies]) for kept, best, copies in out] == [
        ("a2", "a1", ["a1", "a3"]),
        ("x", "x", []),
        ("b", "b", []),
    ]
    # one group wanted: the next max(1, LOOKAHEAD) documents are still read for its copies
    (only,) = fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2], limit=1)
    assert (only[0][0], [c[0] for c in only[2]]) == ("a2", ["a1", "a3"])
    far = [docs[0], *[(f"n{i}", f"note {i}", None) for i in range(LOOKAHEAD)], docs[2]]
    (first, *_), *_ = fold_near_duplicates(far, lambda d: d[1], lambda d: d[2], limit=1)
    assert first[0] == "a1"  # a copy ranked past the look-ahead is not read
    strict = fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2], threshold=1.0)
    assert [k[0] for k, _, _ in strict] == ["a3", "x", "a2", "b"]  # only the exact copy folds
    by_scope = fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2], key=lambda d: d[0][0])
    assert [k[0] for k, _, _ in by_scope] == ["a2", "x", "b"]  # a1, a2, a3 share the key "a"
    split = fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2], key=lambda d: d[0])
    assert len(split) == 5  # every key its own: nothing folds across keys
    for bad in (0.0, 0.49, 1.5):
        with pytest.raises(ValueError, match="threshold"):
            fold_near_duplicates(docs, lambda d: d[1], lambda d: d[2], threshold=bad)


STALE = "I live in the city of Seattle, in a small flat near the lake."
CORRECTION = "Big news: I moved to Boston last month."
FILLER = ["I enjoy pizza on Fridays with friends.", "My dog Rex loves long walks in the park.", "I am reading a novel."]


@pytest.fixture
def mem(tmp_path):
    m = Memory.open(tmp_path / "m", llm="local")  # opening loads no model
    yield m
    m.close()


def _stale_then_corrected(m, user="ana"):
    for i in range(6):  # the same fact in six sessions
        m.add({"role": "user", "content": STALE}, user_id=user, session_id=f"s{i}", timestamp=f"2024-0{i + 1}-05T10:00")
    for j, text in enumerate(FILLER):
        m.add({"role": "user", "content": text}, user_id=user, session_id=f"f{j}", timestamp=f"2024-07-0{j + 1}T10:00")
    m.add({"role": "user", "content": CORRECTION}, user_id=user, session_id="s9", timestamp="2024-09-10T10:00")


def test_a_correction_reaches_a_k4_context_past_six_stale_copies(mem):
    _stale_then_corrected(mem)
    store, scope = mem.aio.store, Scope(user_id="ana")
    q = "Which city do I live in?"
    unfolded = hybrid_search(store, q, scope, HYBRID_RRF, 7)
    assert [STALE in h.chunk.text for h in unfolded] == [True] * 6 + [False]  # the failure folding mends
    assert CORRECTION in unfolded[6].chunk.text

    rag_k4 = get_strategy("rag", {"k": 4})
    query = Query(text=q, scope=scope, question_date="2024-10-01T12:00:00")
    ctx = asyncio.run(rag_k4.context(query, mem.aio.env, None, Budget()))
    lines = ctx.text.splitlines()
    assert len(lines) == 4 and ctx.meta["folded"] == 5
    assert lines[0] == f'(5 June 2024, 118 days (16 weeks, about 4 months) ago) [said 6 times] user said, "{STALE}"'
    assert any(line.startswith("(10 September 2024, 21 days (3 weeks) ago)") and CORRECTION in line for line in lines)
    no_fold = get_strategy("rag", {"k": 4, "fold": None})
    assert CORRECTION not in asyncio.run(no_fold.context(query, mem.aio.env, None, Budget())).text


def test_four_distinct_facts_reach_a_five_slot_search_next_to_a_repeated_one(mem):
    repeated = "My sister Maria works as a doctor at the city hospital."
    others = [
        "My brother Tom works as a teacher at a school.",
        "My mother Ana works as a painter in her studio.",
        "My father Luis works as a pilot for an airline.",
        "My cousin Eva works as a lawyer in a firm.",
    ]
    for i in range(6):
        mem.add({"role": "user", "content": repeated}, user_id="bo", session_id=f"r{i}", timestamp=f"2024-0{i + 1}-05")
    for j, text in enumerate(others):
        mem.add({"role": "user", "content": text}, user_id="bo", session_id=f"o{j}", timestamp=f"2024-08-0{j + 1}")
    q = "What do the people in my family work as?"
    raw = hybrid_search(mem.aio.store, q, Scope(user_id="bo"), HYBRID_RRF, 5)
    assert sum(any(o in h.chunk.text for h in raw) for o in others) < 4  # copies crowd them out unfolded
    hits = mem.search(q, user_id="bo", k=5)
    assert all(any(o in h.chunk.text for h in hits) for o in others)
    (maria,) = [h for h in hits if repeated in h.chunk.text]
    assert maria.chunk.timestamp.startswith("2024-06-05") and len(maria.folded) == 5  # the latest, 5 copies folded
    assert mem.search(q, user_id="other-user", k=5) == []  # folding reads nothing outside the scope


def test_two_tenants_saying_the_same_never_fold_together(mem):
    secret = "The launch code for the vault is 7741."
    for user in ("alice", "eve"):
        mem.add({"role": "user", "content": secret}, user_id=user, session_id="s1", timestamp="2024-01-01")
    hits = mem.search("launch code", all_scopes=True, k=5)
    assert sorted(h.chunk.scope.user_id for h in hits) == ["alice", "eve"] and all(not h.folded for h in hits)


def test_the_turn_view_folds_repeated_turns_too(mem):
    _stale_then_corrected(mem)
    rag_turns = get_strategy("rag-turns", {"k": 4, "max_tokens": None})
    mem.build("rag-turns", user_id="ana")
    query = Query(text="Which city do I live in?", scope=Scope(user_id="ana"))
    ctx = asyncio.run(rag_turns.context(query, mem.aio.env, None, Budget()))
    assert ctx.text.count(STALE) == 1 and CORRECTION in ctx.text and ctx.meta["folded"] == 5


# --- the question's date through the facade ------------------------------------------------


def test_ask_dates_the_question_now_when_none_is_given_and_shows_ages_in_the_context(mem):
    _stale_then_corrected(mem)
    before = datetime.now(timezone.utc).replace(microsecond=0)
    ans = mem.ask("Which city do I live in?", user_id="ana", strategy_options={"k": 4})
    asked = datetime.fromisoformat(ans.question_date)
    assert before <= asked.replace(microsecond=0) <= datetime.now(timezone.utc)
    dated = mem.ask(
        "Which city do I live in?", user_id="ana", question_date="2024-10-01 12:00", strategy_options={"k": 4}
    )
    assert dated.question_date == "2024-10-01T12:00:00+00:00"
    assert "(10 September 2024, 21 days (3 weeks) ago)" in dated.context
    for bad in ("", "-2023-05-30"):  # a signed year was read without its sign
        with pytest.raises(ValueError, match="question_date"):
            mem.ask("Which city?", user_id="ana", question_date=bad)
