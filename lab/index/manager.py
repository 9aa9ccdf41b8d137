"""The namespace indexes of one store: loaded from their snapshots, kept in step with the store.

Reads and writes share one manager per process. A read (``get``) loads a namespace's saved index,
or builds one in memory when there is none, and folds in what the store committed since: it never
writes to disk. Writes tell the manager what they changed (``apply``); indexes that a write or an
explicit ``build`` changed are saved by ``save_changed``, which only a writer calls.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path

import polars as pl

from lab.config import IndexConfig
from lab.errors import ConflictError
from lab.index.namespace import NamespaceIndex
from lab.index.open_namespaces import LeastRecentlyUsed
from lab.index.snapshot import IndexDamaged, load_index, save_index
from lab.store.layout import StoreVersion
from lab.store.records import namespace_folder
from lab.store.store import Store
from lab.store.table import StoredRows

log = logging.getLogger(__name__)


def _pair(stamp: str) -> tuple[int, int]:
    """The (memories, chunks) versions of a stamp: what an index's content depends on."""
    v = StoreVersion.parse(stamp)
    return v.memories, v.chunks


class IndexManager:
    """Per-namespace ``NamespaceIndex`` objects over one store (pinned or following the latest)."""

    def __init__(self, store: Store, config: IndexConfig, dim: int, embed_model: str, *,
                 warn_on_build: bool = False) -> None:
        self.store = store
        # a reader that finds no usable snapshot says so (a writer saves one on close anyway)
        self.warn_on_build = warn_on_build
        self.config = config
        self.dim = dim
        self.embed_model = embed_model
        # the open ones, at most the settings' open_namespaces (least recently used closed first): a
        # closed one is loaded again from its snapshot (a writer's unsaved changes: from the store)
        self._indexes: LeastRecentlyUsed[str, NamespaceIndex] = LeastRecentlyUsed(store.settings.open_namespaces)
        self._saved: dict[str, str] = {}  # namespace -> store version of its snapshot on disk
        self._changed: set[str] = set()  # changed by a write or a build since last saved
        # a store at a URI: namespaces whose snapshot is not at the URI (an upload cut off, say):
        # a writer uploads its copy again
        self._unshared: set[str] = set()
        self._lock = threading.RLock()

    def directory(self, namespace: str) -> Path:
        return self.store.root / "indexes" / namespace_folder(namespace)  # (a URI's: this machine's copy)

    def _remote(self, namespace: str) -> str:
        """Where a store at a URI keeps the namespace's snapshot, under its URI."""
        return f"indexes/{namespace_folder(namespace)}"

    def loaded(self) -> dict[str, NamespaceIndex]:
        with self._lock:
            return dict(self._indexes)

    def get(self, namespace: str) -> NamespaceIndex:
        """The namespace's index as of the store's current (or pinned) version; in memory only.

        An index is behind when the memories or the chunks table moved past the version it is
        stamped with (by anyone: another process's commits are folded in here).
        """
        with self._lock:
            idx = self._indexes.get(namespace)
            if idx is None:
                self.store.require_namespace(namespace)
                # without their vectors: those are read from the table's files into the index, a
                # file at a time (the chunks' table cache does not hold them)
                chunks, stored = self.store.chunks_table.visible_rows(namespace)
                # the versions these chunks were read at (no log re-read: a stamp taken later could
                # claim commits whose chunks were not read)
                seen = str(self.store.known_version())
                try:
                    idx = self._load(namespace, chunks, stored)
                except IndexDamaged as exc:
                    # never trusted, never fatal: rebuilt from the store (which is the truth), and
                    # saved again by the next write that flushes
                    log.warning("index of namespace %r in %s failed verification (%s); rebuilt from the store",
                                namespace, self.directory(namespace), exc)
                    idx = self._build(namespace, chunks, seen, stored)
                    self._indexes[namespace] = idx
                    self._changed.add(namespace)
                    self._saved.pop(namespace, None)
                    return idx
                if idx is None:
                    (log.warning if self.warn_on_build else log.debug)(
                        "index of namespace %r: no usable snapshot in %s; built in memory for this process "
                        "(`lab store compact` saves one)", namespace, self.directory(namespace))
                    idx = self._build(namespace, chunks, seen, stored)
                else:
                    self._saved[namespace] = idx.store_version
                    if _pair(idx.store_version) != _pair(seen):
                        idx.sync(chunks, seen, stored)
                self._indexes[namespace] = idx
            elif self._behind(idx):  # another process wrote: only the chunks new to the index are read whole
                chunks, stored = self.store.chunks_table.visible_rows(namespace)
                idx.sync(chunks, str(self.store.known_version()), stored)
            return idx

    def _load(self, namespace: str, chunks: pl.DataFrame, stored: StoredRows) -> NamespaceIndex | None:
        """The namespace's saved index (see ``load_index``); a store at a URI's snapshot is fetched
        first when newer than this machine's copy, and once more when the copy fails verification
        (the copy was damaged here, or the URI's was replaced since)."""
        location = self.store.location
        if location is None:
            return load_index(self.directory(namespace), chunks, self.config, namespace, stored)
        shared = location.fetch(self._remote(namespace), self.directory(namespace))
        if not shared:
            self._unshared.add(namespace)
            if not self.store.read_only:
                self._changed.add(namespace)  # a writer's close uploads it
        try:
            return load_index(self.directory(namespace), chunks, self.config, namespace, stored)
        except IndexDamaged:
            if not shared or not location.fetch(self._remote(namespace), self.directory(namespace), again=True):
                raise
            return load_index(self.directory(namespace), chunks, self.config, namespace, stored)

    def _behind(self, idx: NamespaceIndex) -> bool:
        """The store's memories or chunks moved past the index's stamp (re-reads the log tails)."""
        stamp = StoreVersion.parse(idx.store_version)
        return stamp.memories != self.store.memories_version or stamp.chunks != self.store.chunks_version

    def advance(self, before: StoreVersion, after: StoreVersion) -> None:
        """Restamp loaded indexes that were current at ``before`` as current at ``after``: only for
        a writer, under the lock, after a write that did not change their namespaces' chunks."""
        with self._lock:
            for idx in self._indexes.values():
                stamp = StoreVersion.parse(idx.store_version)
                if (stamp.memories, stamp.chunks) == (before.memories, before.chunks):
                    idx.store_version = str(after)

    def catch_up(self) -> None:
        """Sync every loaded index with the store (a writer calls it under the lock, before committing)."""
        with self._lock:
            present = None
            for ns in list(self._indexes):
                if self._behind(self._indexes[ns]):
                    present = set(self.store.namespaces()) if present is None else present
                    if ns in present:
                        self.get(ns)
                    else:
                        self.forget(ns)  # deleted by another process

    def _build(self, namespace: str, chunks: pl.DataFrame | None = None, seen: str | None = None,
               stored: StoredRows | None = None) -> NamespaceIndex:
        """A fresh index of ``chunks`` (read now when not given), stamped with the versions they were read at."""
        if chunks is None:
            chunks, stored = self.store.chunks_table.visible_rows(namespace)
            seen = str(self.store.known_version())
        return NamespaceIndex.build(namespace, chunks, self.dim, self.config, self.embed_model, seen, stored)

    # ------------------------------------------------------------------ the write side's calls
    def build(self, namespace: str) -> NamespaceIndex:
        """Rebuild a namespace's index from the store (the lexical delta folded in); saved by ``save_changed``."""
        with self._lock:
            self.store.require_namespace(namespace)
            idx = self._build(namespace)
            self._indexes[namespace] = idx
            self._changed.add(namespace)
            self._saved.pop(namespace, None)  # a rebuild is always saved, even at an unchanged version
            return idx

    def apply(self, namespace: str, added: pl.DataFrame | None, removed: list[str], version: StoreVersion) -> None:
        """Fold a write into the namespace's index (loading it first if needed)."""
        with self._lock:
            idx = self._indexes.get(namespace)
            if idx is None:
                # loading syncs it to the store, which already holds this write
                self.get(namespace)
            else:
                idx.apply(added, removed, str(version))
                if idx.needs_merge():
                    idx.merge_in_background()
            self._changed.add(namespace)

    def keep_or_rebuild(self, namespace: str, max_dead_share: float) -> bool:
        """After a compaction: keep the namespace's index (caught up with the compacted tables, its
        lexical deltas folded in) unless ``max_dead_share`` or more of its chunk labels are dead
        (deleted or replaced chunks, which hnswlib only masks), or it came from no snapshot; then
        rebuild it. True when rebuilt. Compaction rewrites files, not rows, so a kept index still
        matches every live chunk; rebuilding the graph of a million chunks takes most of an hour."""
        with self._lock:
            idx = self.get(namespace)
            if namespace not in self._saved:  # built just now (no usable snapshot): save it as built
                self._changed.add(namespace)
                return True
            parts = [idx, *idx.views.values()]
            labels = sum(len(part.chunk_ids) for part in parts)
            dead = labels - sum(part.n_live for part in parts)
            if labels and dead / labels >= max_dead_share:
                self.build(namespace)
                return True
            idx.wait_for_merge()
            if idx.delta_size or any(v.delta_size for v in idx.views.values()):
                idx.merge()
                self._saved.pop(namespace, None)  # saved again, folded
            self._changed.add(namespace)
            return False

    def touch(self, namespace: str, version: StoreVersion) -> None:
        """A write changed memory rows but no chunks: the index reflects the new version as is."""
        with self._lock:
            idx = self._indexes.get(namespace)
            if idx is not None:
                idx.store_version = str(version)
            self._changed.add(namespace)

    def mark_written(self, namespace: str) -> None:
        """A write landed in a namespace whose index is not loaded: bring it up to date at save time."""
        with self._lock:
            self._changed.add(namespace)

    def forget_all(self) -> None:
        with self._lock:
            self._indexes.clear()
            self._saved.clear()
            self._changed.clear()
            self._unshared.clear()

    def forget(self, namespace: str) -> None:
        with self._lock:
            self._indexes.pop(namespace, None)
            self._saved.pop(namespace, None)
            self._changed.discard(namespace)
            self._unshared.discard(namespace)

    def save_changed(self) -> list[str]:
        """Persist every index a write or build changed (a read's in-memory syncs are not saved)."""
        if self.store.read_only:
            raise ConflictError(f"store {self.store.root} is opened read-only"
                                + (f" (pinned at {self.store.pin})" if self.store.pin else "") + ": indexes cannot be saved")
        saved = []
        with self._lock:
            present = set(self.store.namespaces())
            for ns in sorted(self._changed):
                if ns not in present:
                    continue  # deleted since
                idx = self.get(ns)
                idx.wait_for_merge()
                if idx.needs_merge():
                    idx.merge()  # a bulk write caught up here would otherwise save a delta of thousands
                if self._saved.get(ns) != idx.store_version or not self.directory(ns).is_dir() or ns in self._unshared:
                    save_index(idx, self.directory(ns))
                    if self.store.location is not None:  # beside the tables, for every machine
                        self.store.location.upload(self.directory(ns), self._remote(ns))
                        self._unshared.discard(ns)
                    self._saved[ns] = idx.store_version
                    saved.append(ns)
            self._changed.clear()
        return saved

    def wait(self) -> None:
        for idx in self.loaded().values():
            idx.wait_for_merge()
