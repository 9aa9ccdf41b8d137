"""The memories table: current memories (accesses folded in), lookups by id and content, and its commits."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Iterable, Sequence

import polars as pl
import pyarrow as pa

from lab.errors import NotFoundError, ValidationError
from lab.schema import MEMORIES, MEMORY_TYPES
from lab.store.access import AccessLog
from lab.store.keys import ColumnHashes
from lab.store.records import utcnow, validate_id
from lab.store.table import DeltaFrame, frame_marked

CHUNKS_VERSION_KEY = "lab.chunks_version"  # a memories commit's metadata: the chunks version it saw


@dataclass(frozen=True)
class RowsMark:
    """Where a reader of the memories and access log tables stood: each table's rows generation and
    row count (``lab.store.table.frame_marked``). While both generations stay, everything since is
    appended rows (``MemoriesTable.appended_since``)."""

    generation: int
    rows: int
    log_generation: int
    log_rows: int


class MemoriesTable:
    """Memory rows, one per id. Every commit names the chunks version it saw (``chunks_version``,
    the chunks table's version as of our last read or write), since chunks are committed first."""

    def __init__(self, delta: DeltaFrame, access: AccessLog, chunks_version: Callable[[], int]) -> None:
        self.delta = delta
        self.access = access
        self._chunks_version = chunks_version
        # id set and (namespace, content_hash) -> id, for duplicate checks on every save; kept
        # up to date incrementally across our own inserts, rebuilt after anyone else's write
        self._ids: set[str] = set()
        self._hash_index: dict[tuple[str, str], str] = {}
        self._lookup_version = -1
        # hashes of both columns, followed by appends: a save of new memories (the usual one) is
        # answered "not stored" from them, without the id set and index above, which a million
        # memories took two seconds to build on a process's first save and after every rewrite
        self._id_hashes = ColumnHashes(delta, "id")
        self._content_hashes = ColumnHashes(delta, "content_hash")

    # ----------------------------------------------------------------- reads
    def stored(self) -> pl.DataFrame:
        """Memories as stored (the access log not folded in)."""
        return self.delta.frame()

    def live(self, namespace: str | None = None) -> pl.DataFrame:
        """Current memories, with accesses from the access log folded into access_count/accessed_at."""
        frame = self.stored()
        if namespace is not None:
            frame = frame.filter(pl.col("namespace") == namespace)
        return self.access.fold(frame)

    def live_marked(self, namespace: str) -> tuple[pl.DataFrame, RowsMark]:
        """``live(namespace)`` and where the tables stood when it was read."""
        stored, generation = frame_marked(self.delta)
        log, log_generation = frame_marked(self.access.delta)
        frame = self.access.fold(stored.filter(pl.col("namespace") == namespace), log)
        return frame, RowsMark(generation, stored.height, log_generation, log.height)

    def appended_since(self, mark: RowsMark, namespace: str) -> tuple[pl.DataFrame, pl.DataFrame, RowsMark] | None:
        """What the tables gained in ``namespace`` since ``mark``: the memories appended (accesses
        folded in, as ``live`` has them), the access log's new rows, and the mark now. None when
        anything else changed (a row rewritten, a compaction): the caller reads ``live`` again."""
        stored, generation = frame_marked(self.delta)
        log, log_generation = frame_marked(self.access.delta)
        if (generation, log_generation) != (mark.generation, mark.log_generation) \
                or stored.height < mark.rows or log.height < mark.log_rows:
            return None
        added = stored.slice(mark.rows).filter(pl.col("namespace") == namespace)
        if added.height:  # accesses logged for them, if any (the log's rows of these ids alone)
            added = self.access.fold(added, log.filter(pl.col("memory_id").is_in(added["id"].to_list())))
        accessed = log.slice(mark.log_rows).filter(pl.col("namespace") == namespace)
        return added, accessed, RowsMark(generation, stored.height, log_generation, log.height)

    def get(self, memory_id: str) -> dict[str, Any]:
        validate_id(memory_id)
        rows = self.live().filter(pl.col("id") == memory_id)
        if rows.height == 0:
            raise NotFoundError(f"no memory with id {memory_id!r}")
        return rows.row(0, named=True)

    def get_many(self, ids: Sequence[str]) -> pl.DataFrame:
        return self.live().filter(pl.col("id").is_in(list(ids)))

    def rows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Memories as stored (the access log not folded in): rows to write back unchanged."""
        return self.stored().filter(pl.col("id").is_in(list(ids))).to_dicts()

    def stored_access_count(self, memory_id: str) -> int:
        """The access count in the memory's own row, without the log's accesses folded in."""
        rows = self.stored().filter(pl.col("id") == memory_id)
        if rows.height == 0:
            raise NotFoundError(f"no memory with id {memory_id!r}")
        return int(rows["access_count"][0])

    def namespace_of(self) -> dict[str, str]:
        """Each stored memory's namespace, by id."""
        mem = self.stored().select("id", "namespace")
        return dict(zip(mem["id"].to_list(), mem["namespace"].to_list()))

    def _lookups(self) -> None:
        version = self.delta.version
        if self._lookup_version != version:
            frame = self.stored()
            ids = frame["id"].to_list()
            self._ids = set(ids)
            self._hash_index = dict(zip(zip(frame["namespace"].to_list(), frame["content_hash"].to_list()), ids))
            self._lookup_version = version

    def has_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        if not self._id_hashes.may_hold(ids):
            return set()
        self._lookups()
        return {i for i in ids if i in self._ids}

    def may_hold_contents(self, digests: list[str]) -> bool:
        """Whether any of these content hashes may be stored (False: certainly none is)."""
        return self._content_hashes.may_hold(digests)

    def find_by_hash(self, namespace: str, digest: str) -> str | None:
        """The id of the memory with this content in this namespace, if any (idempotent ingest)."""
        if not self._content_hashes.may_hold([digest]):  # the digest covers the namespace too
            return None
        self._lookups()
        return self._hash_index.get((namespace, digest))

    def list(
        self,
        namespace: str | None = None,
        *,
        types: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        valid: bool | None = None,
        offset: int = 0,
        limit: int = 50,
        after: tuple[datetime, str] | None = None,
    ) -> pl.DataFrame:
        """Memories matching every given filter, newest first, ties on id; paginated by offset or
        by ``after`` (the (created_at, id) of the last row already seen: a cursor that stays right
        while memories are added)."""
        if offset < 0 or limit < 0:
            raise ValidationError(f"offset and limit must be >= 0, got offset={offset}, limit={limit}")
        frame = self.live(namespace)
        if types:
            bad = sorted(set(types) - set(MEMORY_TYPES))
            if bad:
                raise ValidationError(f"unknown memory type(s) {bad}; known: {list(MEMORY_TYPES)}")
            frame = frame.filter(pl.col("type").is_in(list(types)))
        if tags:
            frame = frame.filter(pl.col("tags").list.set_intersection(list(tags)).list.len() > 0)
        if since is not None:
            frame = frame.filter(pl.col("created_at") >= since)
        if until is not None:
            frame = frame.filter(pl.col("created_at") < until)
        if valid is not None:
            frame = frame.filter(pl.col("valid") == valid)
        if after is not None:
            at, last = after
            frame = frame.filter((pl.col("created_at") < at) | ((pl.col("created_at") == at) & (pl.col("id") > last)))
        frame = frame.sort(["created_at", "id"], descending=[True, False])
        return frame.slice(offset, limit)

    # ----------------------------------------------------------------- commits
    def _commit_meta(self) -> dict[str, Any]:
        return {CHUNKS_VERSION_KEY: self._chunks_version()}

    def append(self, rows: list[dict[str, Any]]) -> int:
        """Add new memory rows in one commit; returns the new version."""
        before = self._lookup_version
        after = self.delta.append(pa.Table.from_pylist(rows, schema=MEMORIES), self._commit_meta())
        if after == before + 1:  # nobody else wrote in between: extend the lookups in place
            self._ids.update(r["id"] for r in rows)
            self._hash_index.update({(r["namespace"], r["content_hash"]): r["id"] for r in rows})
            self._lookup_version = after
        return after

    def upsert(self, rows: list[dict[str, Any]]) -> int:
        """Replace memory rows by id in one MERGE commit; returns the new version."""
        return self.delta.upsert(pa.Table.from_pylist(rows, schema=MEMORIES), "id", self._commit_meta())

    def delete(self, predicate: str) -> int:
        """Delete the rows matching a SQL predicate in one commit; returns the new version."""
        return self.delta.delete(predicate, self._commit_meta())

    def invalidate(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Soft delete: mark memories invalid in one commit (kept, hidden from valid-only search);
        returns the rows as written."""
        rows = self.stored().filter(pl.col("id").is_in(list(ids))).with_columns(
            pl.lit(False).alias("valid"), pl.lit(utcnow()).cast(pl.Datetime("us", "UTC")).alias("updated_at")
        ).to_dicts()
        if rows:
            self.upsert(rows)
        return rows
