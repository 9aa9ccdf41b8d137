"""Cosine vector index over chunk embeddings with hnswlib (incremental adds, soft deletes)."""
from __future__ import annotations

from pathlib import Path

import hnswlib
import numpy as np

from lab.config import VectorIndexConfig


class GraphShortfall(Exception):
    """hnswlib could not return as many neighbours as asked: its graph (with soft-deleted
    elements) does not reach that many live ones from the entry point."""


class VectorIndex:
    """An hnswlib index whose labels are the caller's integer chunk labels."""

    def __init__(self, dim: int, config: VectorIndexConfig, capacity: int = 1024) -> None:
        self.dim = dim
        self.config = config
        self._index = hnswlib.Index(space="cosine", dim=dim)
        self._index.init_index(
            max_elements=max(capacity, 16),
            M=config.m,
            ef_construction=config.ef_construction,
            random_seed=config.seed,
            allow_replace_deleted=False,
        )
        self._index.set_num_threads(1)  # one thread: deterministic graphs, reproducible results
        self.n_live = 0

    def add(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        if len(labels) == 0:
            return
        needed = self._index.get_current_count() + len(labels)
        if needed > self._index.get_max_elements():
            # grown by a quarter, not doubled: a loaded index is exactly full, and doubling one of a
            # million 384-dimensional vectors on its first save allocated 1.7 GB never used
            grown = self._index.get_max_elements() + self._index.get_max_elements() // 4
            self._index.resize_index(max(needed, grown))
        self._index.add_items(np.asarray(vectors, dtype=np.float32), np.asarray(labels, dtype=np.int64))
        self.n_live += len(labels)

    def remove(self, labels: list[int]) -> None:
        for label in labels:
            self._index.mark_deleted(int(label))
        self.n_live -= len(labels)

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (labels, cosine similarities), best first; fewer when fewer are live.

        Raises GraphShortfall when the graph cannot reach ``k`` live elements."""
        k = min(k, self.n_live)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        # hnswlib's default ef is 10, which silently caps recall: ef must be >= k.
        self._index.set_ef(max(self.config.ef_search, k))
        try:
            labels, distances = self._index.knn_query(np.asarray(query, dtype=np.float32).reshape(1, -1), k=k)
        except RuntimeError as exc:  # "Cannot return the results in a contiguous 2D array"
            raise GraphShortfall(f"hnswlib returned fewer than {k} neighbours: {exc}") from None
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def save(self, path: Path) -> None:
        self._index.save_index(str(path))

    @classmethod
    def load(cls, path: Path, dim: int, config: VectorIndexConfig, n_live: int) -> "VectorIndex":
        obj = cls.__new__(cls)
        obj.dim = dim
        obj.config = config
        obj._index = hnswlib.Index(space="cosine", dim=dim)
        obj._index.load_index(str(path))
        obj._index.set_num_threads(1)
        obj.n_live = n_live
        return obj
