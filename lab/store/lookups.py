"""The memories table's id set and content index, kept up to date across our own commits.

Every save asks whether its ids or contents are stored already. Built from the table's rows, the id
set and the (namespace, content_hash) -> id index take time that grows with the table;
rebuilt after every update or delete, that was half of each one's cost. So our own commits change
them in place when nobody else committed in between (the table moved exactly one version): an
append adds its rows; a rewrite (upsert) adds the rows it wrote; a delete takes its ids out. A
rewrite or a delete leaves the content index naming a memory whose content may have changed or that
is gone: those ids are marked *stale*, and a content lookup that lands on one reads that memory's
row to confirm it (or builds the index again when the row says otherwise). Anyone else's commit
builds both again on the next lookup. Until they are first needed for many ids at once (a bulk
save), a question about a few ids or one content is answered by a scan of the stored columns.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import polars as pl

# ids asked about at once that are answered by a scan of the id column when the lookups are not
# current, rather than by building them (a pass over every row, for one update)
SCAN_AT_MOST = 64


class IdLookups:
    """The id set and the (namespace, content_hash) -> id index of a memories table at ``version``."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.by_content: dict[tuple[str, str], str] = {}
        self.version = -1
        self.stale: set[str] = set()  # ids the content index may name wrongly (rewritten or deleted since the build)
        self.builds = 0  # times built from every row (tests hold rewrites of ours to none)

    def build(self, frame: pl.DataFrame, version: int) -> None:
        ids = frame["id"].to_list()
        self.ids = set(ids)
        self.by_content = dict(zip(zip(frame["namespace"].to_list(), frame["content_hash"].to_list()), ids))
        self.version, self.stale = version, set()
        self.builds += 1

    def current(self, version: int) -> bool:
        return self.version == version

    def _follows(self, before: int, after: int) -> bool:
        """Did our commit move the table from the version these lookups hold to the very next one?"""
        if self.version >= 0 and before == self.version and after == before + 1:
            return True
        if after == before == self.version:
            return False  # the commit changed nothing (a delete that matched no row): still right
        self.version = -1  # someone else committed in between (or nothing was built): build again
        return False

    def appended(self, rows: list[dict[str, Any]], before: int, after: int) -> None:
        """Our commit ``before`` -> ``after`` added ``rows`` (new ids)."""
        if self._follows(before, after):
            self.ids.update(r["id"] for r in rows)
            self.by_content.update({(r["namespace"], r["content_hash"]): r["id"] for r in rows})
            self.version = after

    def rewritten(self, rows: list[dict[str, Any]], before: int, after: int) -> None:
        """Our commit ``before`` -> ``after`` wrote ``rows`` by id, replacing those stored."""
        if self._follows(before, after):
            self.ids.update(r["id"] for r in rows)
            self.stale.update(r["id"] for r in rows)  # their old contents may still point at them
            self.by_content.update({(r["namespace"], r["content_hash"]): r["id"] for r in rows})
            self.version = after

    def deleted(self, ids: Iterable[str], before: int, after: int) -> None:
        """Our commit ``before`` -> ``after`` deleted the rows of ``ids``."""
        if self._follows(before, after):
            ids = list(ids)
            self.ids.difference_update(ids)
            self.stale.update(ids)
            self.version = after

    def has(self, ids: list[str], stored: Callable[[], pl.DataFrame], version: int) -> set[str]:
        """Which of ``ids`` are stored in ``stored()`` (the table at ``version``)."""
        if not self.current(version) and len(ids) <= SCAN_AT_MOST:
            return set(stored().filter(pl.col("id").is_in(ids))["id"].to_list())
        if not self.current(version):
            self.build(stored(), version)
        return {i for i in ids if i in self.ids}

    def find(self, namespace: str, digest: str, stored: Callable[[], pl.DataFrame], version: int) -> str | None:
        """The id stored with this content, or None. An entry for a stale id is confirmed from that
        memory's row in ``stored()`` (the table at ``version``); one proven wrong builds the lookups again."""
        key = (namespace, digest)
        if not self.current(version):  # one content: a scan of two columns, not a build of the whole index
            found = stored().filter((pl.col("content_hash") == digest) & (pl.col("namespace") == namespace))["id"]
            return found[-1] if len(found) else None  # the last row, as the index built from every row says
        found = self.by_content.get(key)
        if found is None or found not in self.stale:
            return found
        rows = stored().filter(pl.col("id") == found)
        if rows.height and (rows["namespace"][0], rows["content_hash"][0]) == key:
            return found
        self.build(stored(), version)
        return self.by_content.get(key)
