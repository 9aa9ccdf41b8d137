"""One namespace's indexes: its main view's and those of its extra views (``ChunkConfig.views``), each a
``ViewIndex``; snapshots on disk are `lab.index.snapshot`'s."""
from __future__ import annotations

import polars as pl

from lab.config import IndexConfig
from lab.index.view_index import ViewIndex, build_view
from lab.store.records import CHUNK_VIEW_PATTERN, chunk_view
from lab.store.table import StoredRows


def split_views(chunks: pl.DataFrame) -> dict[str, pl.DataFrame]:
    """A chunks table by index view ("" is the main view, always present, maybe empty)."""
    if chunks.height == 0:
        return {"": chunks}
    view = chunks["chunk_id"].str.extract(CHUNK_VIEW_PATTERN, 1).fill_null("")
    names = sorted(set(view.unique().to_list()) | {""})
    return {v: chunks.filter(view == v) for v in names}


def _by_view(chunk_ids: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cid in chunk_ids:
        out.setdefault(chunk_view(cid), []).append(cid)
    return out


class NamespaceIndex(ViewIndex):
    """The index of a namespace's main view, with a child ``ViewIndex`` per extra view in ``views``.

    Chunks of an extra index view (``ChunkConfig.views``; the view is in the chunk id) go to that
    view's index, built, updated, merged, saved and loaded with this one; searches of the main view
    are this index's own (``ViewIndex``)."""

    def __init__(self, namespace: str, dim: int, config: IndexConfig, embed_model: str) -> None:
        super().__init__(namespace, dim, config, embed_model)
        self.views: dict[str, ViewIndex] = {}

    @classmethod
    def build(
        cls, namespace: str, chunks: pl.DataFrame, dim: int, config: IndexConfig, embed_model: str,
        store_version: str, stored: StoredRows | None = None,
    ) -> "NamespaceIndex":
        """The index of a namespace's chunks (every view's), stamped with ``store_version``
        (``stored``: where their vectors are, for a frame without them: ``write_vectors``)."""
        parts = split_views(chunks)
        idx = cls(namespace, dim, config, embed_model)
        idx._fill(parts.pop(""), store_version, stored)
        for view, part in parts.items():
            idx.views[view] = build_view(namespace, part, dim, config, embed_model, store_version, view, stored)
        return idx

    def apply(self, added: pl.DataFrame | None, removed: list[str], store_version: str) -> None:
        """Fold a store change in: new chunks into the vector index and lexical delta, removals masked
        (each view's chunks into its own index)."""
        with self._lock:
            parts = split_views(added) if added is not None else {}
            gone = _by_view(removed)
            for view in sorted((set(parts) | set(gone) | set(self.views)) - {""}):
                child = self.views.get(view)
                if child is None:
                    if view not in parts:
                        continue  # nothing of this view was ever indexed
                    child = build_view(self.namespace, parts[view].clear(), self.dim, self.config,
                                       self.embed_model, store_version, view)
                    self.views[view] = child
                child.apply(parts.get(view), gone.get(view, []), store_version)
            self._fold_in(parts.get("", added), gone.get("", []), store_version)

    def sync(self, chunks: pl.DataFrame, store_version: str, stored: StoredRows | None = None) -> tuple[int, int]:
        """Bring the index (and its views') to the store's visible chunks; returns the main view's
        (added, removed)."""
        with self._lock:
            parts = split_views(chunks)
            for view in sorted((set(parts) | set(self.views)) - {""}):
                if view not in self.views:
                    self.views[view] = build_view(self.namespace, parts[view].clear(), self.dim, self.config,
                                                  self.embed_model, store_version, view)
                self.views[view].sync(parts.get(view, chunks.clear()), store_version, stored)
            return super().sync(parts[""], store_version, stored)

    def chunk_owners(self) -> list[tuple[str, str]]:
        """(chunk id, memory id) of every label of this index and its views, live or not."""
        with self._lock:
            out = super().chunk_owners()
            for view in sorted(self.views):
                out.extend(self.views[view].chunk_owners())
            return out

    def needs_merge(self) -> bool:
        return super().needs_merge() or any(v.needs_merge() for v in self.views.values())

    def merge(self) -> None:
        """Rebuild the lexical main index over every live chunk (of every view); the deltas become empty."""
        for view in sorted(self.views):
            self.views[view].merge()
        super().merge()
