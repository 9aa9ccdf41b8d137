"""Extra encoders of a store (``index.models``): each ranks the namespace's chunks by its own vectors.

An encoder index holds one row per label of the namespace's main index (the chunk of label i is
row i), so the main index's deletions and filters apply to it as they are. Its rows come from
the encoder's embedding cache by text: a store keeps no second vector column, adding an encoder
embeds each chunk text once (resumable: the cache is written every ``FLUSH_EVERY`` texts), and
an index rebuilt with new labels is re-read from the cache without running the model again.
Dense encoders score by cosine, sparse ones (e5's latent terms) by dot product, both exactly.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lab.config import ENCODERS, EmbedConfig
from lab.embed.base import Embedder
from lab.embed.embedding_cache import EmbeddingCache, SparseCache
from lab.embed.registry import lookup, make_embedder
from lab.index.namespace import NamespaceIndex
from lab.index.view_index import collapse
from lab.progress import progress as reporter

FLUSH_EVERY = 256  # texts embedded between cache writes: what a killed build loses at most


@dataclass
class Encoder:
    """One extra encoder: its ranked list's name, its model, and the cache its vectors go through."""

    alias: str  # a key of ENCODERS
    list_name: str  # "vector@e5", "sparse@e5"
    model: Embedder
    passages: EmbeddingCache | SparseCache
    queries: EmbeddingCache | SparseCache

    @property
    def sparse(self) -> bool:
        return bool(getattr(self.model, "sparse", False))

    def embed_passages(self, texts: Sequence[str], progress: bool = False, label: str = "") -> Any:
        """Vectors of ``texts`` through the cache, written every FLUSH_EVERY new texts."""
        if len(texts) <= FLUSH_EVERY and not progress:
            return self.passages.embed(self.model, texts)
        parts = []
        bar = reporter(total=len(texts), desc=f"{self.list_name} {label}".strip(), unit="chunk", enabled=progress)
        for start in range(0, len(texts), FLUSH_EVERY):
            parts.append(self.passages.embed(self.model, texts[start:start + FLUSH_EVERY]))
            self.passages.flush()
            bar.update(min(FLUSH_EVERY, len(texts) - start))
        bar.close()
        if self.sparse:
            from scipy.sparse import vstack

            return vstack(parts).tocsr()
        return np.vstack(parts)

    def embed_queries(self, texts: Sequence[str]) -> Any:
        return self.queries.embed(self.model, texts, queries=True)


def make_encoder(alias: str, cache_dir: Path | None, query_cache_dir: Path | None = None) -> Encoder:
    """The extra encoder ``alias`` names (a key of ENCODERS); vectors cached under ``cache_dir``
    (passages) and ``query_cache_dir`` (queries; default: in memory)."""
    spec = lookup(alias)
    assert spec is not None, alias  # IndexConfig checked the name against ENCODERS
    model = make_embedder(EmbedConfig(model=spec.id, cache=False), sparse_ok=True)
    kind = SparseCache if spec.sparse else EmbeddingCache
    return Encoder(alias, ENCODERS[alias], model, kind(cache_dir, model.model_id, model.dim),
                   kind(query_cache_dir, model.model_id, model.dim))


class EncoderIndex:
    """One encoder's rows of one namespace's main index, caught up with it before each search."""

    def __init__(self, encoder: Encoder) -> None:
        self.encoder = encoder
        self._index: NamespaceIndex | None = None
        self._blocks: list[Any] = []
        self._matrix: Any = None
        self.rows = 0
        self._lock = threading.Lock()

    def caught_up(self, index: NamespaceIndex, progress: bool = False) -> "EncoderIndex":
        """Rows for every label of ``index`` (another index object: read again from the start)."""
        with self._lock:
            if index is not self._index:
                self._index, self._blocks, self._matrix, self.rows = index, [], None, 0
            n = len(index.texts)
            if n > self.rows:
                texts = index.texts[self.rows:n]
                self._blocks.append(self.encoder.embed_passages(texts, progress, index.namespace))
                self._matrix, self.rows = None, n
        return self

    def _stacked(self) -> Any:
        if self._matrix is None:
            if self.encoder.sparse:
                from scipy.sparse import csr_matrix, vstack

                self._matrix = (vstack(self._blocks).tocsr() if self._blocks
                                else csr_matrix((0, self.encoder.model.dim), dtype=np.float32))
            else:
                self._matrix = (np.vstack(self._blocks) if self._blocks
                                else np.zeros((0, self.encoder.model.dim), dtype=np.float32))
            self._blocks = [self._matrix]
        return self._matrix

    def search(self, query: Any, k: int, allowed: np.ndarray | None) -> list[tuple[str, float]]:
        """Top ``k`` memories by their best chunk's score; ``allowed`` masks the main index's labels."""
        index = self._index
        if k <= 0 or index is None or self.rows == 0:
            return []
        with self._lock:
            matrix = self._stacked()
            live = index.live[: self.rows]
            mask = live if allowed is None else live & allowed[: self.rows]
            labels = np.flatnonzero(mask)
            if not len(labels):
                return []
            if self.encoder.sparse:
                scores = np.asarray((matrix[labels] @ query.T).todense()).ravel()
            else:
                scores = matrix[labels] @ np.asarray(query, dtype=np.float32)
            return collapse(labels, scores.astype(np.float32), index.memory_of, k)
