"""Embedders: conformance for every implementation, plus the local model's numerics and semantics."""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from eidetica.errors import DimensionMismatch, InvalidInput, ProviderError
from eidetica.providers import (
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
    check_vectors,
    default_embedder,
    default_model_path,
)
from tests.contracts.embedder import EmbedderConformance, cos
from tests.support.openai_server import FakeOpenAI

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with FakeOpenAI() as s:
        yield s


@pytest.fixture(scope="module")
def local() -> LocalEmbedder:
    # Weights are loaded once per process and shared by every LocalEmbedder instance.
    return default_embedder()


# --- conformance --------------------------------------------------------------------------------


class TestHashEmbedderConformance(EmbedderConformance):
    def make_embedder(self) -> Embedder:
        return HashEmbedder(dim=384, cache_size=0)


class TestLocalEmbedderConformance(EmbedderConformance):
    def make_embedder(self) -> Embedder:
        return LocalEmbedder(cache_size=0)


class TestLocalEmbedderCachedConformance(EmbedderConformance):
    """The same contract with the cache on: cached answers must be indistinguishable."""

    def make_embedder(self) -> Embedder:
        return LocalEmbedder()


class TestOpenAIEmbedderConformance(EmbedderConformance):
    @pytest.fixture(autouse=True)
    def _server(self, server: FakeOpenAI) -> None:
        self.server = server

    def make_embedder(self) -> Embedder:
        return OpenAIEmbedder("text-embedding-3-small", base_url=self.server.base_url, dimensions=256, cache_size=0, backoff=0.01)


# --- the local model: numerics ---------------------------------------------------------------------

# Published outputs of sentence-transformers for all-MiniLM-L6-v2, computed by torch:
# - "hello world"[:5], as pinned in fastembed's tests (CANONICAL_VECTOR_VALUES);
# - the cosine matrix of the sentence-transformers quickstart (sbert.net, model card).
HELLO_WORLD_FIRST5 = np.array([-0.034478, 0.03102, 0.00673, 0.02611, -0.039362])
QUICKSTART = ["The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
QUICKSTART_SIMS = {(0, 1): 0.6660, (0, 2): 0.1046, (1, 2): 0.1411}


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_matches_published_sentence_transformers_values(local: LocalEmbedder) -> None:
    exact = LocalEmbedder(cache_size=0, int8=False)
    v = exact.embed(["hello world", "flag embedding"])
    np.testing.assert_allclose(v[0, :5], HELLO_WORLD_FIRST5, atol=2e-5)
    s = exact.embed(QUICKSTART)
    for (i, j), expected in QUICKSTART_SIMS.items():
        assert abs(cos(s[i], s[j]) - expected) < 1e-4, (i, j)
    # the default (int8 products) within 1e-3 cosine of float32, and the published similarities within 2e-3
    assert local.int8
    q = local.embed(QUICKSTART)
    for a, b in zip(q, s):
        assert cos(a, b) > 1 - 1e-3
    for (i, j), expected in QUICKSTART_SIMS.items():
        assert abs(cos(q[i], q[j]) - expected) < 2e-3, (i, j)


def _wordpiece(text: str, vocab: dict[str, int]) -> list[int]:
    """BERT uncased tokenisation written from the paper's description, for plain ASCII text."""
    words: list[str] = []
    for chunk in text.lower().split():
        cur = ""
        for ch in chunk:
            if not ch.isalnum():
                if cur:
                    words.append(cur)
                words.append(ch)
                cur = ""
            else:
                cur += ch
        if cur:
            words.append(cur)
    ids = [vocab["[CLS]"]]
    for w in words:
        start = 0
        while start < len(w):
            end = len(w)
            while end > start:
                piece = w[start:end] if start == 0 else "##" + w[start:end]
                if piece in vocab:
                    ids.append(vocab[piece])
                    break
                end -= 1
            else:
                ids.append(vocab["[UNK]"])
                break
            start = end
    ids.append(vocab["[SEP]"])
    return ids


def _reference_embedding(ids: list[int], w: dict[str, np.ndarray], cfg: dict) -> np.ndarray:
    """One text, float64, no batching or padding, head by head, exact erf GELU."""
    H = cfg["num_attention_heads"]
    hid = cfg["hidden_size"]
    d = hid // H
    eps = cfg["layer_norm_eps"]

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        mu = x.mean(-1, keepdims=True)
        sd = np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
        return (x - mu) / sd * w[name + ".weight"] + w[name + ".bias"]

    def dense(x: np.ndarray, name: str) -> np.ndarray:
        return x @ w[name + ".weight"].T + w[name + ".bias"]

    erf = np.vectorize(math.erf)
    n = len(ids)
    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
    x = ln(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    for layer in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{layer}."
        q, k, v = (dense(x, p + f"attention.self.{m}") for m in ("query", "key", "value"))
        heads = []
        for h in range(H):
            sl = slice(h * d, (h + 1) * d)
            scores = q[:, sl] @ k[:, sl].T / math.sqrt(d)
            probs = np.exp(scores - scores.max(1, keepdims=True))
            probs /= probs.sum(1, keepdims=True)
            heads.append(probs @ v[:, sl])
        x = ln(dense(np.concatenate(heads, 1), p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inner = dense(x, p + "intermediate.dense")
        inner = 0.5 * inner * (1.0 + erf(inner / math.sqrt(2.0)))
        x = ln(dense(inner, p + "output.dense") + x, p + "output.LayerNorm")
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_forward_matches_an_independent_float64_reference(local: LocalEmbedder) -> None:
    from safetensors.numpy import load_file

    path = default_model_path()
    cfg = json.loads((path / "config.json").read_text())
    vocab = {tok: i for i, tok in enumerate((path / "vocab.txt").read_text(encoding="utf-8").splitlines())}
    weights = {k: v.astype(np.float64) for k, v in load_file(str(path / "model.safetensors")).items()}
    texts = [
        "I live in Paris.",
        "My home is in Paris, near the river!",
        "Unbelievably, the quarterly earnings report was postponed again; analysts were unimpressed.",
        "ok",
    ]
    for t in texts:
        assert local.tokenize([t])[0] == _wordpiece(t, vocab), t
    # A mixed-length batch exercises padding, masking and the length sort.
    got = LocalEmbedder(cache_size=0, int8=False).embed(texts)
    fast = LocalEmbedder(cache_size=0).embed(texts)
    for t, row, row8 in zip(texts, got, fast):
        ref = _reference_embedding(_wordpiece(t, vocab), weights, cfg)
        np.testing.assert_allclose(row, ref, atol=2e-6, err_msg=t)
        # int8 products (the default): the bound, 1e-3 cosine of the reference
        assert 1 - 1e-3 < float(row8 @ ref) < 1 - 1e-6, t  # close, and not the float32 path by mistake


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_int8_stays_within_1e3_cosine_of_float32_even_for_a_word() -> None:
    # The shortest texts have the largest error (few tokens to average): quantising the query,
    # key and value projections too put "Thanks!" at 0.9985.
    texts = ["Thanks!", "Yes", "No", "amazing", "ok", "Likely no", "https://example.com/photos/b1sgp694.jpg",
             "I live in Paris.", "My colleague Sam and I talk about houseplants on Tuesdays.", "word " * 300]
    exact = LocalEmbedder(cache_size=0, int8=False).embed(texts)
    fast = LocalEmbedder(cache_size=0).embed(texts)
    sims = (exact * fast).sum(1)
    assert (sims > 1 - 1e-3).all(), dict(zip(texts, sims.round(5)))
    assert (sims < 1 - 1e-7).any()  # the default really is the int8 path
    with pytest.raises(InvalidInput, match="int8"):
        LocalEmbedder(int8=1)  # type: ignore[arg-type]


def test_semantic_sanity_paraphrase_beats_unrelated_by_a_wide_margin(local: LocalEmbedder) -> None:
    v = local.embed(
        [
            "I live in Paris",
            "My home is in Paris",
            "The stock market fell today",
            "I am allergic to peanuts",
            "Peanuts make me sick",
            "I work as a nurse",
            "My job is caring for patients in a hospital",
        ]
    )
    paraphrase = cos(v[0], v[1])
    unrelated = cos(v[0], v[2])
    assert paraphrase > 0.7
    assert unrelated < 0.2
    assert paraphrase - unrelated > 0.5
    assert cos(v[3], v[4]) > cos(v[3], v[2]) + 0.4
    # Meaning without shared words: the hash embedder cannot do this.
    assert cos(v[5], v[6]) > cos(v[5], v[2]) + 0.3


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_truncates_at_the_model_limit(local: LocalEmbedder) -> None:
    assert local.max_tokens == 256
    base = "the quick brown fox jumps over the lazy dog " * 60
    ids = local.tokenize([base])[0]
    assert len(ids) == 256
    # Text after the 256th token cannot change the vector.
    a, b = LocalEmbedder(cache_size=0).embed([base + "tail one", base + "a different ending entirely"])
    np.testing.assert_allclose(a, b, atol=1e-6)
    short = local.tokenize(["hello world"])[0]
    assert len(short) == 4  # no fixed padding to 128 from the bundled tokenizer.json


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_long_and_short_texts_in_one_batch_match_one_by_one(local: LocalEmbedder) -> None:
    texts = ["word " * n for n in (1, 300, 2, 120, 40, 255, 7)]
    together = LocalEmbedder(cache_size=0, batch_size=4).embed(texts)
    single = np.stack([LocalEmbedder(cache_size=0).embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, single, atol=1e-5)


def test_identity(local: LocalEmbedder) -> None:
    assert local.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert local.dim == 384
    assert default_embedder() is default_embedder()
    # Every instance shares one copy of the weights.
    assert LocalEmbedder()._model is local._model


def test_cache_never_embeds_the_same_text_twice() -> None:
    e = LocalEmbedder(cache_size=100)
    e.embed(["alpha", "beta", "alpha"])
    info = e.cache_info()
    assert (info.misses, info.hits, info.size) == (2, 0, 2)
    e.embed(["beta", "gamma"])
    info = e.cache_info()
    assert (info.misses, info.hits, info.size) == (3, 1, 3)
    e.cache_clear()
    assert e.cache_info() == (0, 0, 0, 100)


def test_cache_is_lru_and_bounded() -> None:
    e = HashEmbedder(dim=32, cache_size=2)
    e.embed(["a"])
    e.embed(["b"])
    e.embed(["a"])  # a is now most recent
    e.embed(["c"])  # evicts b
    before = e.cache_info().misses
    e.embed(["a", "c"])
    assert e.cache_info().misses == before
    e.embed(["b"])
    assert e.cache_info().misses == before + 1
    assert e.cache_info().size == 2


def test_concurrent_use_from_threads() -> None:
    e = LocalEmbedder(cache_size=0)
    texts = [f"thread safety sentence number {i}" for i in range(12)]
    expected = e.embed(texts)
    results: list[np.ndarray] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            results.append(e.embed(texts))
        except BaseException as ex:  # pragma: no cover - surfaced below
            errors.append(ex)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for r in results:
        np.testing.assert_allclose(r, expected, atol=1e-6)


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_model_runtime_loads_on_first_embed_not_at_open(tmp_path: Path) -> None:
    # `import eidetica` and `eidetica.open()` with the default embedder must not pay for onnxruntime.
    code = f"""
import sys, eidetica
m = eidetica.open({str(tmp_path / 's')!r})
before = "onnxruntime" in sys.modules
v = m.embedder.embed(["hello world"])
print(before, "onnxruntime" in sys.modules, float(v[0, 0]))
m.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    before, after, first = out.stdout.split()
    assert (before, after) == ("False", "True"), out.stderr
    assert abs(float(first) - HELLO_WORLD_FIRST5[0]) < 2e-3


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_survives_pickling_and_fork(local: LocalEmbedder) -> None:
    import multiprocessing
    import pickle

    texts = ["I live in Paris.", "ok", "a somewhat longer sentence about the weather in spring"]
    expected = LocalEmbedder(cache_size=0).embed(texts)  # the parent's session exists before the fork
    copy = pickle.loads(pickle.dumps(LocalEmbedder(cache_size=0)))
    np.testing.assert_allclose(copy.embed(texts), expected, atol=1e-6)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply(_embed_in_child, (texts,))
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_batches_split_evenly_over_the_cores() -> None:
    from eidetica.providers._local import even_batch_size

    assert even_batch_size(100, 2, 32) == 25  # 4 batches of 25, not 32, 32, 32 and 4
    assert even_batch_size(100, 2, 16) == 13  # 8 batches: 4 per core
    assert even_batch_size(3, 2, 16) == 2 and even_batch_size(1, 2, 16) == 1 and even_batch_size(0, 2, 16) == 1
    for n in range(1, 300):
        for w in (1, 2):
            size = even_batch_size(n, w, 16)
            batches = -(-n // size)
            assert size <= 16 and (batches >= w or size == 1), (n, w)  # never above the cap, every core gets a batch


def test_a_lone_text_runs_on_every_core_and_matches(local: LocalEmbedder) -> None:
    from eidetica.providers._local import _workers

    e = LocalEmbedder(cache_size=0)
    model = e._model
    texts = ["I live in Paris.", "a somewhat longer sentence about the weather in spring"]
    together = e.embed(texts)  # one batch per core, one intra-op thread each
    wide = _workers()
    model._sessions.pop(wide, None)
    alone = np.vstack([e.embed([t]) for t in texts])
    np.testing.assert_allclose(alone, together, atol=2e-6)
    if wide > 1:
        assert wide in model._sessions  # a lone text used the session with an intra-op thread per core
        model._sessions.pop(wide)
        model._busy += 1  # as if another thread were embedding now: the lone text must not take every core
        try:
            np.testing.assert_allclose(e.embed(texts[:1]), together[:1], atol=2e-6)
        finally:
            model._busy -= 1
        assert wide not in model._sessions


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_fork_after_a_lone_text_does_not_hang_the_child(local: LocalEmbedder) -> None:
    import multiprocessing

    texts = ["I live in Paris.", "ok", "a somewhat longer sentence about the weather in spring"]
    expected = LocalEmbedder(cache_size=0).embed(texts)
    LocalEmbedder(cache_size=0).embed(["a lone text"])  # builds the session whose threads a child inherits broken
    with multiprocessing.get_context("fork").Pool(1) as pool:
        got = pool.apply_async(_embed_in_child, (texts,)).get(timeout=120)  # hung forever before the fix
    np.testing.assert_allclose(got, expected, atol=1e-6)


def _embed_in_child(texts: list[str]) -> np.ndarray:
    return default_embedder().embed(texts)


def test_bad_model_path_is_a_provider_error(tmp_path: Path) -> None:
    with pytest.raises(ProviderError):
        LocalEmbedder(tmp_path)


def test_bad_arguments() -> None:
    with pytest.raises(InvalidInput):
        LocalEmbedder(batch_size=0)
    with pytest.raises(InvalidInput):
        HashEmbedder(dim=1)
    with pytest.raises(InvalidInput):
        HashEmbedder(cache_size=-1)


# --- optional torch path ---------------------------------------------------------------------------


def _torch_available() -> bool:
    try:
        import sentence_transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _torch_available(), reason="sentence-transformers/torch not installed (eidetica[torch])")
def test_sentence_transformers_matches_numpy(local: LocalEmbedder) -> None:
    st = SentenceTransformerEmbedder(cache_size=0)
    texts = QUICKSTART + ["hello world", "word " * 300]
    ours = st.embed(texts)
    np.testing.assert_allclose(ours, LocalEmbedder(cache_size=0, int8=False).embed(texts), atol=1e-5)
    assert ((ours * local.embed(texts)).sum(1) > 1 - 1e-3).all()  # the int8 default: the bound
    assert st.model_id == local.model_id and st.dim == local.dim


@pytest.mark.skipif(_torch_available(), reason="only meaningful without torch")
def test_sentence_transformers_missing_is_a_clear_error() -> None:
    with pytest.raises(ProviderError, match=r"eidetica\[torch\]"):
        SentenceTransformerEmbedder()


# --- HashEmbedder ------------------------------------------------------------------------------------


def test_hash_embedder_identity_and_lexical_similarity() -> None:
    e = HashEmbedder(dim=128)
    assert e.model_id == "hash-128" and e.dim == 128
    v = e.embed(["I live in Paris", "My home is in Paris", "The stock market fell today"])
    assert cos(v[0], v[1]) > cos(v[0], v[2]) + 0.2
    # Case and punctuation do not matter; word order barely does.
    a, b = e.embed(["Paris, I live in!", "i live in paris"])
    assert cos(a, b) > 0.999


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_hash_embedder_is_stable_across_processes() -> None:
    code = "from eidetica.providers import HashEmbedder; print(repr(HashEmbedder(16).embed(['stable across runs']).tolist()))"
    outs = set()
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        outs.add(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout)
    assert len(outs) == 1
    np.testing.assert_allclose(np.array(json.loads(outs.pop())), HashEmbedder(16).embed(["stable across runs"]), atol=1e-7)


# --- check_vectors -----------------------------------------------------------------------------------


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_check_vectors() -> None:
    ok = check_vectors([[1, 0, 0], [0, 1, 0]], 3)
    assert ok.dtype == np.float32 and ok.shape == (2, 3) and ok.flags.c_contiguous
    assert check_vectors(np.ones(3), 3).shape == (1, 3)
    assert check_vectors(np.zeros((0, 3)), 3).shape == (0, 3)
    with pytest.raises(DimensionMismatch) as e:
        check_vectors(np.ones((2, 5)), 3)
    assert (e.value.expected, e.value.actual) == (3, 5)
    with pytest.raises(DimensionMismatch):
        check_vectors(np.ones(4), 3)
    with pytest.raises(InvalidInput):
        check_vectors(np.ones((2, 2, 3)), 3)
    with pytest.raises(InvalidInput):
        check_vectors([[np.nan, 0, 0]], 3)


# --- package boundaries -------------------------------------------------------------------------------


def test_providers_import_nothing_from_projections_or_actors() -> None:
    pkg = ROOT / "src" / "eidetica" / "providers"
    for path in pkg.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                assert "projections" not in name and "actors" not in name, f"{path.name} imports {name}"


@pytest.mark.slow  # several seconds: `make test-unit` leaves it to `make test`
def test_importing_providers_is_light() -> None:
    # Load the providers package under a bare parent package, so whatever eidetica/__init__.py
    # imports does not count: only the providers' own imports are measured.
    code = (
        "import sys, types; "
        f"pkg = types.ModuleType('eidetica'); pkg.__path__ = [{str(ROOT / 'src' / 'eidetica')!r}]; "
        "sys.modules['eidetica'] = pkg; "
        "import eidetica.providers; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sentence_transformers', 'openai') "
        "or m.startswith(('eidetica.projections', 'eidetica.actors', 'eidetica.memory'))); "
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"
