import numpy as np
import pytest

from memfrontier.embed import query as q


class CountingEmbedder:
    """Deterministic 3-d vectors (length, vowels, 1); counts the texts it encoded."""

    def __init__(self):
        self.texts = []

    def encode(self, texts):
        self.texts += texts
        return np.array([[len(t), sum(c in "aeiou" for c in t), 1.0] for t in texts])


def test_a_query_is_encoded_once_per_embedder_and_the_vector_is_read_only():
    emb, other = CountingEmbedder(), CountingEmbedder()
    v = q.encode_query(emb, "where is ana")
    assert v.dtype == np.float32 and v.tolist() == [12.0, 5.0, 1.0]
    assert q.encode_query(emb, "where is ana") is v and emb.texts == ["where is ana"]
    assert q.encode_query(other, "where is ana").tolist() == [12.0, 5.0, 1.0] and other.texts == ["where is ana"]
    with pytest.raises(ValueError):
        v[0] = 0.0


def test_the_cache_keeps_the_last_queries_only(monkeypatch):
    monkeypatch.setattr(q, "CACHE_SIZE", 2)
    emb = CountingEmbedder()
    for text in ("a", "b", "a", "c", "b"):  # "a" refreshed, so "b" is the one dropped when "c" comes
        q.encode_query(emb, text)
    assert emb.texts == ["a", "b", "c", "b"]
