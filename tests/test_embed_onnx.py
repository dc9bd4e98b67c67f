"""The ONNX Runtime embedder computes sentence-transformers' vectors (so stores need no migration),
its cached graph is sha256-checked, and its word-piece counts are the model tokenizer's."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memfrontier.embed import onnx_minilm
from memfrontier.embed.minilm import MiniLMEmbedder, _load_model, embed_backend
from memfrontier.eval.datasets import data_root


def _real_texts(n: int = 300) -> list[str]:
    samples = json.loads((data_root() / "locomo" / "locomo10.json").read_text("utf-8"))
    turns = [t["text"] for s in samples[:2] for v in s["conversation"].values() if isinstance(v, list) for t in v]
    long = [" ".join(turns[i : i + 30]) for i in range(0, 300, 30)]  # past 256 word pieces: truncated alike
    return turns[:n] + long + ["  spaces around  ", "ümlaut café naïve", "emoji 😀 and 中文", "?"]


@pytest.fixture(scope="module")
def pair():
    return MiniLMEmbedder(backend="torch"), MiniLMEmbedder(backend="onnx")


@pytest.mark.data
def test_onnx_vectors_and_top_k_match_sentence_transformers(pair):
    torch_e, onnx_e = pair
    texts = _real_texts()
    a, b = torch_e.encode(texts), onnx_e.encode(texts)
    assert onnx_e.active_backend == "onnx" and torch_e.active_backend == "torch"
    assert a.shape == b.shape == (len(texts), 384) and b.dtype == np.float32
    assert float(np.abs(a - b).max()) < 1e-5
    assert np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    # a small store: the first 200 turns; 20 questions ranked by each backend's vectors
    docs_a, docs_b = a[:200], b[:200]
    queries = [f"what did they say about {w}?" for w in ("painting", "school", "her kids", "a camping trip", "music")]
    queries += texts[200:215]
    qa, qb = torch_e.encode(queries), onnx_e.encode(queries)
    top_a = np.argsort(-(qa @ docs_a.T), axis=1, kind="stable")[:, :10]
    top_b = np.argsort(-(qb @ docs_b.T), axis=1, kind="stable")[:, :10]
    assert (top_a == top_b).all()


@pytest.mark.data
def test_token_counts_are_the_model_tokenizers(pair):
    from transformers import AutoTokenizer

    _, onnx_e = pair
    texts = _real_texts(120)
    ref = AutoTokenizer.from_pretrained(onnx_e.model_path, local_files_only=True)
    want = [len(ids) for ids in ref(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"]]
    assert onnx_e.count_tokens_batch(texts) == want
    assert onnx_e.count_tokens(texts[-10]) == want[-10] > 256  # counting does not truncate
    assert onnx_e.max_seq_length == 256 and onnx_e.encode([]).shape == (0, 384)


def test_the_cached_graph_is_sha256_checked_and_stale_sources_are_noticed(tmp_path, pair):
    import os

    torch_e, _ = pair
    model = onnx_minilm.Path(torch_e.model_path)
    path = onnx_minilm.exported_model(model, lambda: _load_model(str(model), "cpu"), cache=tmp_path)
    manifest_path = path.with_name("model.onnx.json")
    manifest = json.loads(manifest_path.read_text())
    data = path.read_bytes()
    assert manifest["parity_max_abs_diff"] < onnx_minilm.PARITY_ATOL and manifest["size_bytes"] == len(data)
    weights = onnx_minilm._weights(model)
    assert onnx_minilm._verified(path, weights)
    # the same bytes with another mtime (a copy, a touch): re-hashed, accepted and stamped again
    os.utime(path, ns=(1, 1))
    assert onnx_minilm._verified(path, weights)
    assert json.loads(manifest_path.read_text())["mtime_ns"] == 1
    # one byte changed (same size): the file no longer matches its sha256, so it is not used
    raw = bytearray(data)
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert not onnx_minilm._verified(path, weights)
    # the manifest names other source weights: stale
    path.write_bytes(data)
    manifest = json.loads(manifest_path.read_text())
    manifest["source"].update(size_bytes=1, sha256="0" * 64)
    manifest_path.write_text(json.dumps(manifest))
    assert not onnx_minilm._verified(path, weights)
    # a fresh call re-exports (no network: the packaged weights), and the encoder it feeds works
    path2 = onnx_minilm.exported_model(model, lambda: _load_model(str(model), "cpu"), cache=tmp_path)
    assert path2 == path and onnx_minilm._verified(path, weights)
    enc = onnx_minilm.OnnxEncoder(model, path2, threads=1)
    assert np.abs(enc.encode(["hello there"]) - torch_e.encode(["hello there"])).max() < 1e-5


def test_backend_choice(monkeypatch):
    monkeypatch.delenv("MEMFRONTIER_EMBED_BACKEND", raising=False)
    assert embed_backend() == "auto" and embed_backend("TORCH") == "torch"
    monkeypatch.setenv("MEMFRONTIER_EMBED_BACKEND", "onnx")
    assert embed_backend() == "onnx" and MiniLMEmbedder().backend == "onnx"
    monkeypatch.setenv("MEMFRONTIER_EMBED_BACKEND", "tensorflow")
    with pytest.raises(ValueError, match="MEMFRONTIER_EMBED_BACKEND must be one of auto, onnx, torch"):
        MiniLMEmbedder()


def test_pooling_follows_the_model_configs(pair):
    p = onnx_minilm.Pooling.read(onnx_minilm.Path(pair[1].model_path))
    assert (p.mode, p.normalize, p.max_seq_length, p.dim) == ("mean", True, 256, 384)
