"""``VectorSlots``' bounded queries against a full scan: ``best_above`` (the curator's
nearest-fact check) and ``top`` (the exact scans' top-k), through adds, replacements and
removes, with the low-rank bound kept from a few rows on and refitted as the rows double."""

from __future__ import annotations

import numpy as np
import pytest

from eidetica.projections._vectors import VectorSlots

DIM = 24


class Rows:
    """Random rows near a 3-d subspace (sentence embeddings are skewed, which the bound relies on)."""

    def __init__(self, seed: int, unit: bool) -> None:
        self.rng = np.random.default_rng(seed)
        self.basis = self.rng.standard_normal((3, DIM))
        self.unit = unit  # the bound must hold for rows of any norm

    def draw(self) -> np.ndarray:
        v = (self.rng.standard_normal(3) @ self.basis + 0.3 * self.rng.standard_normal(DIM)).astype(np.float32)
        return v / np.linalg.norm(v) if self.unit else v


def churn(vs: VectorSlots, rows: Rows, live: dict[str, np.ndarray]) -> None:
    """One add (a key added again replaces its row: its bound must follow) or remove."""
    k = f"k{rows.rng.integers(0, 400)}"
    if rows.rng.random() < 0.8:
        live[k] = v = rows.draw()
        vs.put(k, v)
    else:
        vs.drop(k)
        live.pop(k, None)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_best_above_equals_a_full_scan(seed) -> None:
    # 1,500 adds, replacements and removes; the bound is kept from 8 rows on here (2,048 in
    # use) and refitted as the rows double; every answer must be the full scan's: the closest
    # row if it reaches the threshold, else none
    rows = Rows(seed, unit := seed % 2 == 0)
    rng, draw = rows.rng, rows.draw
    vs, live = VectorSlots(DIM, rank=4, bound_from=8), {}
    answered = 0
    for _ in range(1500):
        churn(vs, rows, live)
        q = draw() if rng.random() < 0.8 or not live else live[list(live)[int(rng.integers(0, len(live)))]]
        threshold = float(rng.uniform(-0.2, 0.95)) * (1.0 if unit else float(np.linalg.norm(q)) * 3)
        got, sim = vs.best_above(q, threshold)
        scores = {k: float(v @ q) for k, v in live.items()}
        best = max(scores, key=scores.__getitem__, default=None)
        if best is None or scores[best] < threshold - 1e-4:
            assert got is None
        elif scores[best] >= threshold + 1e-4:
            assert got is not None and scores[got] == pytest.approx(scores[best], rel=1e-5, abs=1e-5)
            assert sim == pytest.approx(scores[best], rel=1e-5, abs=1e-5)
            answered += 1
    assert answered > 100 and vs._basis is not None and vs._fitted_rows >= 256  # the bound was in use



@pytest.mark.parametrize("seed", range(4))
@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_top_equals_a_full_scan(seed) -> None:
    # the exact top-k among the rows a mask admits, through the bound (its bar, its slack, the
    # fallback to a scan when too many rows pass), must be the full scan's
    rows = Rows(seed, seed % 2 == 0)
    rng = rows.rng
    vs, live = VectorSlots(DIM, rank=4, bound_from=8), {}
    bounded = 0
    for _step in range(1200):
        churn(vs, rows, live)
        if not live:
            continue
        q = rows.draw()
        limit = int(rng.integers(1, 40))
        n = vs.used
        admit = None
        if rng.random() < 0.5:  # a filter: live rows of some keys
            admit = np.array([k is not None and int(k[1:]) % 3 != 0 for k in vs.keys], bool)
        elif vs.free:
            admit = np.array([k is not None for k in vs.keys], bool)
        got, sims = vs.top(q, limit, admit)
        want = {k: float(v @ q) for k, v in live.items() if admit is None or admit[vs.slot[k]]}
        best = sorted(want.values(), reverse=True)[:limit]
        assert len(got) == len(best) == len(sims)
        assert [vs.keys[i] for i in got] == [vs.keys[i] for i in got if vs.keys[i] in want]  # admitted rows only
        np.testing.assert_allclose(sorted(sims.tolist(), reverse=True), best, rtol=1e-5, atol=1e-5)
        for i, s in zip(got.tolist(), sims.tolist()):
            assert s == pytest.approx(want[vs.keys[i]], rel=1e-5, abs=1e-5)
        bounded += n >= 8 and vs._basis is not None
    assert bounded > 500 and vs._fitted_rows >= 128  # the bound was in use, refitted
