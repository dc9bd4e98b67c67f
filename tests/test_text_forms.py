"""One reading of JSONL lines (split on "\\n" only) and one Unicode normalization (NFC) for stored
text and queries, on both stores and through rg."""

from __future__ import annotations

import json
import unicodedata

import pytest
from fakes import ScriptedClient
from typer.testing import CliRunner

from memfrontier import Memory
from memfrontier.cli import app
from memfrontier.core.jsonio import jsonl_lines
from memfrontier.core.types import Record, Scope
from memfrontier.eval.runner import _read_done
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies.automem.corpus import ScopedCorpus
from memfrontier.strategies.automem.tools.rg import rg

# line breaks for str.splitlines(), but legal unescaped inside a JSON string
SEPARATORS = "\u2028\u2029\u0085\x1c\x1d\x1e\x0b\x0c"
NFD, NFC = unicodedata.normalize("NFD", "Zoë visited Málaga café"), "Zoë visited Málaga café"
assert NFD != NFC


def test_jsonl_lines_split_on_newline_only():
    text = json.dumps({"a": f"x{SEPARATORS}y"}, ensure_ascii=False) + "\r\n{}\n\n"
    assert jsonl_lines(text) == [json.dumps({"a": f"x{SEPARATORS}y"}, ensure_ascii=False), "{}", ""]
    assert jsonl_lines("") == [] and jsonl_lines("a") == ["a"]


def test_ingest_file_reads_lines_whose_strings_hold_unicode_separators(tmp_path, minilm):
    f = tmp_path / "msgs.jsonl"
    rows = [
        {"content": f"line one{SEPARATORS}still one", "session_id": "a"},
        {"content": "line two", "session_id": "a"},
    ]
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    store = tmp_path / "store"
    res = CliRunner().invoke(app, ["ingest", "--store", str(store), "--file", str(f), "--user-id", "u"])
    assert res.exit_code == 0, res.output
    s = SQLiteStore(store, minilm)
    assert sorted(r.text for r in s.records(Scope(user_id="u"))) == sorted(r["content"] for r in rows)
    s.close()


def test_an_eval_resume_keeps_a_prediction_holding_a_separator(tmp_path):
    p = tmp_path / "predictions.jsonl"
    rows = [{"id": "q1", "prediction": f"a{SEPARATORS}b"}, {"id": "q2", "prediction": "c"}]
    p.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows) + '{"id": "torn', "utf-8")
    assert _read_done(p) == {"q1": rows[0], "q2": rows[1]}
    assert [json.loads(line) for line in jsonl_lines(p.read_text("utf-8"))] == rows


def _stores(tmp_path, minilm, pg_database):
    from memfrontier.store.postgres import PostgresStore

    yield "sqlite", SQLiteStore(tmp_path / "s", minilm)
    yield "postgres", PostgresStore(pg_database(), minilm, directory=tmp_path / "p")


@pytest.mark.parametrize("stored, query", [(NFD, NFC), (NFC, NFD)], ids=["nfd-stored", "nfc-stored"])
def test_one_normal_form_for_stored_text_and_queries_on_both_stores(tmp_path, minilm, pg_database, stored, query):
    for name, store in _stores(tmp_path, minilm, pg_database):
        store.add(
            [
                Record(id="z", scope=Scope(user_id="u"), text=stored),
                Record(id="o", scope=Scope(user_id="u"), session_id="other", text="an unrelated note about trains"),
            ]
        )
        assert store.get(["z"], Scope(user_id="u"))[0].text == NFC, name
        mem = Memory(_async_memory(store))
        hits = mem.search(query.split()[-1], user_id="u", k=2)  # "café": only BM25 can tell it exactly
        assert hits[0].chunk.record_ids == ["z"] and "bm25" in hits[0].ranks, name
        assert rg(ScopedCorpus(store, Scope(user_id="u")), [query.split()[2]]).ok, name
        assert NFC in rg(ScopedCorpus(store, Scope(user_id="u")), [query]).text, name
        mem.close()


def _async_memory(store):
    from memfrontier.api import AsyncMemory
    from memfrontier.core.pricebook import PriceBook
    from memfrontier.llm.metered import MeteredLLM

    llm = MeteredLLM(
        ScriptedClient(lambda m: "ok", model_id="gemma-3-270m-q4_k_m"), PriceBook.load(), allow_unpriced=True
    )
    return AsyncMemory(store, llm, llm)
