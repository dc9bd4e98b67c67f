"""Concurrent encode calls share batches (group commit) and each gets its own rows back."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memfrontier.embed.coalesce import Coalescer


def _slow_run(log: list[list[str]], delay: float = 0.05):
    def run(texts: list[str]) -> np.ndarray:
        log.append(list(texts))
        time.sleep(delay)
        return np.array([[float(t.split("-")[0]), float(t.split("-")[1])] for t in texts], dtype=np.float32)

    return run


def test_a_lone_call_runs_at_once_and_gets_its_rows():
    log: list[list[str]] = []
    c = Coalescer(_slow_run(log, 0.0), lanes=2)
    out = c(["1-0", "1-1"])
    assert out.tolist() == [[1.0, 0.0], [1.0, 1.0]] and log == [["1-0", "1-1"]]
    assert c.stats == {"calls": 1, "batches": 1, "texts": 2}


def test_calls_that_wait_for_a_busy_lane_go_in_one_batch():
    log: list[list[str]] = []
    c = Coalescer(_slow_run(log, 0.3), lanes=1)  # the others arrive well within the first batch
    first_started = threading.Event()

    def call(i: int) -> np.ndarray:
        if i > 0:
            first_started.wait()
            time.sleep(0.01)  # the first batch is running: these wait for the lane
        else:
            first_started.set()
        return c([f"{i}-{j}" for j in range(i % 3 + 1)])

    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(call, range(8)))
    for i, out in enumerate(outs):  # every call its own rows, in its order
        assert out.tolist() == [[float(i), float(j)] for j in range(i % 3 + 1)]
    assert c.stats["calls"] == 8 and c.stats["texts"] == sum(i % 3 + 1 for i in range(8))
    assert len(log) == c.stats["batches"] == 2  # the first call alone, then the seven that waited
    assert sorted(log[1]) == sorted(f"{i}-{j}" for i in range(1, 8) for j in range(i % 3 + 1))


def test_many_threads_on_two_lanes_each_get_their_own_rows():
    """Calls taken into a batch wait off the queue while a lane is free (the case of a service's
    CPU pool larger than its cores)."""
    log: list[list[str]] = []
    c = Coalescer(_slow_run(log, 0.002), lanes=2)

    def call(i: int) -> bool:
        for n in range(20):
            if c([f"{i}-{n}", f"{i}-{n + 1}"]).tolist() != [[float(i), float(n)], [float(i), float(n + 1)]]:
                return False
        return True

    with ThreadPoolExecutor(12) as pool:
        assert all(pool.map(call, range(12)))
    assert c.stats["calls"] == 240 and c.stats["texts"] == 480
    assert c.stats["batches"] < 240  # calls that waited went together


def test_max_texts_bounds_a_batch_of_waiting_calls_but_not_one_large_call():
    log: list[list[str]] = []
    c = Coalescer(_slow_run(log), lanes=1, max_texts=4)
    assert len(c([f"0-{j}" for j in range(10)])) == 10  # one call larger than max_texts runs whole
    gate = threading.Event()

    def call(i: int):
        if i:
            gate.wait()
            time.sleep(0.01)
        else:
            gate.set()
        return c([f"{i}-0", f"{i}-1", f"{i}-2"])

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(call, range(4)))
    assert all(len(b) <= 4 for b in log[1:])  # three-text calls: one per batch


def test_an_error_reaches_every_call_of_its_batch_and_the_next_batch_runs():
    calls = {"n": 0}
    gate = threading.Event()

    def run(texts):
        calls["n"] += 1
        if calls["n"] == 1:
            gate.wait(2)
            time.sleep(0.3)
            return np.zeros((len(texts), 1), np.float32)
        if calls["n"] == 2:
            raise RuntimeError("encoder failed")
        return np.ones((len(texts), 1), np.float32)

    c = Coalescer(run, lanes=1)

    def call(i):
        if i:
            time.sleep(0.01)
            gate.set()
        try:
            return c([str(i)]).tolist()
        except RuntimeError as e:
            return str(e)

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(call, range(4)))
    assert outs[0] == [[0.0]] and outs[1:] == ["encoder failed"] * 3
    assert c([str(9)]).tolist() == [[1.0]]  # the lane was freed


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="lanes and max_texts must be positive"):
        Coalescer(lambda t: t, lanes=0)


@pytest.mark.data
def test_the_real_encoder_gives_each_thread_the_vectors_it_would_get_alone():
    from memfrontier.embed.minilm import MiniLMEmbedder

    e = MiniLMEmbedder(backend="onnx")
    texts = [f"Note {i}: we met at the {w} on day {i}" for i, w in enumerate(["harbour", "museum", "tram"] * 12)]
    alone = e._onnx_encoder().encode_batch([t.strip() for t in texts])
    with ThreadPoolExecutor(12) as pool:
        outs = list(pool.map(lambda i: e.encode(texts[i : i + 3]), range(0, len(texts), 3)))
    together = np.concatenate(outs)
    assert together.shape == alone.shape and float(np.abs(together - alone).max()) < 1e-5
