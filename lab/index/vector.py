"""Cosine vector index over chunk embeddings with hnswlib (incremental adds, soft deletes).

A large namespace's vectors are split over several hnswlib graphs (``index.vector.shards``), label
``l`` in graph ``l % shards``, each built on its own thread with one hnswlib thread. hnswlib's own
threads would build one graph in parallel too, but the order its threads insert in changes the
graph from run to run; a graph per thread keeps every build identical and uses every core. A
search asks each graph and merges their lists by similarity (ties by label)."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import hnswlib
import numpy as np

from lab.config import VectorIndexConfig

# below this many vectors an add goes to its graphs one after the other: a thread costs more than it saves
PARALLEL_ADD_FROM = 2048


class GraphShortfall(Exception):
    """hnswlib could not return as many neighbours as asked: its graph (with soft-deleted
    elements) does not reach that many live ones from the entry point."""


def shard_file(path: Path, shard: int) -> Path:
    """Where graph ``shard`` of an index saved at ``path`` lives (graph 0 at ``path`` itself)."""
    return path if shard == 0 else path.with_name(f"{path.stem}.{shard}{path.suffix}")


def shards_for(config: VectorIndexConfig, n_vectors: int) -> int:
    """How many graphs a build of ``n_vectors`` vectors splits them over."""
    return config.shards if n_vectors >= config.shard_from else 1


class VectorIndex:
    """hnswlib graphs whose labels are the caller's integer chunk labels."""

    def __init__(self, dim: int, config: VectorIndexConfig, capacity: int = 1024, shards: int = 1) -> None:
        self.dim = dim
        self.config = config
        self._graphs = [self._new_graph(-(-capacity // shards)) for _ in range(shards)]
        self._live = [0] * shards

    def _new_graph(self, capacity: int) -> hnswlib.Index:
        graph = hnswlib.Index(space="cosine", dim=self.dim)
        graph.init_index(max_elements=max(capacity, 16), M=self.config.m,
                         ef_construction=self.config.ef_construction, random_seed=self.config.seed,
                         allow_replace_deleted=False)
        graph.set_num_threads(1)  # one thread per graph: deterministic graphs, reproducible results
        return graph

    @property
    def shards(self) -> int:
        return len(self._graphs)

    @property
    def n_live(self) -> int:
        return sum(self._live)

    def add(self, vectors: np.ndarray, labels: np.ndarray) -> None:
        if len(labels) == 0:
            return
        vectors = np.asarray(vectors, dtype=np.float32)
        labels = np.asarray(labels, dtype=np.int64)
        if self.shards == 1:
            self._add_to(0, vectors, labels)
            return
        parts = [np.flatnonzero(labels % self.shards == s) for s in range(self.shards)]
        jobs = [(s, vectors[rows], labels[rows]) for s, rows in enumerate(parts) if len(rows)]
        if len(labels) < PARALLEL_ADD_FROM:
            for job in jobs:
                self._add_to(*job)
            return
        # hnswlib releases the GIL while it inserts: the graphs build at once, one per core
        with ThreadPoolExecutor(max_workers=len(jobs), thread_name_prefix="lab-hnsw") as pool:
            for done in [pool.submit(self._add_to, *job) for job in jobs]:
                done.result()

    def _add_to(self, shard: int, vectors: np.ndarray, labels: np.ndarray) -> None:
        graph = self._graphs[shard]
        needed = graph.get_current_count() + len(labels)
        if needed > graph.get_max_elements():
            # grown by a quarter, not doubled: a loaded index is exactly full, and doubling one of a
            # million 384-dimensional vectors on its first save allocated 1.7 GB never used
            graph.resize_index(max(needed, graph.get_max_elements() + graph.get_max_elements() // 4))
        graph.add_items(vectors, labels)
        self._live[shard] += len(labels)

    def remove(self, labels: list[int]) -> None:
        for label in labels:
            shard = int(label) % self.shards
            self._graphs[shard].mark_deleted(int(label))
            self._live[shard] -= 1

    def search(self, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top ``k`` (labels, cosine similarities), best first; fewer when fewer are live.

        Raises GraphShortfall when a graph cannot reach as many live elements as asked of it."""
        k = min(k, self.n_live)
        if k <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        query = np.asarray(query, dtype=np.float32).reshape(1, -1)
        found = [self._search_graph(s, query, min(k, live)) for s, live in enumerate(self._live) if live]
        if len(found) == 1:
            return found[0]
        labels = np.concatenate([f[0] for f in found])
        sims = np.concatenate([f[1] for f in found])
        order = np.lexsort((labels, -sims))[:k]  # by similarity, ties by label: the same on every run
        return labels[order], sims[order]

    def _search_graph(self, shard: int, query: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        graph = self._graphs[shard]
        # hnswlib's default ef is 10, which silently caps recall: ef must be >= k.
        graph.set_ef(max(self.config.ef_search, k))
        try:
            labels, distances = graph.knn_query(query, k=k)
        except RuntimeError as exc:  # "Cannot return the results in a contiguous 2D array"
            raise GraphShortfall(f"hnswlib returned fewer than {k} neighbours: {exc}") from None
        return labels[0].astype(np.int64), (1.0 - distances[0]).astype(np.float32)

    def save(self, path: Path) -> None:
        """Graph 0 to ``path``, graph s to ``shard_file(path, s)``."""
        for shard, graph in enumerate(self._graphs):
            graph.save_index(str(shard_file(path, shard)))

    @classmethod
    def load(cls, path: Path, dim: int, config: VectorIndexConfig, live: np.ndarray, shards: int = 1) -> "VectorIndex":
        """The graphs saved at ``path``; ``live``: per label, whether it is live (each graph's count)."""
        obj = cls.__new__(cls)
        obj.dim = dim
        obj.config = config
        obj._graphs = []
        for shard in range(shards):
            graph = hnswlib.Index(space="cosine", dim=dim)
            graph.load_index(str(shard_file(path, shard)))
            graph.set_num_threads(1)
            obj._graphs.append(graph)
        obj._live = [int(live[s::shards].sum()) for s in range(shards)]
        return obj
