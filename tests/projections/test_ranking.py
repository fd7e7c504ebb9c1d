"""Ranking functions (projections/_ranking.py): pure, over candidate arrays."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from eidetica.errors import InvalidInput
from eidetica.projections._ranking import SearchOptions, minmax, mmr, order, recency, smooth, speaker_bonus, zscore


def test_minmax_maps_to_unit_range_and_constant_to_one() -> None:
    assert minmax(np.array([2.0, 4.0, 3.0])).tolist() == [0.0, 1.0, 0.5]
    assert minmax(np.array([5.0, 5.0])).tolist() == [1.0, 1.0]


def test_zscore_standardises_and_constant_to_zero() -> None:
    assert zscore(np.array([1.0, 2.0, 3.0])).tolist() == pytest.approx([-1.224744871, 0.0, 1.224744871])
    assert zscore(np.array([4.0, 4.0])).tolist() == [0.0, 0.0]
    # unlike min-max, one outlier keeps its distance from the rest: [0, 0, 0, 1] vs [0, 0, 0, 10]
    # map to the same z-scores, and a side whose best stands out weighs more in a fused sum
    assert zscore(np.array([0.0, 0.0, 0.0, 10.0])).tolist() == pytest.approx(zscore(np.array([0.0, 0.0, 0.0, 1.0])).tolist())
    assert zscore(np.array([0.0, 0.0, 0.0, 1.0]))[-1] > zscore(np.array([0.0, 0.5, 0.7, 1.0]))[-1]


def test_smooth_adds_neighbours_and_session_best_only_within_a_session() -> None:
    score = np.array([1.0, 0.5, 0.2, 0.9])
    out = smooth(score, ["a", "a", "b", ""], [1, 2, 1, None], (0.1, 0.2), 0.5)
    # a1: +0.2*a2 +0.5*best(a); a2: +0.1*a1 +0.5*best(a); b1 alone; no session: unchanged
    assert out.tolist() == pytest.approx([1.0 + 0.1 + 0.5, 0.5 + 0.1 + 0.5, 0.2 + 0.1, 0.9])


def test_order_breaks_ties_by_recency_then_key() -> None:
    assert order(np.array([1.0, 1.0, 2.0, 1.0]), [5, 9, 0, 9], ["a", "c", "z", "b"]) == [2, 3, 1, 0]


def test_recency_and_speaker_bonus() -> None:
    assert recency(np.array([1.0, 1.0]), np.array([0, 10]), 10, 10.0).tolist() == [0.5, 1.0]
    assert speaker_bonus(np.array([0.5, 0.5]), np.array([True, False]), 0.25).tolist() == [0.75, 0.5]


def test_mmr_skips_a_near_duplicate() -> None:
    vecs = np.array([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]])
    assert mmr(np.array([1.0, 0.99, 0.8]), vecs, 0.5, 2) == [0, 2]


def test_options_check_names_the_bad_field() -> None:
    assert SearchOptions.check(neighbors=0.2).neighbors == (0.2, 0.2)
    for field, value in (("vector_weight", 2), ("candidates", 0), ("now", dt.datetime(2026, 1, 1)), ("bogus", 1)):
        with pytest.raises(InvalidInput) as e:
            SearchOptions.check(**{field: value})
        assert e.value.field == field
