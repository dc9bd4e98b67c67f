"""MemPilot's dual-view memory: the offline compressor's contract and the compressed bank
(real SQLite store, real MiniLM)."""

from __future__ import annotations

import json

import pytest

from memfrontier.core.errors import StoreError
from memfrontier.core.types import ImageRef, Record, Scope
from memfrontier.embed.minilm import MiniLMEmbedder
from memfrontier.retrieve.hybrid import hybrid_search
from memfrontier.store.bank import MemoryBank
from memfrontier.store.sqlite import SQLiteStore
from memfrontier.strategies.mempilot.compress import (
    PLACEHOLDER,
    OfflineCompressor,
    compressed_views,
    make_compressor,
)
from memfrontier.strategies.mempilot.compressed_bank import build_from_store, import_jsonl, open_bank
from memfrontier.strategies.mempilot.recipes import MEMPILOT_BANK
from memfrontier.strategies.mempilot.views import DualView


def test_offline_compressor_contract():
    c = OfflineCompressor(0.4)
    text = "Caroline: I went to the support group yesterday and it was so powerful. Did you go?\nMelanie: Yes! on 8 May 2023."
    out = c.compress(text)
    # 22 words -> ceil(0.4 * 22) = 9 kept; forced: "Caroline:", "go?", "Melanie:", "8", "2023." (digits, ':', '?');
    # then 4 by score (all idf ln 1.5 in a batch of one): capitalised "Yes!", "May" (+0.5; "I", "Did" are
    # stopwords), then the longest: "yesterday", "powerful." (9 letters, earlier first)
    assert out == "Caroline: yesterday powerful. go?\nMelanie: Yes! 8 May 2023."
    assert "\n" in out  # newlines are structure and survive
    assert len(out.split()) == 9
    assert c.compress("   ") == PLACEHOLDER and c.compress("the and of") == PLACEHOLDER
    assert c.compress("I") == PLACEHOLDER  # a stopword alone: nothing to keep, never empty
    # IDF over the batch: a word in every text scores lower than a rare one
    # idf: alpha, beta ln(1 + 2/3); the others ln 2. Budget 2 each; ties -> longer, then earlier
    assert c.compress_many(["alpha beta gamma delta epsilon", "alpha beta zeta"]) == ["gamma epsilon", "alpha zeta"]
    with pytest.raises(ValueError):
        OfflineCompressor(0)
    assert make_compressor("auto").name == "offline-idf-v1@0.4"  # llmlingua is not installed here
    with pytest.raises(RuntimeError):
        make_compressor("llmlingua2")


def test_compressed_views_keep_image_ids_and_compress_captions_separately():
    r = Record(
        id="c:D1:1",
        speaker="Ana",
        text="Look at the grey cat I adopted in March 2024 from the shelter downtown",
        images=[ImageRef(id="D1:IMG_001", caption="a small grey cat sleeping on a red blanket near a window")],
    )
    (view,) = compressed_views([[r]], OfflineCompressor(0.4))
    lines = view.split("\n")
    assert lines[0].startswith("Ana:") and "2024" in lines[0]
    assert lines[1] == "image_id: D1:IMG_001"
    assert lines[2].startswith("image_caption: ") and len(lines[2].split()) - 1 <= 5  # ceil(0.4 * 11) = 5 words
    img_only = Record(id="c:D1:2", text="", images=[ImageRef(id="D1:IMG_002", caption="")])
    assert compressed_views([[img_only]], OfflineCompressor())[0] == "image_id: D1:IMG_002"


@pytest.fixture(scope="module")
def embedder():
    return MiniLMEmbedder(num_threads=1)


def _records(user: str) -> list[Record]:
    s = Scope(user_id=user)
    texts = [
        "I adopted a grey cat named Miso from the shelter.",
        "My sister Lena bought a red dress for the gala.",
        "We hiked Mount Tam on Saturday and saw 3 deer.",
        "I started learning the cello last month.",
    ]
    return [
        Record(
            id=f"{user}:D1:{i}",
            scope=s,
            session_id=f"{user}:D1",
            speaker="Ana",
            timestamp="2024-05-01T10:00:00",
            text=t,
        )
        for i, t in enumerate(texts)
    ]


def test_bank_build_search_import(tmp_path, embedder):
    store = SQLiteStore(tmp_path / "store", embedder, chunk_tokens=16)  # small chunks: one record each
    store.add(_records("ana") + _records("bob"))
    bank = open_bank(store)
    assert bank.path == tmp_path / "store" / "banks" / "mempilot.db"
    ana = Scope(user_id="ana")
    res = build_from_store(bank, store, ana, OfflineCompressor())
    assert res == {"added": 4, "removed": 0, "kept": 0}
    assert build_from_store(bank, store, ana, OfflineCompressor()) == {
        "added": 0,
        "removed": 0,
        "kept": 4,
    }  # idempotent
    items = bank.items(ana, "compressed")
    assert all(it.text.startswith("date: 2024-05-01\nAna:") for it in items)
    assert {it.source_ids[0] for it in items} == {f"ana:D1:{i}" for i in range(4)}
    assert {it.meta["chunk_id"] for it in items} == {ch.id for ch in store.chunks(ana)}
    assert all(it.meta["source"] == "compress:offline-idf-v1@0.4" and it.meta["image_ids"] == [] for it in items)
    view = DualView(store, bank)
    top = hybrid_search(bank, "which pet did she adopt", ana, MEMPILOT_BANK, 2)
    assert top[0].item.source_ids == ["ana:D1:0"] and len(top) == 2
    assert top[0].score == pytest.approx(
        float(embedder.encode(["which pet did she adopt"])[0] @ embedder.encode([top[0].item.text])[0]), abs=1e-5
    )
    assert [it.id for it in view.retrieve("which pet did she adopt", ana, 2)] == [h.item.id for h in top]
    assert view.retrieve("cat", Scope(user_id="bob"), 3) == []  # bob's bank not built: scopes never mix
    assert view.retrieve("", ana, 3) == [] and view.retrieve("cat", ana, 0) == []
    # deleting a record takes the items built from it with it (the open bank sees the purge)
    store.delete("ana:D1:3", ana)
    assert all("ana:D1:3" not in it.source_ids for it in bank.items(ana, "compressed"))
    assert len(bank.items(ana, "compressed")) == 3  # one record per chunk: its item went with it
    assert build_from_store(bank, store, ana, OfflineCompressor()) == {"added": 0, "removed": 0, "kept": 3}
    # imports are a separate kind; a bad line writes nothing
    f = tmp_path / "amem.jsonl"
    f.write_text(
        json.dumps({"text": "Ana owns a cat called Miso", "user_id": "ana", "record_ids": ["ana:D1:0"]})
        + "\n"
        + json.dumps({"text": "Lena: red dress", "record_ids": ["ana:D1:1"]})
        + "\n"
    )
    assert import_jsonl(bank, f, Scope(user_id="ana")) == 2
    assert bank.count(ana, "imported") == 2 and bank.count(ana, "compressed") == 3
    assert import_jsonl(bank, f, Scope(user_id="ana")) == 2 and bank.count(ana, "imported") == 2  # replaced, not added
    assert DualView(store, bank, "imported").retrieve("cat", ana, 1)[0].text == "Ana owns a cat called Miso"
    f.write_text(json.dumps({"text": "x", "user_id": "ana"}) + "\n" + json.dumps({"text": ""}) + "\n")
    with pytest.raises(ValueError, match="amem.jsonl:2"):
        import_jsonl(bank, f)
    assert bank.count(ana, "imported") == 2
    with pytest.raises(FileNotFoundError, match="no bank file"):
        import_jsonl(bank, tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="unknown bank kind"):
        DualView(store, bank, "other")
    bank.close()
    # reopening keeps the items; another embedding model is refused
    again = MemoryBank(tmp_path / "store" / "banks" / "mempilot.db", embedder)
    assert again.count(ana, "compressed") == 3

    class Other:
        model_id, dim = "other-model", 384

    with pytest.raises(StoreError, match="other-model"):
        MemoryBank(tmp_path / "store" / "banks" / "mempilot.db", Other())
    store.close()
