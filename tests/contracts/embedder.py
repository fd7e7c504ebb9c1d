"""The embedder port's conformance suite: every Embedder implementation subclasses it.

Subclasses implement ``make_embedder()`` returning a fresh instance (with its cache off where
it has one, so determinism and batching are tested on real computations).
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from eidetica.errors import InvalidInput
from eidetica.providers import Embedder

UNICODE_TEXTS = [
    "Ça va très bien, merci — naïve café",
    "東京に住んでいます",
    "Я живу в Москве",
    "أعيش في القاهرة",
    "emoji 🎉🔥👩‍👩‍👧 mixed",
    "zero\u200bwidth and\u00a0nbsp",
    "control\x00chars\x07here",
    "lone surrogate \ud800 here",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math letters",
]


def cos(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity of two vectors."""
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


class EmbedderConformance:
    """Behaviour every embedder must show. Subclasses provide ``make_embedder``."""

    #: how long the "very long input" test text is, in words
    long_words = 20_000

    def make_embedder(self) -> Embedder:
        raise NotImplementedError

    @pytest.fixture
    def embedder(self) -> Embedder:
        return self.make_embedder()

    def test_identity_attributes(self, embedder: Embedder) -> None:
        assert isinstance(embedder.model_id, str) and embedder.model_id
        assert isinstance(embedder.dim, int) and embedder.dim > 1
        assert isinstance(embedder.max_tokens, int) and embedder.max_tokens > 0

    def test_shape_dtype_and_unit_norm(self, embedder: Embedder) -> None:
        texts = ["I live in Paris", "The stock market fell today", "a", "Hello, world!"]
        v = embedder.embed(texts)
        assert isinstance(v, np.ndarray)
        assert v.shape == (4, embedder.dim)
        assert v.dtype == np.float32
        assert np.isfinite(v).all()
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)

    def test_deterministic(self, embedder: Embedder) -> None:
        texts = ["deterministic output please", "second text"]
        a = embedder.embed(texts)
        b = self.make_embedder().embed(texts)
        np.testing.assert_allclose(a, b, atol=1e-6)

    def test_batched_equals_one_by_one(self, embedder: Embedder) -> None:
        texts = [
            "short",
            "a somewhat longer sentence about the weather in Lyon during spring",
            "I work as a nurse at the city hospital and I love my job",
            "x",
            "numbers 1 2 3 4 5 6 7 8 9 10 and more numbers 11 12 13",
        ]
        together = embedder.embed(texts)
        single = np.stack([self.make_embedder().embed([t])[0] for t in texts])
        np.testing.assert_allclose(together, single, atol=1e-5)

    def test_order_preserved_and_duplicates(self, embedder: Embedder) -> None:
        a, b = "first text here", "completely different second text"
        v = embedder.embed([a, b, a, b, a])
        np.testing.assert_allclose(v[0], v[2], atol=1e-6)
        np.testing.assert_allclose(v[0], v[4], atol=1e-6)
        np.testing.assert_allclose(v[1], v[3], atol=1e-6)
        assert cos(v[0], v[1]) < 0.999

    def test_empty_list(self, embedder: Embedder) -> None:
        v = embedder.embed([])
        assert v.shape == (0, embedder.dim)
        assert v.dtype == np.float32

    def test_accepts_a_tuple(self, embedder: Embedder) -> None:
        v = embedder.embed(("one", "two"))
        assert v.shape == (2, embedder.dim)

    def test_empty_and_blank_strings(self, embedder: Embedder) -> None:
        v = embedder.embed(["", " ", "\n\t"])
        assert v.shape == (3, embedder.dim)
        assert np.isfinite(v).all()
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)

    def test_very_long_input_is_truncated_not_an_error(self, embedder: Embedder) -> None:
        words = ("memory is the treasury and guardian of all things " * (self.long_words // 9 + 1)).split()
        long_text = " ".join(words[: self.long_words])
        v = embedder.embed([long_text, "short one"])
        assert v.shape == (2, embedder.dim)
        assert np.isfinite(v).all()
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)

    def test_unicode(self, embedder: Embedder) -> None:
        v = embedder.embed(UNICODE_TEXTS)
        assert v.shape == (len(UNICODE_TEXTS), embedder.dim)
        assert np.isfinite(v).all()
        np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)

    def test_lexical_neighbours_score_higher(self, embedder: Embedder) -> None:
        v = embedder.embed(["the cat sat on the mat", "the cat sat on a mat", "quarterly revenue grew by ten percent"])
        assert cos(v[0], v[1]) > cos(v[0], v[2]) + 0.2

    def test_result_is_a_fresh_array(self, embedder: Embedder) -> None:
        first = embedder.embed(["mutable result"])
        expected = first.copy()
        first[:] = 0.0
        np.testing.assert_allclose(embedder.embed(["mutable result"]), expected, atol=1e-6)

    def test_pickles_for_other_processes(self, embedder: Embedder) -> None:
        # Ray ships embedders to actors by pickling them; the copy must work and agree.
        texts = ["pickled embedder", "second"]
        expected = embedder.embed(texts)
        blob = pickle.dumps(embedder)
        assert len(blob) < 100_000  # identity and settings only, never weights or caches
        copy = pickle.loads(blob)
        assert (copy.model_id, copy.dim, copy.max_tokens) == (embedder.model_id, embedder.dim, embedder.max_tokens)
        np.testing.assert_allclose(copy.embed(texts), expected, atol=1e-6)

    def test_rejects_a_bare_string(self, embedder: Embedder) -> None:
        with pytest.raises(InvalidInput) as e:
            embedder.embed("not a list")  # type: ignore[arg-type]
        assert e.value.field == "texts"

    def test_rejects_non_string_items(self, embedder: Embedder) -> None:
        with pytest.raises(InvalidInput):
            embedder.embed(["ok", 3])  # type: ignore[list-item]
        with pytest.raises(InvalidInput):
            embedder.embed([None])  # type: ignore[list-item]
