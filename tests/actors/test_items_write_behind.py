"""Item vectors written behind their puts (actors.items.WriteBehind): batched, never stale, recovered after a crash."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import numpy as np

import eidetica
from eidetica.actors.items import ItemsActor, WriteBehind, item_id
from eidetica.events import ItemPut, NewEvent
from eidetica.events.streams import items_stream
from eidetica.providers import Embedder, HashEmbedder


class Gated(Embedder):
    """A real hash embedder that holds its worker at a gate and records every call's texts."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=64)
        self.model_id, self.dim = self.inner.model_id, self.inner.dim
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[list[str]] = []

    def embed(self, texts: Any) -> np.ndarray:
        """Wait at the gate (the test opens it), then embed."""
        texts = list(texts)
        self.entered.set()
        self.gate.wait()
        self.calls.append(texts)
        return self.inner.embed(texts)


def _ops(*items: tuple[str, Any, list[str] | None]) -> list[dict[str, Any]]:
    return [{"namespace": ("u", "m"), "key": k, "value": v, "texts": t, "user": "u", "ttl": None} for k, v, t in items]


def test_queued_puts_are_embedded_in_one_batch_and_superseded_ones_never_reach_the_model_or_log(tmp_path: Path) -> None:
    emb = Gated()
    with eidetica.open(tmp_path / "s", embedder=emb) as m:
        actor: ItemsActor = m.runtime.items(m.tenant, "u")
        assert isinstance(actor.behind, WriteBehind)
        actor.put_many([{"namespace": ["u", "m"], "key": "first", "value": {"t": "x"}, "texts": ["warm up"]}])
        assert emb.entered.wait(30)  # the worker holds "warm up" at the gate: the puts below queue up
        m.items.put(_ops(("a", {"t": "old apple"}, ["old apple", "second text of a"]), ("b", {"t": "bee"}, ["bee"]),
                         ("c", {"t": "cat"}, ["cat"])))
        m.items.put(_ops(("a", {"t": "new apple"}, ["new apple"]), ("d", {"t": "dog"}, ["dog"])))  # a again: old vectors stale
        m.items.put(_ops(("b", None, None)))  # deleted: its vectors are stale
        m.items.put(_ops(("c", {"t": "cat, unindexed"}, None)))  # put again with index=False
        emb.gate.set()
        hits = m.items.search(("u",), query="new apple", limit=10)  # waits for the queue
        # the queued puts went to the model as one batch, less those superseded before it ran
        assert emb.calls[:2] == [["warm up"], ["new apple", "dog"]]
        chunks = [e.decode() for e in m.log.read_stream(items_stream(m.tenant, "u")) if e.type == "ChunksEmbedded"]
        assert [(c.source_id, c.texts) for c in chunks] == [(item_id(["u", "m"], "first"), ["warm up"]),
                                                             (item_id(["u", "m"], "a"), ["new apple"]),
                                                             (item_id(["u", "m"], "d"), ["dog"])]
        assert hits[0][0].key == "a" and hits[0][1] is not None
        rows = {h.text for h in m.index.search(tenant=m.tenant, text="apple bee cat", mode="text", kinds=["item"])}
        assert rows == {"new apple"}  # none of a's old texts, nor b's or c's


def test_a_put_whose_vectors_a_crash_kept_from_the_log_is_embedded_on_the_next_open(tmp_path: Path) -> None:
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        m.items.put(_ops(("kept", {"t": "x"}, ["sails a catamaran"])))
        # what a crash between a put and its write-behind vectors leaves: the ItemPut alone
        iid = item_id(["u", "m"], "lost")
        m.log.append(items_stream(m.tenant, "u"), [NewEvent.of(ItemPut(
            item_id=iid, user_id="u", namespace=["u", "m"], key="lost", value={"t": "y"}, texts=["plays the bassoon"]),
            tenant=m.tenant)])
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:
        hits = m.items.search(("u",), query="bassoon", limit=1)
        assert [(it.key, score is not None) for it, score in hits] == [("lost", True)]
        texts = [e.decode().texts for e in m.log.read_stream(items_stream(m.tenant, "u")) if e.type == "ChunksEmbedded"]
        assert texts == [["sails a catamaran"], ["plays the bassoon"]]
    with eidetica.open(tmp_path / "s", embedder=HashEmbedder(dim=64)) as m:  # recovered once: nothing more to embed
        m.items.search(("u",), query="bassoon")
        assert sum(e.type == "ChunksEmbedded" for e in m.log.read_stream(items_stream(m.tenant, "u"))) == 2
