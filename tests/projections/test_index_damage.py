"""Only a damaged index (``CorruptIndex``) is rebuilt from the log; a plain bug propagates and rebuilds nothing."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

import eidetica
from eidetica.errors import CorruptIndex
from eidetica.projections import ChunkIndex
from eidetica.providers import HashEmbedder


def open_store(path):
    return eidetica.open(path, embedder=HashEmbedder(dim=64))


def _fill(path) -> list[tuple[str, float]]:
    with open_store(path) as m:
        for i in range(12):
            m.remember(f"fact number {i} about gardening", user="u")
        return [(h.id, h.score) for h in m.recall("gardening", user="u", top_k=5)]


class _BuggyTable:
    """A stand-in whose query raises what a programming error raises, not what damage raises."""

    def search(self, *a, **k):
        raise TypeError("a plain bug")

    count_rows = search  # a query's first call may be a count (an in-memory scope's size)


def test_a_bug_during_a_query_propagates_and_does_not_rebuild(tmp_path, monkeypatch) -> None:
    path = tmp_path / "store"
    _fill(path)
    with open_store(path) as m:
        index = m.index
        monkeypatch.setattr(index._lance, "table", _BuggyTable())
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a rebuild warns: make it fail loudly
            with pytest.raises(TypeError, match="a plain bug"):
                m.recall("gardening", user="u")
        assert m.index is index  # the same index object: no rebuild swapped a new one in
        monkeypatch.undo()


def test_a_bug_while_catching_up_at_open_propagates_and_keeps_the_index(tmp_path, monkeypatch) -> None:
    path = tmp_path / "store"
    _fill(path)
    with open_store(path) as m:
        m.remember("one more fact, applied at the next open", user="u")
        checkpoint = (m.views.index_dir / "checkpoint.json").read_bytes()
        index_dir = m.views.index_dir
        m.projector.catch_up = lambda: 0  # leave the last fact for the next open to apply
    assert (index_dir / "checkpoint.json").read_bytes() == checkpoint

    def buggy_fold(self, *a, **k):
        raise TypeError("a plain bug in a fold")

    monkeypatch.setattr(ChunkIndex, "_fold", buggy_fold)
    with pytest.raises(TypeError, match="a plain bug in a fold"):
        open_store(path)
    # not thrown away and rebuilt: the index still holds what it held
    assert (index_dir / "checkpoint.json").read_bytes() == checkpoint


def test_damaged_files_raise_corrupt_index_and_the_store_rebuilds_them(tmp_path) -> None:
    path = tmp_path / "store"
    before = _fill(path)
    with open_store(path) as m:
        index_dir = m.views.index_dir
    for f in [f for f in (index_dir / "lance").rglob("*.lance") if f.is_file()]:
        f.write_bytes(b"\0" * 64)  # every data file overwritten
    with pytest.raises(CorruptIndex) as info:
        # the vector side reads LanceDB's data files (opening no longer scans them: keys load on first write)
        ChunkIndex(index_dir, dim=64).search(tenant="default", text="gardening", vector=np.ones(64, np.float32),
                                             top_k=5, mode="hybrid")
    assert "lance" in info.value.path
    # opening does not read LanceDB's data files, so the damage shows at the first query, which rebuilds
    with open_store(path) as m:
        with pytest.warns(UserWarning, match="rebuilding it from the log"):
            got = [(h.id, h.score) for h in m.recall("gardening", user="u", top_k=5)]
        assert got == before


def test_corrupt_index_pickles_with_its_fields() -> None:
    e = pickle.loads(pickle.dumps(CorruptIndex("/x/index", "RuntimeError: lance error")))
    assert (type(e), e.path, e.problem) == (CorruptIndex, "/x/index", "RuntimeError: lance error")
