"""One index of a namespace's chunks (its main view, or an extra view): hnswlib vectors and a bm25s
main index plus delta over shared chunk labels, deletions as masks; exact cosines from stored vectors."""
from __future__ import annotations

import math
import threading
from datetime import datetime, timezone

import numpy as np
import polars as pl

from lab.config import IndexConfig
from lab.index.chunk_vectors import ChunkVectors
from lab.index.embeddings import write_vectors
from lab.index.lexical import LexicalAnalyzer, LexicalIndex
from lab.index.lexical_corpus import LexicalCorpus
from lab.index.lexical_topk import top_lexical
from lab.index.vector import GraphShortfall, VectorIndex, shards_for
from lab.store.table import StoredRows


def collapse(labels: np.ndarray, scores: np.ndarray, memory_of: list[str], k: int,
             positions: np.ndarray | None = None) -> list[tuple[str, float]] | list[tuple[int, float]]:
    """Chunk hits -> memory hits (max score over a memory's chunks), best first, ties by id.

    Only the best chunks are folded in Python: every chunk scoring at least the m-th best score is
    kept, so once those hold k distinct memories no memory left out can beat (or tie) them.

    With ``positions`` (label -> the memory's position in a namespace view, -1 where it has none),
    hits name positions instead of ids: a view's positions are in id order, so the memories and
    their order are the same, and no id string is looked up or compared. Labels without a
    position are left out.
    """
    if positions is not None:
        has = positions[labels] >= 0
        labels, scores = labels[has], scores[has]
    n = len(scores)
    m = max(4 * k, 16)
    while True:
        if n > m:
            cut = np.partition(scores, n - m)[n - m]
            sel = np.flatnonzero(scores >= cut)
        else:
            sel = np.arange(n)
        sc = scores[sel]
        mids = (np.array([memory_of[label] for label in labels[sel].tolist()]) if positions is None
                else positions[labels[sel]])
        order = np.lexsort((mids, -sc))  # best score first, ties by memory id
        _, first = np.unique(mids[order], return_index=True)  # each memory's best chunk
        if len(first) >= k or len(sel) == n:
            best = order[np.sort(first)[:k]]
            return list(zip(mids[best].tolist(), sc[best].tolist()))
        m *= 4


# widening graph fetches (x4 each) a vector search tries before it scans the allowed chunks exactly
GRAPH_ROUNDS = 3
EXACT_BLOCK = 65_536  # labels an exact scan gathers at once (96 MB of 384-dimensional vectors)




class ViewIndex:
    """Chunk labels 0..n-1 shared by both indexes; deletions are masks until the next rebuild.

    Vectors are added to hnswlib incrementally. Chunks saved after the last lexical build go to a
    small lexical delta that is rebuilt on demand; past ``delta_merge_threshold`` chunks the delta
    is folded into the main segment in a background thread. Both are scored with the statistics of
    every live chunk (`lab.index.lexical_corpus`), so a saved memory is found by the very next
    search, ranked as it will be after a rebuild.

    One view's chunks only: a namespace's main index and its extra views are a ``NamespaceIndex``.
    """

    def __init__(self, namespace: str, dim: int, config: IndexConfig, embed_model: str, view: str = "") -> None:
        self.namespace = namespace
        self.view = view  # "" for a namespace's main index; the view's name otherwise
        self.dim = dim
        self.config = config
        self.embed_model = embed_model
        self.chunk_ids: list[str] = []
        self.memory_of: list[str] = []
        self._ratio, self._ratio_at = 1.0, 0  # chunks per memory, and len(memory_of) when counted
        self.texts: list[str] = []
        self.live = np.zeros(0, dtype=bool)
        self.label_of: dict[str, int] = {}
        self.vector = VectorIndex(dim, config.vector)
        # the chunk vectors by label: exact cosines for any memory without hnswlib's per-item
        # get_items (~18 us per vector); a loaded snapshot's are mapped from its file
        self._vectors = ChunkVectors(dim)
        self.analyzer = LexicalAnalyzer(config.lexical)
        self.lexical_corpus = LexicalCorpus(config.lexical, self.analyzer, self.texts)
        self.store_version = ""
        self.built_at = ""
        self._lock = threading.RLock()
        self._merge_lock = threading.Lock()  # one merge at a time: a second would drop what the first kept
        self._merge_thread: threading.Thread | None = None
        self.merges = 0

    # ------------------------------------------------------------------ building
    def _fill(self, chunks: pl.DataFrame, store_version: str, stored: StoredRows | None = None) -> None:
        """Index ``chunks`` into this empty index (a fresh build), stamped with ``store_version``
        (``stored``: where their vectors are, for a frame without them: ``write_vectors``)."""
        self.vector = VectorIndex(self.dim, self.config.vector, capacity=max(chunks.height, 16),
                                  shards=shards_for(self.config.vector, chunks.height))
        # label order by chunk id, independent of file order: reproducible (the frame is not sorted
        # itself: a sorted copy of a million chunks is 1.8 GB more held while the index is built)
        self._append(chunks, chunks["chunk_id"].arg_sort().to_numpy(), stored)
        self.lexical_corpus.build(np.arange(len(self.texts), dtype=np.int64), self.live)
        self.store_version = store_version
        self.built_at = datetime.now(timezone.utc).isoformat()

    def _append(self, chunks: pl.DataFrame, order: np.ndarray | None = None,
                stored: StoredRows | None = None) -> list[int]:
        """Give ``chunks`` the next labels, row ``order[j]`` label start + j (default: frame order)."""
        start = len(self.chunk_ids)
        n = chunks.height
        labels = list(range(start, start + n))
        if order is None:
            order = np.arange(n, dtype=np.int64)
        rows = pl.Series(order)
        chunk_ids = chunks["chunk_id"].gather(rows).to_list()
        self.chunk_ids.extend(chunk_ids)
        self.memory_of.extend(chunks["memory_id"].gather(rows).to_list())
        self.texts.extend(chunks["text"].gather(rows).to_list())
        self.live = np.concatenate([self.live, np.ones(n, dtype=bool)])
        self.label_of.update(zip(chunk_ids, labels))
        self._vectors.reserve(start + n)
        into, first = self._vectors.writable_from(start)
        label_of_row = np.empty(n, dtype=np.int64)
        label_of_row[order] = np.arange(start - first, start - first + n, dtype=np.int64)
        write_vectors(chunks, label_of_row, into, stored)
        self.vector.add(into[start - first:start - first + n], np.asarray(labels, dtype=np.int64))
        return labels

    def locked(self) -> threading.RLock:
        """The index's lock (re-entrant): held, nothing changes the index (a snapshot being saved)."""
        return self._lock

    @property
    def vectors(self) -> ChunkVectors:
        """The stored chunk vectors by label (what a snapshot saves beside the graph)."""
        return self._vectors

    def restore_lexical(self, main: LexicalIndex, main_labels: np.ndarray, delta_labels: list[int]) -> None:
        """A loaded snapshot's lexical segments, over this index's texts and live mask."""
        self.lexical_corpus.texts = self.texts
        self.lexical_corpus.restore(main, main_labels, delta_labels, self.live)

    def restore_vectors(self, vectors: ChunkVectors) -> None:
        """The stored vectors by label, as a loaded snapshot has them (the exact cosine's source)."""
        self._vectors = vectors

    def apply(self, added: pl.DataFrame | None, removed: list[str], store_version: str) -> None:
        """Fold a store change in: new chunks into the vector index and lexical delta, removals masked."""
        self._fold_in(added, removed, store_version)

    def _fold_in(self, added: pl.DataFrame | None, removed: list[str], store_version: str,
                 stored: StoredRows | None = None) -> None:
        """``apply`` on this index alone (``sync`` calls it: a subclass's ``apply`` may do more)."""
        with self._lock:
            if added is not None and self.label_of:
                live = [c for c in added["chunk_id"].to_list() if c in self.label_of and self.live[self.label_of[c]]]
                # a chunk id masked earlier and visible again (content reverted) needs a new label
                for cid in added["chunk_id"].to_list():
                    if cid in self.label_of and not self.live[self.label_of[cid]]:
                        del self.label_of[cid]
                added = added.filter(~pl.col("chunk_id").is_in(live))
            if added is not None and added.height:
                self.lexical_corpus.add(self._append(added.sort("chunk_id"), None, stored))
            # once each: a chunk id masked and saved again holds two labels, so a delete may name it twice
            dead = list(dict.fromkeys(self.label_of[c] for c in removed
                                      if c in self.label_of and self.live[self.label_of[c]]))
            if dead:
                self.live[dead] = False
                self.vector.remove(dead)
                self.lexical_corpus.remove(dead)
            self.store_version = store_version

    def sync(self, chunks: pl.DataFrame, store_version: str, stored: StoredRows | None = None) -> tuple[int, int]:
        """Bring the index to ``chunks`` (the store's visible chunks of this view; ``stored``: where
        their vectors are, for a frame without them); returns (added, removed)."""
        with self._lock:
            visible = set(chunks["chunk_id"].to_list())
            live_ids = {cid for cid, label in self.label_of.items() if self.live[label]}
            removed = sorted(live_ids - visible)
            added = chunks.filter(~pl.col("chunk_id").is_in(list(live_ids)))
            # a chunk id masked earlier and visible again (e.g. content reverted) needs a new label
            revived = [c for c in added["chunk_id"].to_list() if c in self.label_of]
            for cid in revived:
                del self.label_of[cid]
            self._fold_in(added, removed, store_version, stored)
            return added.height, len(removed)

    def chunk_owners(self) -> list[tuple[str, str]]:
        """(chunk id, memory id) of every label, live or not."""
        with self._lock:
            return list(zip(self.chunk_ids, self.memory_of))

    def labels_of(self, memory_id: str) -> list[int]:
        """Live chunk labels of a memory."""
        with self._lock:
            if getattr(self, "_labels_of_n", -1) != len(self.chunk_ids):
                by_memory: dict[str, list[int]] = {}
                for label, mid in enumerate(self.memory_of):
                    by_memory.setdefault(mid, []).append(label)
                self._labels_of, self._labels_of_n = by_memory, len(self.chunk_ids)
            return [label for label in self._labels_of.get(memory_id, []) if self.live[label]]

    def chunk_vectors(self, labels: np.ndarray) -> np.ndarray:
        """The stored (normalised) vectors of the chunks at ``labels``, one row each."""
        return self._vectors.take(labels)

    def cosines(self, query_vector: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """Cosine between the query and the chunks at ``labels`` (exact, from stored vectors)."""
        return self._vectors.take(labels) @ np.asarray(query_vector, dtype=np.float32)

    def best_cosine(self, query_vector: np.ndarray, memory_ids: list[str]) -> dict[str, float]:
        """Cosine between the query and each memory's best chunk (exact, from stored vectors)."""
        owners, labels = [], []
        for mid in memory_ids:
            got = self.labels_of(mid)
            owners.extend([mid] * len(got))
            labels.extend(got)
        if not labels:
            return {}
        sims = self._vectors.take(labels) @ np.asarray(query_vector, dtype=np.float32)
        out: dict[str, float] = {}
        for mid, sim in zip(owners, sims.tolist()):
            if sim > out.get(mid, -np.inf):
                out[mid] = sim
        return out

    def _chunks_per_memory(self) -> float:
        """Labels per distinct memory (1 to 2), recounted when the labels grew by a tenth (they only
        grow: a rebuild makes a new index).

        The vector search fetches twice this many chunks per memory wanted: hnswlib's cost grows
        with the fetch (its ef), and where every memory is one chunk, four chunks per memory made
        it twice what the configured ef asks for. Too few is still correct, only slower: the
        search fetches again, four times as many."""
        n = len(self.memory_of)
        if n > 1.1 * self._ratio_at or not self._ratio_at:
            self._ratio = min(max(n / max(len(set(self.memory_of)), 1), 1.0), 2.0)
            self._ratio_at = n
        return self._ratio

    @property
    def n_live(self) -> int:
        return int(self.live.sum())

    @property
    def delta_size(self) -> int:
        return self.lexical_corpus.delta_size

    @property
    def lexical(self) -> LexicalIndex:
        """The lexical main segment (what a snapshot saves)."""
        return self.lexical_corpus.main

    @property
    def lexical_labels(self) -> np.ndarray:
        return self.lexical_corpus.main_labels

    @property
    def delta_labels(self) -> list[int]:
        return self.lexical_corpus.delta_labels

    def needs_merge(self) -> bool:
        return self.delta_size > self.config.delta_merge_threshold

    # ------------------------------------------------------------------ merging
    def merge(self) -> None:
        """Rebuild the lexical main index over every live chunk; the delta becomes empty."""
        with self._merge_lock:
            self._merge()

    def _merge(self) -> None:
        with self._lock:
            labels = np.flatnonzero(self.live).astype(np.int64)
            texts = [self.texts[i] for i in labels]
            covered = set(self.delta_labels)
        fresh = LexicalIndex(self.config.lexical, self.analyzer).build(texts)
        with self._lock:
            # chunks saved while it was built stay in the delta; those deleted meanwhile stop counting
            self.lexical_corpus.install(labels, fresh, covered, self.live)
            self.merges += 1

    def merge_in_background(self) -> threading.Thread | None:
        """Start a merge thread unless one is running; searches keep working meanwhile."""
        with self._lock:
            if self._merge_thread is not None and self._merge_thread.is_alive():
                return None
            thread = threading.Thread(target=self.merge, name=f"lab-merge-{self.namespace}", daemon=True)
            self._merge_thread = thread
        thread.start()
        return thread

    def wait_for_merge(self) -> None:
        thread = self._merge_thread
        if thread is not None:
            thread.join()

    # ------------------------------------------------------------------ search
    def search_vector(self, query_vector: np.ndarray, k: int, allowed: np.ndarray | None = None,
                      positions: np.ndarray | None = None) -> list:
        """Top ``k`` memories by cosine of their best chunk; ``allowed`` masks labels (filters);
        with ``positions`` (label -> view position), hits name positions (`collapse`).

        The graph is asked in at most ``GRAPH_ROUNDS`` widening fetches. When those do not yield
        ``k`` allowed memories (a selective filter, many deleted chunks) or hnswlib cannot return
        as many neighbours as asked (its graph does not reach every live element), the allowed
        live chunks are scanned exactly instead: a filter never makes a search fail or come up short.
        """
        if k <= 0 or self.n_live == 0:
            return []
        fetch = min(self.vector.n_live, max(k + 16, math.ceil(2 * self._chunks_per_memory() * k)))
        for _ in range(GRAPH_ROUNDS):
            try:
                labels, sims = self.vector.search(query_vector, fetch)
            except GraphShortfall:
                break
            keep = self.live[labels] if allowed is None else self.live[labels] & allowed[labels]
            hits = collapse(labels[keep], sims[keep], self.memory_of, k, positions)
            if len(hits) >= k or fetch >= self.vector.n_live:
                return hits
            fetch = min(self.vector.n_live, fetch * 4)
        return self.exact_vector(query_vector, k, allowed, positions)

    def exact_vector(self, query_vector: np.ndarray, k: int, allowed: np.ndarray | None = None,
                     positions: np.ndarray | None = None) -> list:
        """Top ``k`` memories by an exact scan of the live (and allowed) chunks' stored vectors."""
        with self._lock:
            mask = self.live if allowed is None else self.live & allowed[: len(self.live)]
            labels = np.flatnonzero(mask)
            query = np.asarray(query_vector, dtype=np.float32)
            sims = np.empty(len(labels), dtype=np.float32)
            # a block of labels at a time: gathering every vector at once copied 1.5 GB at a million chunks
            for start in range(0, len(labels), EXACT_BLOCK):
                sims[start:start + EXACT_BLOCK] = self._vectors.take(labels[start:start + EXACT_BLOCK]) @ query
            return collapse(labels, sims, self.memory_of, k, positions)

    def search_lexical(self, query: str, k: int, allowed: np.ndarray | None = None,
                       positions: np.ndarray | None = None) -> list:
        """Top ``k`` memories by the BM25 score of their best chunk, main segment and delta scored
        with the statistics of every live chunk (exact: as after a rebuild); with ``positions``
        (label -> view position), hits name positions (`collapse`)."""
        if k <= 0:
            return []
        with self._lock:
            stats, parts = self.lexical_corpus.segments()
            live, memory_of = self.live, self.memory_of

        def keep(labels: np.ndarray) -> np.ndarray:
            return live[labels] if allowed is None else live[labels] & allowed[labels]

        # the common terms' postings are scored only where they can still change the top k (MaxScore)
        return top_lexical(query, stats, parts, self.analyzer, k, keep,
                           lambda labels, scores, n: collapse(labels, scores, memory_of, n, positions))


def build_view(namespace: str, chunks: pl.DataFrame, dim: int, config: IndexConfig, embed_model: str,
               store_version: str, view: str, stored: StoredRows | None = None) -> ViewIndex:
    """The index of one extra view's chunks, stamped with ``store_version``."""
    idx = ViewIndex(namespace, dim, config, embed_model, view)
    idx._fill(chunks, store_version, stored)
    return idx
