"""MemoryCPT: reward (Eq. 14-16, 19), operation validation, relative dates, the memory bank's
RRF (Eq. 10), the construction pipeline's control flow (scripted model), SFT export, and an
end-to-end build + answer with the embedded model on a real LoCoMo slice."""

from __future__ import annotations

import asyncio
import json
import math

import pytest
from fakes import ScriptedClient

from memfrontier.api import Memory
from memfrontier.core.ledger import Ledger, use_ledger
from memfrontier.core.pricebook import PriceBook
from memfrontier.core.types import Record, Scope
from memfrontier.eval.datasets import load_dataset
from memfrontier.llm.metered import MeteredLLM
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.store.bank import BankItem, MemoryBank
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies import MemoryCPTConfig, MemoryEnv, Query, get_strategy
from memfrontier.strategies.memorycpt.construction import prompts as P
from memfrontier.strategies.memorycpt.construction.dates import resolve_relative_dates
from memfrontier.strategies.memorycpt.construction.episodic import EpisodicBuilder
from memfrontier.strategies.memorycpt.construction.ops import (
    OperationError,
    validate_episode,
    validate_facts,
    validate_merge,
    validate_segments,
)
from memfrontier.strategies.memorycpt.pipeline import MemoryCPT
from memfrontier.strategies.memorycpt.recipes import MEMORYCPT_SEMANTIC
from memfrontier.train.cost_reward import SummaryCostModel
from memfrontier.train.sft_export import export_sft

SCOPE = Scope(user_id="u1")


# --- reward (MemoryCPT Eq. 14-16, 19) ------------------------------------------------------------
@pytest.fixture(scope="module")
def cost_model():
    return SummaryCostModel.from_pricebook(PriceBook.load())


def test_reference_cost_is_the_papers_1_392e_5_usd(cost_model):
    # (60 * (0.10 + 0.10) + 8 * 0.24) / 1e6, MemoryCPT Eq. 19
    assert cost_model.reference_usd() == pytest.approx(1.392e-5, rel=1e-12)


@pytest.mark.parametrize(
    "f1, n_sum, n_ans, expected",
    [
        (0.5, 30, 4, 0.8 * 0.5 + 0.2 * (1 - 6.96 / 13.92)),  # C = 30*0.2 + 4*0.24 = 6.96e-6 -> C~ = 0.5
        (1.0, 120, 8, 0.8),  # C = 25.92e-6 > C_ref -> clipped to 1
        (0.0, 0, 0, 0.2),  # free and wrong
        (0.25, 10, 2, 0.8 * 0.25 + 0.2 * (1 - 2.48 / 13.92)),  # C = 2 + 0.48
    ],
)
def test_reward_matches_hand_computed_values(cost_model, f1, n_sum, n_ans, expected):
    assert cost_model.reward(f1, n_sum, n_ans, alpha=0.8) == pytest.approx(expected, rel=1e-12)


def test_reward_rejects_bad_alpha_and_f1(cost_model):
    with pytest.raises(ValueError):
        cost_model.reward(0.5, 10, 2, alpha=1.5)
    with pytest.raises(ValueError):
        cost_model.reward(1.2, 10, 2)
    with pytest.raises(ValueError):
        cost_model.cost_usd(-1, 2)
    assert cost_model.reward(0.5, 10, 2, alpha=1.0) == 0.5  # alpha = 1: quality only


# --- operation validation -----------------------------------------------------------------------
def test_segments_reject_unknown_and_reused_indices_and_cover_every_message():
    obj = {
        "episodes": [
            {"indices": [1, 2], "topic": "cars"},
            {"indices": [2, 3], "topic": "dup"},
            {"indices": [9], "topic": "unknown"},
            {"indices": [5], "topic": "trip"},
            {"topic": "none"},
        ]
    }
    segs, rejected = validate_segments(obj, 6)
    assert [(s.indices, s.topic, s.from_model) for s in segs] == [
        ([1, 2], "cars", True),
        ([3, 4], "", False),
        ([5], "trip", True),
        ([6], "", False),
    ]
    assert len(rejected) == 3
    with pytest.raises(OperationError):
        validate_segments({"segments": []}, 3)
    with pytest.raises(OperationError):
        validate_segments([1, 2], 3)


EP = {"title": "Evan bought a car", "content": "Evan bought a blue Prius in May."}


def test_episode_and_merge_validation():
    draft, fixed = validate_episode({**EP, "timestamp": "not a date"}, "2023-05-08T13:56")
    assert (draft.timestamp, fixed) == ("2023-05-08T13:56:00+00:00", True)
    draft, fixed = validate_episode({**EP, "timestamp": "2023-05-07T10:00"}, None)
    assert (draft.timestamp, fixed) == ("2023-05-07T10:00:00+00:00", False)
    with pytest.raises(OperationError):
        validate_episode({"title": "", "content": "C"}, None)
    assert validate_merge({"decision": "new", "target": 0}, 2, None).merge is False
    with pytest.raises(OperationError):
        validate_merge({"decision": "merge", "target": 3, "title": "t", "content": "c"}, 2, None)
    with pytest.raises(OperationError):
        validate_merge({"decision": "maybe"}, 2, None)
    ok = validate_merge({"decision": "merge", "target": 2, **EP, "timestamp": ""}, 2, "2023-01-01T00:00")
    assert (ok.merge, ok.target, ok.draft.timestamp) == (True, 2, "2023-01-01T00:00:00+00:00")


def test_fact_validation_rejects_duplicates_empty_and_long():
    ops = validate_facts(
        {"facts": ["Evan drives a Prius.", "evan drives a prius", "", 3, "x" * 301, "Evan lives in Canada"]},
        existing={"evan lives in canada"},
    )
    assert ops.facts == ["Evan drives a Prius."]
    assert ops.rejected == ["duplicate", "empty", "empty", "too_long", "duplicate"]
    with pytest.raises(OperationError):
        validate_facts({"facts": "Evan"})


# --- relative dates -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("She went to a support group yesterday.", "She went to a support group yesterday (7 May 2023)."),
        (
            "We met last Friday and again two weeks ago.",
            "We met last Friday (5 May 2023) and again two weeks ago (24 April 2023).",
        ),
        (
            "He moved last year; the trip is next month.",
            "He moved last year (2022); the trip is next month (June 2023).",
        ),
        ("Nothing relative here.", "Nothing relative here."),
    ],
)
def test_relative_dates_resolve_against_the_session_date(text, expected):
    out = resolve_relative_dates(text, "2023-05-08T13:56:00")
    assert out == expected
    assert resolve_relative_dates(out, "2023-05-08T13:56:00") == out  # idempotent


def test_relative_dates_need_a_session_date():
    assert resolve_relative_dates("see you tomorrow", None) == "see you tomorrow"


# --- memory bank: RRF over episodic and semantic indices ----------------------------------------
def _item(i, kind, text, ts="2023-05-08T13:56", sources=None):
    return BankItem(
        id=f"{kind}-{i}",
        kind=kind,
        scope=SCOPE,
        title="" if kind == "fact" else f"title {i}",
        text=text,
        timestamp=ts,
        source_ids=sources or [f"r{i}"],
    )


@pytest.fixture()
def bank(tmp_path, minilm):
    b = MemoryBank(tmp_path / "bank.db", minilm)
    b.apply(
        [
            _item(1, "episode", "Evan bought a new Prius after his old car broke down."),
            _item(2, "episode", "Sam went hiking in the Rockies with friends."),
            _item(3, "episode", "Evan and Sam talked about painting classes."),
            _item(1, "fact", "Evan drives a Prius."),
            _item(2, "fact", "Sam likes hiking."),
            _item(3, "fact", "Evan takes painting classes."),
            _item(4, "fact", "Sam has a dog named Max."),
            BankItem(id="other", kind="fact", scope=Scope(user_id="u2"), text="Evan drives a Tesla."),
        ]
    )
    yield b
    b.close()


def test_bank_search_fuses_dense_and_bm25_per_kind(bank):
    hits = hybrid_search(bank, "What car does Evan drive? Prius", SCOPE, MEMORYCPT_SEMANTIC, 2)
    assert [h.item.id for h in hits] == ["fact-1", "fact-3"]
    top = hits[0]
    assert top.ranks == {"dense": 1, "bm25": 1}
    assert top.score == pytest.approx(2 / 61)  # RRF k=60: 1/(60+1) from each retriever
    assert all(
        h.item.scope == SCOPE for h in hybrid_search(bank, "Evan drives", SCOPE, MEMORYCPT_SEMANTIC, 10)
    )  # u2's fact excluded


def test_memorycpt_candidates_respect_depth_and_concatenate_episodes_then_facts(tmp_path, minilm, bank):
    store = SQLiteStore(tmp_path / "store", minilm)
    env = MemoryEnv(store=store, llm=None, answer_llm=None)
    llm = MeteredLLM(ScriptedClient(lambda m: ""), PriceBook.load(), allow_unpriced=True)
    strat = MemoryCPT(MemoryCPTConfig(episodic_k=2, semantic_k=3, ablation="no_fs"), construction_llm=llm)
    strat.use_bank(env, bank)
    episodes, facts = strat.candidates("Evan's car", SCOPE, env)
    assert (len(episodes), len(facts)) == (2, 3)
    ctx = asyncio.run(strat.context(Query(text="Evan's car", scope=SCOPE), env, None, None))
    lines = ctx.text.splitlines()
    assert len(lines) == 5 and lines[0].startswith("(8 May 2023) title 1:") and lines[2].startswith("- ")
    assert ctx.evidence_ids[0] == "r1"
    strat = MemoryCPT(strat.config.model_copy(update={"ablation": "no_qar"}), construction_llm=llm)
    strat.use_bank(env, bank)
    e2, f2 = strat.candidates("Evan's car", SCOPE, env)  # plain dense top-(2+3) over both kinds together
    assert len(e2) + len(f2) == 5
    store.close()


# --- the construction pipeline's control flow (scripted model) -----------------------------------
def role_of(messages) -> str:
    system = messages[0]["content"]
    for prefix, role in (
        ("You split", "segmenter"),
        ("You write episodic", "episode"),
        ("You maintain", "merger"),
        ("You know some facts", "predict"),
        ("You update", "extract"),
        ("You build", "extract"),
    ):
        if system.startswith(prefix):
            return role
    raise AssertionError(system[:40])


def records_two_sessions():
    out = []
    for s, day in ((1, "2023-05-08T13:56:00"), (2, "2023-05-20T10:00:00")):
        for i, text in enumerate(
            ["I bought a Prius yesterday.", "Nice! What color?", "Blue, like my old one.", "Cool."], 1
        ):
            out.append(
                Record(
                    id=f"c:D{s}:{i}",
                    scope=SCOPE,
                    session_id=f"s{s}",
                    speaker="Evan" if i % 2 else "Sam",
                    timestamp=day,
                    text=text if s == 1 else text.replace("Prius", "bike"),
                )
            )
    return out


def good_script(messages):
    role = role_of(messages)
    if role == "segmenter":
        return json.dumps({"reasoning": "one topic", "episodes": [{"indices": [1, 2, 3, 4], "topic": "car"}]})
    if role == "episode":
        return json.dumps(
            {
                "reasoning": "r",
                "title": "Evan bought a vehicle",
                "content": "Evan bought a new car yesterday.",
                "timestamp": "2023-05-08T13:56",
            }
        )
    if role == "merger":
        return json.dumps(
            {"reasoning": "different", "decision": "new", "target": 0, "title": "", "content": "", "timestamp": ""}
        )
    if role == "predict":
        return "Evan bought something."
    return json.dumps({"reasoning": "durable", "facts": ["Evan owns a blue vehicle."]})


@pytest.fixture()
def store(tmp_path, minilm):
    s = SQLiteStore(tmp_path / "store", minilm)
    s.add(records_two_sessions())
    yield s
    s.close()


def _build(client, store, ledger=None):
    bank = MemoryBank.for_store(store, "memorycpt-test")
    builder = EpisodicBuilder(MeteredLLM(client, PriceBook.load(), allow_unpriced=True), bank)
    ledger = ledger or Ledger()
    with use_ledger(ledger, "construction"):
        report = asyncio.run(builder.build(SCOPE, store.records(SCOPE)))
    return bank, report, ledger


def test_build_applies_valid_ops_keeps_provenance_and_is_idempotent(store):
    client = ScriptedClient(good_script)
    bank, report, ledger = _build(client, store)
    eps = bank.items(SCOPE, "episode")
    assert [e.source_ids for e in eps] == [[f"c:D1:{i}" for i in range(1, 5)], [f"c:D2:{i}" for i in range(1, 5)]]
    assert eps[0].text == "Evan bought a new car yesterday (7 May 2023)."  # resolved against session 1's date
    assert eps[1].text == "Evan bought a new car yesterday (19 May 2023)."  # ... and session 2's, not the wall clock
    facts = bank.items(SCOPE, "fact")
    assert [f.text for f in facts] == ["Evan owns a blue vehicle."]  # the repeat in session 2 is a duplicate
    assert facts[0].source_ids == [f"c:D1:{i}" for i in range(1, 5)]
    assert report.sessions_built == 2 and ledger.events["memorycpt.op_rejected.semantic_extractor"] == 1
    assert all(c.stage == "construction" for c in ledger.calls)
    n_calls = client.n_calls
    bank2, report2, ledger2 = _build(client, store)
    assert (report2.sessions_built, report2.sessions_skipped, client.n_calls) == (0, 2, n_calls)
    assert len(bank2.items(SCOPE, "episode")) == 2 and not ledger2.calls
    assert bank2.done_usage(SCOPE)[0]["calls"] > 0  # the build's cost is kept with the view


def test_bad_json_is_rejected_counted_and_retried_once(store):
    replies = {"segmenter": ["{not json", "[1, 2]"], "episode": ['{"title": "", "content": ""}']}

    def script(messages):
        role = role_of(messages)
        queue = replies.get(role)
        if queue:
            return queue.pop(0)
        return good_script(messages)

    bank, report, ledger = _build(ScriptedClient(script), store)
    ev = ledger.events
    assert ev["memorycpt.op_rejected.segmenter"] == 2 and ev["memorycpt.op_rejected.episode_generator"] == 1
    assert [(f.role, f.module, f.step) for f in ledger.fallbacks] == [
        ("segmenter", "segmenter", 0)
    ]  # the episode retried
    eps = bank.items(SCOPE, "episode")
    assert len(eps) == 2 and all(len(e.source_ids) == 4 for e in eps)  # fallback: the window is one segment
    rejected = [t for t in bank.traces() if not t.accepted]
    assert {t.role for t in rejected} == {"segmenter", "episode_generator"}


def test_merge_replaces_its_target_and_unknown_targets_are_rejected(store):
    decisions = [
        json.dumps({"reasoning": "x", "decision": "merge", "target": 7, "title": "t", "content": "c", "timestamp": ""}),
        json.dumps(
            {
                "reasoning": "x",
                "decision": "merge",
                "target": 1,
                "title": "Evan's vehicles",
                "content": "Evan bought a Prius, then a bike.",
                "timestamp": "2023-05-20T10:00",
            }
        ),
    ]

    def script(messages):
        if role_of(messages) == "merger":
            return decisions.pop(0) if decisions else good_script(messages)
        return good_script(messages)

    bank, report, ledger = _build(ScriptedClient(script), store)
    eps = bank.items(SCOPE, "episode")
    assert ledger.events["memorycpt.op_rejected.episode_merger"] == 1
    assert len(eps) == 1 and report.episodes_merged == 1
    assert eps[0].source_ids == [f"c:D1:{i}" for i in range(1, 5)] + [f"c:D2:{i}" for i in range(1, 5)]
    assert eps[0].timestamp == "2023-05-08T13:56:00+00:00"  # the earlier of the two


def test_unreadable_model_dates_become_the_session_date_and_are_counted(store):
    def script(messages):
        if role_of(messages) == "episode":
            return json.dumps(
                {
                    "reasoning": "r",
                    "title": "Evan bought a vehicle",
                    "content": "Evan bought a new car yesterday.",
                    "timestamp": "yesterday",
                }
            )
        return good_script(messages)

    bank, _, ledger = _build(ScriptedClient(script), store)
    eps = bank.items(SCOPE, "episode")
    assert [e.timestamp for e in eps] == ["2023-05-08T13:56:00+00:00", "2023-05-20T10:00:00+00:00"]  # never today
    assert ledger.events["memorycpt.timestamp_fixed"] == 2


def test_garbage_facts_are_never_stored_and_are_counted_by_reason(store):
    def script(messages):
        if role_of(messages) == "extract":
            turn = (
                "I bought a Prius yesterday."
                if "(7 May 2023)" in messages[-1]["content"]
                else "I bought a bike yesterday."
            )
            return json.dumps({"reasoning": "r", "facts": [",", f"Evan: {turn}", "Evan owns a blue vehicle."]})
        return good_script(messages)

    bank, _, ledger = _build(ScriptedClient(script), store)
    assert [f.text for f in bank.items(SCOPE, "fact")] == ["Evan owns a blue vehicle."]
    ev = ledger.events
    assert ev["memorycpt.content_rejected.semantic_extractor.bare_punctuation"] == 2
    assert ev["memorycpt.content_rejected.semantic_extractor.copied_turn"] == 2
    assert ev["memorycpt.op_rejected.semantic_extractor"] == 5  # and the repeat in session 2 as a duplicate


def test_an_episode_naming_the_prompts_example_people_is_an_echo_unless_the_turns_name_them():
    """The episode prompt carries one worked example (its people: EXAMPLE_NAMES); a memory that names
    one of them when the source turns do not wrote the example into memory (seen with the 1.5B model:
    "Sam asked Tom..." after an example with a Tom, in a Sam-and-Evan conversation)."""
    from memfrontier.strategies.memorycpt.construction import prompts as P

    a, b = P.EXAMPLE_NAMES
    assert a in P.EPISODE_SYSTEM and b in P.EPISODE_SYSTEM
    turns = ["Can you give me a hand with getting started?", "Sure, happy to help."]
    leaked = {
        "title": "Sam asks for help getting started",
        "content": f"On June 6, 2023 Sam asked {b} for a hand getting started.",
    }
    with pytest.raises(OperationError) as e:
        validate_episode(leaked, None, turns)
    assert e.value.reason == "instruction_echo"
    with pytest.raises(OperationError, match="title rejected: instruction_echo"):
        validate_episode({**EP, "title": f"{a} and Evan talk cars"}, None, turns)
    draft, _ = validate_episode(leaked, None, turns + [f"{b}, can you help me?"])  # a real {b} in the conversation
    assert b in draft.content
    draft, _ = validate_episode(leaked, None, turns, [b, "Sam"])  # {b} is a speaker of the turns: no echo
    assert b in draft.content
    with pytest.raises(OperationError, match="instruction_echo"):
        validate_merge({"decision": "merge", "target": 1, **leaked}, 1, None, turns, ["Sam"])
    assert (
        validate_merge({"decision": "merge", "target": 1, **leaked}, 1, None, turns, [b]).draft.content
        == leaked["content"]
    )


def test_the_episode_prompt_names_a_topic_only_when_there_is_one():
    """An episode without a segmenter topic gets no topic line: "Episode topic: (none)" made the 1.5B
    model answer with an empty title and content (24 of 47 rejected first tries on LoCoMo conv-49)."""
    from memfrontier.strategies.memorycpt.construction import prompts as P

    lines = ["[2023-05-18 13:47] Sam: See you soon!"]
    assert P.episode_user("", lines) == "Messages:\n[2023-05-18 13:47] Sam: See you soon!\n\nJSON:"
    assert P.episode_user("Farewell", lines).startswith("Episode topic: Farewell\nMessages:\n")


def test_an_episode_copied_from_the_turns_is_rejected_and_retried(store):
    copies = [
        json.dumps(
            {
                "reasoning": "r",
                "title": "Evan and Sam talk cars",
                "content": "Evan: I bought a Prius yesterday. Sam: Nice! What color? Evan: Blue, like my old one.",
                "timestamp": "2023-05-08T13:56",
            }
        )
    ]

    def script(messages):
        if role_of(messages) == "episode" and copies and "Prius" in messages[-1]["content"]:
            return copies.pop()
        return good_script(messages)

    client = ScriptedClient(script)
    bank, _, ledger = _build(client, store)
    assert ledger.events["memorycpt.content_rejected.episode_generator.copied_turn"] == 1
    assert [e.text for e in bank.items(SCOPE, "episode")][0] == "Evan bought a new car yesterday (7 May 2023)."
    # the retry says why the first reply was refused, before the prompt's closing label, at a higher
    # temperature, without showing the refused reply (qad-v3 showed it: the model repeated it)
    episode_calls = [(m, kw) for m, kw in client.seen if role_of(m) == "episode" and "Prius" in m[1]["content"]]
    (first, kw1), (retry, kw2) = episode_calls
    assert [m["role"] for m in retry] == ["system", "user"] and retry[0] == first[0]
    assert first[1]["content"].endswith("\n\nJSON:")
    assert retry[1]["content"] == first[1]["content"][: -len("JSON:")] + P.RETRY_HINTS["copied_turn"] + "\nJSON:"
    assert "Evan: I bought a Prius yesterday. Sam: Nice!" not in retry[1]["content"]  # the refused reply
    assert (kw1["temperature"], kw2["temperature"]) == (0.0, 0.3)


def test_a_speaker_who_shares_a_name_with_the_examples_people_is_no_echo(tmp_path, minilm):
    """A person of the prompt's example who is a speaker of the source turns (here "Tomasz" talks
    with Evan) is named in the episode without the episode being refused as an echo."""
    from memfrontier.strategies.memorycpt.construction import prompts as P

    b = P.EXAMPLE_NAMES[1]
    s = SQLiteStore(tmp_path / "store", minilm)
    s.add([r.model_copy(update={"speaker": b if r.speaker == "Sam" else r.speaker}) for r in records_two_sessions()])

    def script(messages):
        if role_of(messages) == "episode":
            return json.dumps(
                {
                    "reasoning": "r",
                    "title": f"Evan tells {b} about a vehicle",
                    "content": f"Evan told {b} he bought a new car yesterday.",
                    "timestamp": "2023-05-08T13:56",
                }
            )
        return good_script(messages)

    bank, _, ledger = _build(ScriptedClient(script), s)
    s.close()
    assert not [k for k in ledger.events if "instruction_echo" in k]
    assert [e.text for e in bank.items(SCOPE, "episode")][
        0
    ] == f"Evan told {b} he bought a new car yesterday (7 May 2023)."


def test_the_merger_and_episode_schemas_cannot_decode_an_empty_memory():
    """qad-v3: "new" carries nothing else and "merge" a non-empty title and content, so the grammar
    cannot decode a merge without content; the schema converts to a llama.cpp grammar."""
    from llama_cpp import LlamaGrammar

    new, merge = P.MERGER_SCHEMA["anyOf"]
    assert new["required"] == ["reasoning", "decision"] and new["properties"]["decision"] == {"const": "new"}
    assert merge["properties"]["content"]["minLength"] == 20 and "content" in merge["required"]
    LlamaGrammar.from_json_schema(json.dumps(P.MERGER_SCHEMA), verbose=False)
    # nor an episode without title or content (a retry told why it was refused once came back empty)
    assert (
        P.EPISODE_SCHEMA["properties"]["title"]["minLength"],
        P.EPISODE_SCHEMA["properties"]["content"]["minLength"],
    ) == (3, 20)
    LlamaGrammar.from_json_schema(json.dumps(P.EPISODE_SCHEMA), verbose=False)
    assert validate_merge({"decision": "new"}, 2, None).merge is False  # the "new" shape validates as it is
    assert P.retry_messages(
        [{"role": "user", "content": "Stored episodes: none"}], "merge target 3 is not one of the 2 candidates"
    )[-1]["content"] == (
        "Stored episodes: none\n\n(A first reply to this was refused: merge target 3 is not one of the 2 "
        "candidates. Follow the rules.)"
    )


def test_interrupted_build_resumes_at_the_unfinished_session(store):
    def crash_in_session_2(messages):
        if "2023-05-20" in messages[-1]["content"]:
            raise KeyboardInterrupt
        return good_script(messages)

    with pytest.raises(KeyboardInterrupt):
        _build(ScriptedClient(crash_in_session_2), store)
    client = ScriptedClient(good_script)
    bank, report, _ = _build(client, store)
    assert (report.sessions_skipped, report.sessions_built) == (1, 1)
    assert len(bank.items(SCOPE, "episode")) == 2


def test_sft_export_writes_sharegpt_per_role(store, tmp_path, minilm):
    bank, _, _ = _build(ScriptedClient(good_script), store)
    counts = export_sft([bank.path], tmp_path / "sft", minilm)
    assert counts["segmenter"] == 2 and counts["episode_generator"] == 2
    line = json.loads((tmp_path / "sft" / "episode_generator.jsonl").read_text().splitlines()[0])
    assert [t["from"] for t in line["conversations"]] == ["system", "human", "gpt"]
    target = line["conversations"][-1]["value"]
    assert (
        target.startswith("<think>r</think>\n")
        and json.loads(target.split("\n", 1)[1])["title"] == "Evan bought a vehicle"
    )


# --- end to end with the embedded model -----------------------------------------------------------
@pytest.mark.slow
@pytest.mark.data
def test_memorycpt_builds_and_answers_a_real_locomo_slice(tmp_path):
    (conv,) = [c for c in load_dataset("locomo", "test") if c.id == "conv-49"]
    records = [r for r in conv.records if r.session_id == "conv-49:session_1"][:10]
    # the 270M model's episodes may fall back above the default gate: this test is about the pipeline
    with Memory.open(tmp_path / "mem", fallback_threshold=1.0) as m:
        m.aio.store.add(records)
        strat = get_strategy("memorycpt", episodic_k=4, semantic_k=6)
        ledger = asyncio.run(m.aio.construct(strat, records[0].scope))
        bank = strat.bank(m.aio.env)
        assert bank.path.name == "memorycpt-gemma-3-270m-q4_k_m-qad-v4.db"  # model and QAD prompt version
        eps = bank.items(records[0].scope, "episode")
        assert eps and ledger.usage().construction.calls >= 2
        ids = {r.id for r in records}
        assert all(e.source_ids and set(e.source_ids) <= ids for e in eps)
        assert sum(len(e.source_ids) for e in eps) == len(records)  # every turn is in exactly one episode
        ans = m.ask("What kind of car does Evan drive?", user_id=records[0].scope.user_id, strategy=strat)
        assert ans.usage.by_role["summarizer"].calls == 1 and ans.usage.by_role["answerer"].calls == 1
        assert ans.evidence_ids and set(ans.evidence_ids) <= ids
        assert ans.usage.query.usd > 0 and not math.isnan(ans.usage.query.usd)
        again = asyncio.run(m.aio.construct(strat, records[0].scope))
        assert again.calls == []  # idempotent


# --- CLI flags and the sweep report ---------------------------------------------------------------
def test_cli_rejects_memorycpt_flags_elsewhere_and_bad_values(tmp_path):
    from typer.testing import CliRunner

    from memfrontier.cli import app

    run = CliRunner().invoke
    res = run(app, ["eval", "--strategy", "rag", "--set", "episodic_k=3", "--out", str(tmp_path / "a")])
    assert res.exit_code == 2 and "unknown key 'episodic_k'; keys: k, retrievers" in res.output
    res = run(app, ["eval", "--strategy", "memorycpt", "--set", "ablation=no-magic", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "unknown ablation 'no_magic'; choose one of: none, no_qad" in " ".join(
        res.output.split()
    )
    res = run(
        app,
        ["eval", "--strategy", "memorycpt", "--set", f"summarizer_adapter={tmp_path}", "--out", str(tmp_path / "c")],
    )
    assert res.exit_code == 2 and "not a LoRA adapter directory" in " ".join(res.output.split())
    res = run(app, ["export", "sft", "--store", str(tmp_path / "nowhere")])
    assert res.exit_code == 2
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_sweep_plan_and_report(tmp_path):
    from memfrontier.eval.sweeps.memorycpt import (
        plan_memorycpt_sweep,
        write_memorycpt_report,
    )

    (tmp_path / "qar" / "alpha_0.8" / "adapter").mkdir(parents=True)
    (tmp_path / "qar" / "alpha_0.8" / "adapter" / "adapter_config.json").write_text("{}")
    runs, missing = plan_memorycpt_sweep((0.2, 0.8), ((2, 5), (20, 50)), ("none", "no_fs"), adapters=tmp_path / "qar")
    assert [r.name for r in runs] == ["alpha_0.8", "depth_2_5", "depth_20_50", "ablation_none", "ablation_no_fs"]
    assert missing == [tmp_path / "qar" / "alpha_0.2" / "adapter"]
    assert runs[1].options == {"episodic_k": 2, "semantic_k": 5} and runs[4].options == {"ablation": "no_fs"}

    def summary(f1, usd):
        return {
            "metrics": {"all": {"n_questions": 4, "f1": f1, "usd_per_question": usd, "qpc": f1 / (usd * 1e4)}},
            "amortized_usd_per_question": {"314": usd * 2},
        }

    results = [
        {
            "name": r.name,
            "kind": r.kind,
            "label": r.label,
            "order": r.order,
            "summary": summary(0.1 * (i + 1), 1e-5 * (i + 1)),
        }
        for i, r in enumerate(runs)
    ]
    written = write_memorycpt_report(results, tmp_path / "out", missing)
    assert {"csv", "md", "pareto"} <= set(written) and written["pareto"].stat().st_size > 1000
    md = written["md"].read_text()
    assert "| depth | 2/5 | 4 | 0.2000 | - | 0.2000 | 0.4000 | 1.0000 |" in md and "alpha_0.2" in md


def test_a_runs_construction_reports_each_session_and_counts_fallbacks_of_every_run(tmp_path, minilm):
    """What eval and frontier show while MemoryCPT builds: a ``construct`` event after each
    session with this run's model calls and failures so far. Session 1's segmenter gets two
    unreadable replies and falls back; the run is then interrupted in session 2. The run that
    resumes builds session 2 only, yet its construction entry (what the run's fallback shares
    read) still counts session 1's fallback and calls, from the bank's record of each session."""
    from memfrontier.api import AsyncMemory
    from memfrontier.core.types import Conversation
    from memfrontier.eval.fallbacks import fallback_report
    from memfrontier.eval.tasks import build_counts, construct

    replies = ["{not json", "[1, 2]"]
    stop = {"armed": True}

    def script(messages):
        if stop["armed"] and "2023-05-20" in messages[-1]["content"]:
            raise KeyboardInterrupt
        if role_of(messages) == "segmenter" and replies:
            return replies.pop(0)
        return good_script(messages)

    client = ScriptedClient(script)
    conv = Conversation(id="u1", records=records_two_sessions(), questions=[])

    def run():
        mem = AsyncMemory.open(tmp_path / "mem", llm=client, allow_unpriced=True, embedder=minilm)
        events = []
        try:
            entry = asyncio.run(construct(mem, MemoryCPT(), conv, lambda ev, **info: events.append((ev, info))))
        finally:
            mem.close()
        return entry, [
            (i["done"], i["total"], i["unit"], i["calls"], i["failed"]) for ev, i in events if ev == "construct"
        ]

    with pytest.raises(KeyboardInterrupt):
        run()
    # session 1: segmenter twice (refused, fell back), episode, extractor; then session 2's first call
    assert [role_of(m) for m, _ in client.seen] == ["segmenter", "segmenter", "episode", "extract", "segmenter"]
    stop["armed"] = False
    entry, steps = run()
    # session 2 adds the merger and the predictor (there is something to merge into and predict from)
    assert [role_of(m) for m, _ in client.seen[5:]] == ["segmenter", "episode", "merger", "predict", "extract"]
    # before the first session, then after each: this run's calls (session 2's), no failure in this run
    assert steps == [(0, 2, "sessions", 0, 0), (1, 2, "sessions", 0, 0), (2, 2, "sessions", 5, 0)]
    assert entry["calls_by_role"] == {
        "segmenter": 3,
        "episode_generator": 2,
        "semantic_extractor": 2,
        "episode_merger": 1,
        "semantic_predictor": 1,
    }
    assert [f["role"] for f in entry["fallbacks"]] == ["segmenter"] and entry["sessions_without_events"] == 0
    seg = fallback_report([], construction=[entry])["by_role"]["segmenter"]
    assert (seg["calls"], seg["fallbacks"]) == (3, 1)
    assert build_counts(entry) == {"calls": 9, "failed": 1, "built_calls": 5}
    entry, steps = run()  # built: no call, the same record
    assert steps == [(0, 2, "sessions", 0, 0), (1, 2, "sessions", 0, 0), (2, 2, "sessions", 0, 0)]
    assert build_counts(entry) == {"calls": 9, "failed": 1, "built_calls": 0} and len(client.seen) == 10


def test_a_build_bound_to_be_refused_stops_early_and_keeps_what_it_built(tmp_path, minilm):
    """Under a fallback threshold, a construction whose failures already exceed it (with margin) of
    the calls the whole build would make stops after its current session (FallbackError, no
    summary) instead of spending the rest of the build on a run that would be refused. Session 1's
    segmenter falls back on 1 of its 2 calls: of the ~4 calls two sessions would make, 25% > 5%
    x 1.5, so the build stops before session 2; session 1 stays built, and with the threshold off
    (--allow-fallbacks) the same build goes on with session 2 only."""
    from memfrontier.api import AsyncMemory
    from memfrontier.core.types import Conversation
    from memfrontier.eval.fallbacks import FallbackError
    from memfrontier.eval.tasks import construct

    replies = ["{not json", "[1, 2]"]

    def script(messages):
        if role_of(messages) == "segmenter" and replies:
            return replies.pop(0)
        return good_script(messages)

    client = ScriptedClient(script)
    conv = Conversation(id="u1", records=records_two_sessions(), questions=[])
    mem = AsyncMemory.open(tmp_path / "mem", llm=client, allow_unpriced=True, embedder=minilm)
    try:
        with pytest.raises(FallbackError) as e:
            asyncio.run(construct(mem, MemoryCPT(), conv, stop_above=0.05))
        assert e.value.summary is None
        assert str(e.value).startswith(
            "stopped building u1's memory after 1 of 2 sessions: role 'segmenter': 1 of its 2 calls so far fell back, "
            "already 25% of the ~4 calls the run's memory construction would make; threshold 5%"
        )
        assert "What was built is kept; --allow-fallbacks builds on" in str(e.value)
        assert [role_of(m) for m, _ in client.seen] == ["segmenter", "segmenter", "episode", "extract"]
        entry = asyncio.run(construct(mem, MemoryCPT(), conv))  # no threshold: builds on from session 2
    finally:
        mem.close()
    assert [role_of(m) for m, _ in client.seen[4:]] == ["segmenter", "episode", "merger", "predict", "extract"]
    assert [f["role"] for f in entry["fallbacks"]] == ["segmenter"]  # session 1's, from the bank's record


def test_a_session_stored_before_fallbacks_were_records_still_counts_them():
    """A bank session stored when fallbacks were ``memorycpt.fallback.ROLE`` events keeps counting
    them (one step-0 record each); a session with records, or without events, is read as stored."""
    from memfrontier.core.fallbacks import fallback_report
    from memfrontier.strategies.memorycpt.pipeline import _with_fallback_records

    old = {
        "calls": 4,
        "calls_by_role": {"segmenter": 2, "episode_generator": 2},
        "events": {"memorycpt.fallback.segmenter": 1, "memorycpt.op_rejected.segmenter": 2},
    }
    assert _with_fallback_records(old)["fallbacks"] == [
        {"role": "segmenter", "module": "segmenter", "tier": None, "reason": None, "step": 0}
    ]
    seg = fallback_report([], construction=[_with_fallback_records(old)])["by_role"]["segmenter"]
    assert (seg["calls"], seg["fallbacks"], seg["fallback_share"]) == (2, 1, 0.5)
    recorded = {**old, "fallbacks": []}
    assert _with_fallback_records(recorded) is recorded and _with_fallback_records({"calls": 3}) == {"calls": 3}


def test_doomed_build_projects_the_calls_left_hand_computed():
    from memfrontier.eval.fallbacks import doomed_build

    # 3 of 25 sessions built, 4 of 9 calls fell back: growth 1 + 22/3 -> ~75 calls in all;
    # 4 <= 0.05 x 1.5 x 75 = 5.625: go on
    def fell(n, reason=None):
        return [{"role": "episode_generator", "module": "episode_generator", "reason": reason, "step": 0}] * n

    entry = {"calls_by_role": {"episode_generator": 9}, "fallbacks": fell(4)}
    assert doomed_build(entry, growth=1 + 22 / 3) is None
    # 5 of 25: 7 of 15 fell back, growth 5 -> ~75: 7 > 5.625, stop
    entry = {"calls_by_role": {"episode_generator": 15, "segmenter": 5}, "fallbacks": fell(7, "instruction_echo")}
    assert doomed_build(entry, growth=5) == (
        "role 'episode_generator': 7 of its 15 calls so far fell back, already 9% of the ~75 calls the run's "
        "memory construction would make; threshold 5%. First error: outputs refused, most often "
        "instruction_echo (7)"
    )
    assert doomed_build(entry, 0.1, growth=5) is None  # 7 <= 0.1 x 1.5 x 75 = 11.25
    # a second conversation as long as this one is still to build: ~150 calls, 7 <= 11.25
    assert doomed_build(entry, growth=5, future=2.0) is None
    # a first conversation built without a failure in 100 calls: (100 + 75) calls, 7 <= 13.1
    clean = {"calls_by_role": {"episode_generator": 100}, "events": {}}
    assert doomed_build(entry, growth=5, settled=[clean]) is None
    # ... with 8 fallbacks there: 15 of 115 calls so far, 15 > 0.075 x 175 = 13.125: stop
    dirty = {"calls_by_role": {"episode_generator": 100}, "fallbacks": fell(8)}
    assert doomed_build(entry, growth=5, settled=[dirty]).startswith(
        "role 'episode_generator': 15 of its 115 calls so far fell back, already 9% of the ~175 calls"
    )
    # errors count as failures too
    assert doomed_build(
        {
            "calls_by_role": {"indexer": 4},
            "events": {"llm_error.indexer": 4},
            "call_errors": [{"role": "indexer", "error": "HTTP 500"}],
        },
        growth=5,
    ).startswith("role 'indexer': 4 of its 4 calls so far failed, already 20% of the ~20 calls")


def test_a_conversation_shorter_than_a_segment_still_yields_memories(tmp_path, minilm):
    store = SQLiteStore(tmp_path / "short", minilm)
    store.add(
        [
            Record(
                id="short:1",
                scope=SCOPE,
                session_id="s1",
                speaker="Evan",
                timestamp="2023-05-08T13:56:00",
                text="I bought a Prius yesterday.",
            )
        ]
    )
    client = ScriptedClient(good_script)
    bank, report, _ = _build(client, store)
    assert "segmenter" not in [
        role_of(m) for m, _ in client.seen
    ]  # below the segment minimum: one episode, no segmentation call
    (ep,) = bank.items(SCOPE, "episode")
    assert ep.source_ids == ["short:1"] and report.episodes_added == 1
    store.close()


def test_a_failing_construction_model_stops_the_build_and_leaves_the_session_unbuilt(store):
    from memfrontier.llm.base import LLMError

    def unreachable(messages):
        raise LLMError("connection refused")

    with pytest.raises(LLMError, match="stays unbuilt"):
        _build(ScriptedClient(unreachable), store)
    bank, report, _ = _build(ScriptedClient(good_script), store)
    assert report.sessions_built == 2 and len(bank.items(SCOPE, "episode")) == 2


@pytest.mark.data
def test_the_episode_prompts_examples_pass_its_own_checks_and_share_no_phrase_with_the_benchmarks(monkeypatch):
    """Both worked examples of the episode prompt (two named people; a user and an AI assistant)
    are episodes the generator's checks accept (all but the echo check, which they are the source
    of), and no 5-word sequence of the prompt's examples occurs in a LoCoMo or LongMemEval turn:
    the echo check (5-grams of the instructions) could otherwise refuse a real episode that
    retells such a turn."""
    import json
    import re

    from memfrontier.eval.datasets import data_root
    from memfrontier.strategies.memorycpt.construction import ops as episodic_ops
    from memfrontier.strategies.memorycpt.construction import prompts as P
    from memfrontier.strategies.memorycpt.construction.ops import ECHO_NGRAM, _ngrams, _words

    root = data_root()
    monkeypatch.setattr(episodic_ops, "_INSTRUCTION_NGRAMS", set())
    examples = P.EPISODE_SYSTEM.split("Messages:\n")[1:]
    assert len(examples) == 2
    grams = set()
    for ex in examples:
        turns = re.findall(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d)\] (\w+): (.*)$", ex, re.M)
        reply = json.loads(ex.split("JSON: ", 1)[1].split("\n")[0])
        draft, fixed = validate_episode(
            reply, turns[0][0].replace(" ", "T"), [t for _, _, t in turns], [w for _, w, _ in turns]
        )
        assert len(turns) == 2 and not fixed and draft.timestamp.startswith(turns[0][0][:10])
        grams |= _ngrams(_words(ex.split("JSON: ", 1)[0] + " " + reply["title"] + " " + reply["content"]), ECHO_NGRAM)
    assert [w for _, w, _ in turns] == ["user", "assistant"] and reply["content"].startswith(
        "On February 7, 2024 the user"
    )
    texts = [
        t.get("text", "")
        for conv in json.loads((root / "locomo" / "locomo10.json").read_text())
        for k, v in conv["conversation"].items()
        if k.startswith("session_") and isinstance(v, list)
        for t in v
    ]
    texts += [
        t["content"]
        for q in json.loads((root / "longmemeval" / "longmemeval_oracle.json").read_text())
        for s in q["haystack_sessions"]
        for t in s
    ]
    assert len(texts) > 10_000
    shared = set().union(*(_ngrams(_words(t), ECHO_NGRAM) & grams for t in texts))
    assert shared == set()


def test_an_episode_that_takes_an_examples_date_is_an_echo_unless_the_messages_are_of_that_day():
    """qad-v4 with the 1.5B model: "On March 12, 2024 the user asked ..." for messages of May 28, 2023
    (the first example's day): refused as an echo of the example, as a name of it is."""
    from memfrontier.strategies.memorycpt.construction import prompts as P
    from memfrontier.strategies.memorycpt.construction.ops import gives_example_date

    assert "[2024-03-12 18:05]" in P.EPISODE_SYSTEM and "On March 12, 2024" in P.EPISODE_SYSTEM
    assert "[2024-02-07 10:02]" in P.EPISODE_SYSTEM and "On February 7, 2024" in P.EPISODE_SYSTEM
    took = {
        "title": "The user asks about camera bags",
        "content": "On March 12, 2024 the user asked for camera bags for Sony cameras.",
    }
    turns = ["Any camera bags designed for Sony cameras?"]
    with pytest.raises(OperationError) as e:
        validate_episode(took, "2023-05-28T12:58", turns)
    assert e.value.reason == "instruction_echo"
    assert validate_episode(took, "2024-03-12T09:00", turns)[0].content == took["content"]  # that day indeed
    assert gives_example_date("We met on February 7, 2024.", None) and not gives_example_date(
        "On March 12, 2023 ...", None
    )
    assert not gives_example_date("On May 28, 2023 the user asked about March plans.", "2023-05-28T12:58")
