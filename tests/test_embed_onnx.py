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


@pytest.mark.data
def test_int8_vectors_are_named_apart_and_rank_like_float32(tmp_path, monkeypatch, pair):
    """The int8 graph: quantized from the verified float32 graph, kept with a manifest naming its
    source, its vectors near float32's (cosine, top-10 over a small store) under another model id."""
    import shutil

    _, f32 = pair
    model = onnx_minilm.Path(f32.model_path)
    # a cache of its own holding the verified float32 graph (copied with its mtime: no re-export)
    verified = onnx_minilm.exported_model(model, lambda: _load_model(str(model), "cpu"))
    mine = onnx_minilm._export_dir(model, tmp_path)
    mine.mkdir(parents=True)
    for name in ("model.onnx", "model.onnx.json"):
        shutil.copy2(verified.with_name(name), mine / name)
    monkeypatch.setenv("MEMFRONTIER_EMBED_CACHE", str(tmp_path))
    onnx_minilm._ENCODERS.clear()
    try:
        q8 = MiniLMEmbedder(precision="int8")
        assert q8.model_id == "sentence-transformers/all-MiniLM-L6-v2+int8" != f32.model_id
        texts = _real_texts()
        a, b = f32.encode(texts), q8.encode(texts)
        assert q8.active_backend == "onnx" and b.shape == a.shape and b.dtype == np.float32
        cos = (a * b).sum(axis=1)
        assert cos.mean() > 0.985 and cos.min() > 0.95  # measured: 0.992 / 0.98 on LoCoMo turns
        assert float(np.abs(a - b).max()) > 1e-3  # not float32's vectors: hence the other id
        queries = texts[200:230]
        top_a = np.argsort(-(f32.encode(queries) @ a[:200].T), axis=1)[:, :10]
        top_b = np.argsort(-(q8.encode(queries) @ b[:200].T), axis=1)[:, :10]
        overlap = np.mean([len(set(x) & set(y)) / 10 for x, y in zip(top_a, top_b)])
        assert overlap >= 0.8
        # one text per run: a text's int8 vector does not depend on what it is encoded with
        from concurrent.futures import ThreadPoolExecutor

        alone = np.concatenate([q8.encode([t]) for t in texts[:24]])
        assert float(np.abs(q8.encode(texts[:24]) - alone).max()) == 0.0
        with ThreadPoolExecutor(8) as pool:
            together = np.concatenate(list(pool.map(lambda i: q8.encode(texts[i : i + 3]), range(0, 24, 3))))
        assert float(np.abs(together - alone).max()) == 0.0
        # the quantized file is checked against its manifest and its source graph's sha256
        graph = onnx_minilm.quantized_model(model, None)
        source = graph.with_name("model.onnx")
        assert onnx_minilm._int8_verified(graph, source)
        manifest = json.loads(graph.with_name("model.int8.onnx.json").read_text())
        assert manifest["source_sha256"] == json.loads(source.with_name("model.onnx.json").read_text())["sha256"]
        assert manifest["min_probe_cosine"] >= onnx_minilm.INT8_MIN_COSINE
        manifest["source_sha256"] = "0" * 64  # a re-exported float32 graph: quantized again
        graph.with_name("model.int8.onnx.json").write_text(json.dumps(manifest))
        assert not onnx_minilm._int8_verified(graph, source)
        assert onnx_minilm.quantized_model(model, None) == graph and onnx_minilm._int8_verified(graph, source)
    finally:
        onnx_minilm._ENCODERS.clear()


def test_precision_choice(monkeypatch):
    from memfrontier.embed.minilm import embed_precision

    monkeypatch.delenv("MEMFRONTIER_EMBED_PRECISION", raising=False)
    assert embed_precision() == "float32" and embed_precision("INT8") == "int8"
    assert MiniLMEmbedder().model_id == "sentence-transformers/all-MiniLM-L6-v2"
    monkeypatch.setenv("MEMFRONTIER_EMBED_PRECISION", "int8")
    e = MiniLMEmbedder()
    assert (e.precision, e.backend) == ("int8", "onnx")  # auto does not fall back to torch with int8
    with pytest.raises(ValueError, match="int8 runs on ONNX Runtime on CPU only"):
        MiniLMEmbedder(backend="torch")
    monkeypatch.setenv("MEMFRONTIER_EMBED_PRECISION", "fp4")
    with pytest.raises(ValueError, match="MEMFRONTIER_EMBED_PRECISION must be one of float32, int8"):
        MiniLMEmbedder()
