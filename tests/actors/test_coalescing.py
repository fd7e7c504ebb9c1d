"""Callers that arrive together share one call: embedding batches and curator commits."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import eidetica
from eidetica.actors import MemoryConfig
from eidetica.events.streams import facts_stream
from eidetica.providers import HashEmbedder
from eidetica.providers._base import Coalescer


class CountingCondition(threading.Condition):
    """A Condition that reports how many threads wait on it (so a test knows callers queued)."""

    def __init__(self, lock: threading.Lock, want: int) -> None:
        super().__init__(lock)
        self.waiting = 0
        self.want = want
        self.reached = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.waiting += 1
        if self.waiting >= self.want:
            self.reached.set()
        return super().wait(timeout)


def queue_behind_a_blocked_call(c: Coalescer, gate: threading.Event, calls: list, n: int = 8) -> list[threading.Thread]:
    """Start n callers: the first blocks inside fn until n - 1 others wait behind it, then all finish."""
    cond = c._cond = CountingCondition(threading.Lock(), n - 1)
    threads = []
    first = threading.Thread(target=calls[0])
    first.start()
    assert gate.wait(30), "the first call never started"
    for fn in calls[1:]:
        t = threading.Thread(target=fn)
        t.start()
        threads.append(t)
    assert cond.reached.wait(30), "the other callers never queued"
    return [first, *threads]


def test_callers_arriving_during_a_call_share_the_next_one() -> None:
    started, release = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def fn(items: list[int]) -> list[int]:
        seen.append(list(items))
        if len(seen) == 1:
            started.set()
            assert release.wait(30)
        return [x * 10 for x in items]

    c = Coalescer(fn)
    results: dict[int, list[int]] = {}
    calls = [lambda i=i: results.__setitem__(i, c([i, i + 100])) for i in range(8)]
    threads = queue_behind_a_blocked_call(c, started, calls)
    release.set()
    for t in threads:
        t.join(30)
    assert results == {i: [i * 10, (i + 100) * 10] for i in range(8)}
    assert len(seen) == 2 and len(seen[1]) == 14  # the lone first call, then the seven that queued, together
    assert c.calls == 2 and c.items == 16


def test_an_error_reaches_every_caller_of_its_batch_only() -> None:
    c = Coalescer(lambda items: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        c([1])
    c.fn = lambda items: items
    assert c([1, 2]) == [1, 2]


def test_with_then_the_next_batch_runs_fn_while_this_one_runs_then() -> None:
    in_then, second_fn = threading.Event(), threading.Event()
    order: list[tuple[str, list[int]]] = []

    def fn(items: list[int]) -> list[int]:
        order.append(("fn", list(items)))
        if items == [1]:
            second_fn.set()
        return items

    def then(items: list[int], prepared: list[int]) -> list[int]:
        if items == [0]:
            # the first batch's second stage (a commit) waits for the next batch's first stage
            in_then.set()
            assert second_fn.wait(30), "the next batch could not start while this one committed"
        order.append(("then", list(items)))
        return [x * 10 for x in prepared]

    c = Coalescer(fn, then=then)
    results: dict[int, list[int]] = {}
    first = threading.Thread(target=lambda: results.__setitem__(0, c([0])))
    first.start()
    assert in_then.wait(30)
    second = threading.Thread(target=lambda: results.__setitem__(1, c([1])))
    second.start()
    first.join(30)
    second.join(30)
    assert results == {0: [0], 1: [10]}
    assert order == [("fn", [0]), ("fn", [1]), ("then", [0]), ("then", [1])]  # stages overlap, commits in order
    assert c.calls == 2


def test_an_error_in_then_reaches_its_batch_and_the_next_batch_still_runs() -> None:
    c = Coalescer(lambda items: items, then=lambda items, prepared: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        c([1])
    c.then = lambda items, prepared: [x + 1 for x in prepared]
    assert c([1, 2]) == [2, 3]


class GatedEmbedder(HashEmbedder):
    """HashEmbedder whose first model call waits for the test (so other callers queue behind it)."""

    def __init__(self) -> None:
        super().__init__(dim=32)
        self.started, self.release = threading.Event(), threading.Event()
        self.batches: list[int] = []

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        self.batches.append(len(texts))
        if len(self.batches) == 1 and not self.release.is_set():
            self.started.set()
            assert self.release.wait(30)
        return super()._embed_uncached(texts)


def test_concurrent_remember_calls_share_one_model_call_and_one_commit(tmp_path) -> None:
    emb = GatedEmbedder()
    with eidetica.open(tmp_path / "s", embedder=emb, config=MemoryConfig(auto_extract=False)) as m:
        cur = m.runtime.curator("default", "u")
        stream = facts_stream("default", "u")
        ids: dict[int, str] = {}
        texts = ["Ada keeps bees", "Bob sails on Sundays", "the cat is called Miso", "flight lands at ten",
                 "allergic to walnuts", "plays the cello badly", "moved to Porto in May", "prefers green tea"]
        calls = [lambda i=i: ids.__setitem__(i, m.remember(texts[i], user="u")) for i in range(8)]
        threads = queue_behind_a_blocked_call(cur._remembers, emb.started, calls)
        emb.release.set()
        for t in threads:
            t.join(30)
        assert len(set(ids.values())) == 8
        assert emb.batches == [1, 7]  # one model call for the seven callers that arrived together
        p = m.log.partition_of(stream)
        commits = sum(1 for b in m.log.read_batches(partition=p) if stream in b.column("stream").to_pylist())
        assert commits == 2
        assert {h.id for h in m.list_memories(user="u", limit=20)} == set(ids.values())
