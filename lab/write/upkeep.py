"""Store upkeep: repair, index rebuilds and compaction, the writes that change no memory; a part
of ``Writer`` (its base class), under the same writer lock."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from lab.embed.embedding_cache import EmbeddingCache
from lab.index.manager import IndexManager
from lab.store.store import Store
from lab.write.check import repair_tables
from lab.write.lock import locked

# `compact` rebuilds an index when this share of its chunk labels is dead (masked, still in the
# hnswlib graph and the BM25 main index), else keeps it: a rebuild of a million chunks takes most of an hour
REBUILD_DEAD_SHARE = 0.2


class Upkeep:
    """Repair, rebuild and compact a store and its indexes (``Writer`` supplies the store, its
    indexes and embedding cache, and ``rechunk``)."""
    store: Store
    indexes: IndexManager
    cache: EmbeddingCache | None
    rechunk: Callable[[Sequence[str]], int]  # chunk, embed and index memories again from their rows

    @locked
    def repair(self) -> dict[str, Any]:
        """Take damaged files out of their tables, remove leftover index folders, chunk again
        memories whose chunks were lost, and rebuild and save every index."""
        done = repair_tables(self.store)
        self.indexes.forget_all()  # built on the tables as they were: start from the store again
        visible = set(self.store.chunks(embeddings=False)["memory_id"].to_list())
        lost = sorted(set(self.store.memories()["id"].to_list()) - visible)
        done["memories_rechunked"] = self.rechunk(lost) if lost else 0
        done["indexes_rebuilt"] = self.build()
        return done

    @locked
    def build(self, namespace: str | None = None) -> list[str]:
        """Rebuild the indexes of one namespace (or all) from the store and save them."""
        namespaces = [namespace] if namespace is not None else self.store.namespaces()
        for ns in namespaces:
            self.indexes.build(ns)
        self.indexes.save_changed()
        return namespaces

    @locked
    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Compact the store's tables and the embedding cache; rebuild the indexes worn by deletes
        (REBUILD_DEAD_SHARE of their chunk labels dead) and keep the others, saved at the new version."""
        report = self.store.compact(vacuum_hours=vacuum_hours)
        if self.cache is not None:
            report["embedding_cache_parts_merged"] = self.cache.compact()
        rebuilt, kept = [], []
        for ns in self.store.namespaces():
            (rebuilt if self.indexes.keep_or_rebuild(ns, REBUILD_DEAD_SHARE) else kept).append(ns)
        self.indexes.save_changed()
        report["indexes_rebuilt"], report["indexes_kept"] = rebuilt, kept
        return report
