"""One encoder per process, shared by every thread that encodes: concurrent calls go in one batch.

A short text costs an encoder call about as much in fixed overhead (tokenizing, the graph's
launch, small matrix products that use a fraction of the core) as in arithmetic: on the 2-core
development box a 3-word query took ~1.5 ms alone and ~0.5 ms per text in a batch of eight (int8;
float32 ~8 ms and ~1.7 ms). A service's workers, ``eval --concurrency`` and a bank's ingest call
the encoder from several threads at once, each with one or a few texts.

:class:`Coalescer` merges them the way a database merges commits (group commit): at most
``lanes`` batches run at once (one per core: each batch runs one intra-op thread); a call that
arrives while every lane is busy waits, and when a lane frees, the oldest waiting call takes every
call that waited behind it (up to ``max_texts`` texts) into one batch, which the encoder sorts by
length and pads per bucket. No call waits for a timer: alone, a call runs at once (no added
latency); under load, the wait is bounded by the batch ahead of it, and it is what batches.
Results are split back per call; an error in a batch is raised in every call it held.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import numpy as np


class _Call:
    __slots__ = ("texts", "out", "error", "done")

    def __init__(self, texts: list[str]):
        self.texts = texts
        self.out: np.ndarray | None = None
        self.error: BaseException | None = None
        self.done = False


class Coalescer:
    """``coalescer(texts)`` -> ``run(all texts of the batch)`` split back to this call's rows.

    ``run``: list[str] -> array (n, dim), thread-safe (an ONNX Runtime session is). ``lanes``:
    batches run at once (>= 1). ``max_texts``: the most texts one batch takes from waiting calls (a
    single larger call still runs whole). ``stats``: ``calls``, ``batches``, ``texts`` so far."""

    def __init__(self, run: Callable[[list[str]], np.ndarray], lanes: int, max_texts: int = 256):
        if lanes < 1 or max_texts < 1:
            raise ValueError(f"lanes and max_texts must be positive, got {lanes}, {max_texts}")
        self._run, self.lanes, self.max_texts = run, int(lanes), int(max_texts)
        self._cv = threading.Condition()
        self._waiting: deque[_Call] = deque()
        self._running = 0
        self.stats = {"calls": 0, "batches": 0, "texts": 0}

    def __call__(self, texts: list[str]) -> np.ndarray:
        me = _Call(list(texts))
        with self._cv:
            self._waiting.append(me)
            self.stats["calls"] += 1
            while not me.done and not (self._running < self.lanes and self._waiting and self._waiting[0] is me):
                self._cv.wait()  # (taken into a batch, a call waits off the queue until that batch is done)
            if me.done:
                return self._result(me)
            batch, n = [], 0
            while self._waiting and (not batch or n + len(self._waiting[0].texts) <= self.max_texts):
                call = self._waiting.popleft()
                batch.append(call)
                n += len(call.texts)
            self._running += 1
            self.stats["batches"] += 1
            self.stats["texts"] += n
            self._cv.notify_all()  # the next waiting call may lead a batch in a free lane
        try:
            out = self._run([t for call in batch for t in call.texts])
            start = 0
            for call in batch:
                call.out = out[start : start + len(call.texts)]
                start += len(call.texts)
        except BaseException as e:  # every call of the batch sees the error
            for call in batch:
                call.error = e
        finally:
            with self._cv:
                self._running -= 1
                for call in batch:
                    call.done = True
                self._cv.notify_all()
        return self._result(me)

    @staticmethod
    def _result(call: _Call) -> np.ndarray:
        if call.error is not None:
            raise call.error
        return call.out


__all__ = ["Coalescer"]
