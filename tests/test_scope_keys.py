"""Scopes become keys, partitions, bank rows and graph folders injectively."""

from __future__ import annotations

import hashlib
import json
import sqlite3

import pytest

from memfrontier.core.types import Record, Scope
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.retrieve.recipes import BM25_ONLY, HYBRID_RRF
from memfrontier.store.bank import BankItem, MemoryBank
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies.automem.graph import graph_exists, open_graph, state_dir
from memfrontier.strategies.automem.graph_builder import graph_from_notes
from memfrontier.strategies.automem.graph_notes import Note
from memfrontier.strategies.memorycpt.recipes import MEMORYCPT_SEMANTIC

FIRST = Scope(user_id="x|y")
SECOND = Scope(user_id="x", agent_id="y|")
LOCKER = "My locker code is 4417."
LEMONS = "Remind me to buy lemons and basil."


def test_keys_are_injective_and_empty_ids_are_rejected():
    assert FIRST.key() != SECOND.key()
    assert FIRST.key() == '["x|y",null,null]' and SECOND.key() == '["x","y|",null]'
    assert Scope(user_id="a", agent_id="b").key() != Scope(user_id="a", run_id="b").key()
    key = Scope(user_id='q"]', run_id="\U0001f436").key()
    assert key.isascii() and json.loads(key) == ['q"]', None, "\U0001f436"]  # escaped, ASCII
    with pytest.raises(ValueError, match="run_id holds a lone surrogate"):  # no store could keep it
        Scope(run_id="\ud83d")
    for field in ("user_id", "agent_id", "run_id"):
        with pytest.raises(ValueError, match=f"{field} must be a non-empty string"):
            Scope(**{field: ""})
    # folder names: safe characters only, injective through the hash of the key
    a, b = FIRST.slug(), Scope(user_id="x_y").slug()
    assert a.startswith("u-x_y-") and b.startswith("u-x_y-") and a != b
    assert a == "u-x_y-" + hashlib.sha256(FIRST.key().encode()).hexdigest()[:16]
    odd = Scope(user_id="../../etc", agent_id="a b")
    assert odd.slug() == "u-______etc.a-a_b-" + hashlib.sha256(odd.key().encode()).hexdigest()[:16]
    assert Scope().slug().startswith("any-")


def test_store_keeps_colliding_scopes_apart(tmp_path, minilm):
    store = SQLiteStore(tmp_path / "m", minilm)
    store.add([Record(id="r1", scope=FIRST, text=LOCKER), Record(id="r2", scope=SECOND, text=LEMONS)])
    assert [c.text for c in store.chunks(FIRST)] == [LOCKER] and [c.text for c in store.chunks(SECOND)] == [LEMONS]
    for recipe in (HYBRID_RRF, BM25_ONLY):
        assert all(LEMONS not in h.chunk.text for h in hybrid_search(store, "lemons", FIRST, recipe, 5))
        assert [h.chunk.text for h in hybrid_search(store, "lemons", SECOND, recipe, 5)] == [LEMONS]
    assert [h.chunk.record_ids for h in hybrid_search(store, "lemons", FIRST, HYBRID_RRF, 5)] == [["r1"]]
    assert store.search_bm25("lemons", FIRST, 5) == []
    # user "x" across agents sees the second scope only (never "x|y")
    assert [c.text for c, _ in store.search_bm25("lemons locker", Scope(user_id="x"), 5)] == [LEMONS]
    store.close()


def test_banks_keep_colliding_scopes_apart(tmp_path, minilm):
    bank = MemoryBank(tmp_path / "bank.db", minilm)
    bank.apply(
        [
            BankItem(id="f1", kind="fact", scope=FIRST, text=LOCKER),
            BankItem(id="f2", kind="fact", scope=SECOND, text=LEMONS),
        ],
        done=[(FIRST, "s1", {"usd": 1.0})],
    )
    assert [h.item.text for h in hybrid_search(bank, "lemons", FIRST, MEMORYCPT_SEMANTIC, 5)] == [LOCKER]
    assert [h.item.text for h in hybrid_search(bank, "lemons", SECOND, MEMORYCPT_SEMANTIC, 5)][0] == LEMONS
    assert bank.search_bm25("lemons", FIRST, kind="fact") == []
    assert bank.is_done(FIRST, "s1") and not bank.is_done(SECOND, "s1")
    assert bank.delete_all(SECOND) == 1
    assert [it.text for it in bank.items(FIRST, "fact")] == [LOCKER]
    bank.close()


def test_a_bank_reads_exactly_the_scopes_a_search_scope_covers(tmp_path, minilm, monkeypatch):
    """The bank selects a search scope's rows in SQL (the key, a range of the user's keys, or
    json_extract of the other ids): for every search scope the items are those Scope.matches
    admits, with user ids that share a prefix, hold a quote or a comma, or are not ASCII; the
    loaded scopes are kept least recently read first out, at most CACHED_SCOPES."""
    from memfrontier.store import bank as bank_module

    users = ["ana", "ana2", "an", 'ana"', "ana,", "\u00e9", "\u00e9\u00e9", "x|y"]
    scopes = [Scope(user_id=u) for u in users]
    scopes += [Scope(user_id="ana", agent_id="bot"), Scope(user_id="ana", agent_id="bot", run_id="r1")]
    scopes += [Scope(user_id="ana2", run_id="r1"), Scope(agent_id="bot"), Scope(run_id="r1")]
    bank = MemoryBank(tmp_path / "bank.db", minilm)
    bank.apply([BankItem(id=f"f{i}", kind="fact", scope=sc, text=f"fact {i}") for i, sc in enumerate(scopes)])
    searches = [*scopes, Scope(), Scope(agent_id="bot", run_id="r1"), Scope(user_id="nobody")]
    for search in searches:
        want = sorted(f"f{i}" for i, sc in enumerate(scopes) if search.matches(sc))
        assert sorted(it.id for it in bank.items(search, "fact")) == want, search
    assert [it.id for it in bank.items(Scope(user_id="ana"), "fact")] == ["f0", "f8", "f9"]
    monkeypatch.setattr(bank_module, "CACHED_SCOPES", 3)
    bank._cache.clear()
    for search in searches:
        assert len(bank.items(search, "fact")) == sum(search.matches(sc) for sc in scopes)
        assert len(bank._cache) <= 3
    assert [k[0] for k in bank._cache] == [sc.key() for sc in searches[-3:]]  # the three read last
    bank.close()


def test_graph_folders_keep_colliding_scopes_apart(tmp_path):
    notes = {
        FIRST: Note(LOCKER, ["Ann"], "codes", "2023-07-01T09:00:00", "s1", ["r1"]),
        SECOND: Note(LEMONS, ["Ann"], "shopping", "2023-07-01T09:00:00", "s1", ["r2"]),
    }
    assert state_dir(tmp_path, FIRST) != state_dir(tmp_path, SECOND)
    assert not graph_exists("ladybug", tmp_path, FIRST)
    for scope, note in notes.items():
        g = open_graph("ladybug", tmp_path, scope)
        g.replace(graph_from_notes([note], scope.key()))
        g.close()
    assert graph_exists("ladybug", tmp_path, FIRST) and graph_exists("ladybug", tmp_path, SECOND)
    for scope, text in ((FIRST, LOCKER), (SECOND, LEMONS)):
        g = open_graph("ladybug", tmp_path, scope, read_only=True)
        assert g.query("MATCH (m:Memory) RETURN m.text").rows == [[text]]
        g.close()


def _downgrade_to_v1(path):
    """Rewrite a store directory the way schema version 1 left it: ``|``-joined scope keys, no
    ``scope_gen`` table, a ``bm25/`` folder and graph folders named by the hash of the old key."""
    db = sqlite3.connect(str(path / "store.db"))
    for seq, u, a, r in db.execute("SELECT seq, user_id, agent_id, run_id FROM records").fetchall():
        db.execute("UPDATE records SET scope_key = ? WHERE seq = ?", ("|".join(v or "" for v in (u, a, r)), seq))
    db.execute("UPDATE chunks SET scope_key = 'stale'")  # version 1's chunks are rebuilt, whatever their keys
    db.execute("DROP TABLE scope_gen")
    db.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    (path / "bm25" / "g3").mkdir(parents=True)
    for old in ("x|y||", "solo||"):
        folder = path / "graph" / hashlib.sha256(old.encode()).hexdigest()[:16]
        folder.mkdir(parents=True)
        (folder / "graph.lbug").write_text(old)


class Counting:
    def __init__(self, inner):
        self.inner, self.model_id, self.dim, self.texts = inner, inner.model_id, inner.dim, 0

    def encode(self, texts):
        self.texts += len(texts)
        return self.inner.encode(texts)

    def count_tokens(self, text):
        return self.inner.count_tokens(text)


def test_version_1_store_is_migrated_on_open(tmp_path, minilm):
    path = tmp_path / "old"
    s = SQLiteStore(path, minilm)
    s.add(
        [
            Record(id="r1", scope=FIRST, text=LOCKER),
            Record(id="r2", scope=SECOND, text=LEMONS),
            Record(id="r3", scope=Scope(user_id="solo"), text="I play the cello on Sundays."),
        ]
    )
    s.close()
    _downgrade_to_v1(path)

    emb = Counting(minilm)
    s = SQLiteStore(path, emb)
    # every record was embedded before (the store taken back to version 1 kept its record vectors):
    # nothing is encoded, the rebuilt chunks' vectors are derived from them
    assert emb.texts == 0
    db = sqlite3.connect(str(path / "store.db"))
    assert db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0] == "3"
    assert db.execute("SELECT count(*) FROM record_vectors").fetchone()[0] == 3
    assert sorted(r[0] for r in db.execute("SELECT DISTINCT scope_key FROM chunks")) == sorted(
        sc.key() for sc in (FIRST, SECOND, Scope(user_id="solo"))
    )
    db.close()
    assert all(LEMONS not in h.chunk.text for h in hybrid_search(s, "lemons", FIRST, HYBRID_RRF, 5))
    assert [h.chunk.text for h in hybrid_search(s, "lemons", SECOND, BM25_ONLY, 5)] == [LEMONS]
    assert not (path / "bm25").exists()
    graphs = sorted(p.name for p in (path / "graph").iterdir())
    assert graphs == [Scope(user_id="solo").slug()]  # renamed; the folder "x|y||" named two scopes: removed
    s.close()
    SQLiteStore(path, minilm).close()  # a migrated store opens as is


def test_old_bank_is_rekeyed_on_open(tmp_path, minilm):
    p = tmp_path / "bank.db"
    bank = MemoryBank(p, minilm)
    solo = Scope(user_id="solo", run_id="r")
    bank.apply(
        [BankItem(id="f1", kind="fact", scope=solo, text="Solo plays the cello.")], done=[(solo, "s1", {})], traces=[]
    )
    bank.close()
    db = sqlite3.connect(str(p))
    db.execute("UPDATE items SET scope_key = 'solo||r'")
    db.execute("UPDATE done SET scope_key = 'solo||r'")
    db.execute("INSERT INTO done VALUES ('a|b|c|', 'u9', 0, '{}')")  # ids with '|': ambiguous, dropped
    db.execute("DELETE FROM meta WHERE key = 'scope_keys'")
    db.commit()
    db.close()
    bank = MemoryBank(p, minilm)
    assert bank.is_done(solo, "s1")
    assert [it.id for it in bank.items(solo, "fact")] == ["f1"]
    assert bank.delete_all(solo) == 1
    db = sqlite3.connect(str(p))
    assert db.execute("SELECT COUNT(*) FROM done").fetchone()[0] == 0
    db.close()
    bank.close()
