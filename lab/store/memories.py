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
from lab.store.lookups import IdLookups
from lab.store.records import utcnow, validate_id
from lab.store.table import DeltaFrame, frame_marked, in_list

CHUNKS_VERSION_KEY = "lab.chunks_version"  # a memories commit's metadata: the chunks version it saw


WRITES_KEPT = 256  # our own last commits whose memory ids are remembered (``MemoriesTable.changed_since``)


@dataclass(frozen=True)
class RowsMark:
    """Where a reader of the memories and access log tables stood: each table's rows generation and
    row count (``lab.store.table.frame_marked``), and the memories table's version. While both
    generations stay, everything since is appended rows; across a rewrite of ours, the ids our
    commits wrote say what changed (``MemoriesTable.changed_since``)."""

    generation: int
    rows: int
    log_generation: int
    log_rows: int
    version: int = -1


@dataclass(frozen=True)
class Change:
    """What a namespace's memories gained since a mark: ``rows`` (accesses folded in) are the
    memories to put in their places, after the memories ``gone`` (ids) are taken out: a memory
    rewritten is in both, one deleted only in ``gone``. ``accessed``: the access log's new rows for
    memories not in ``rows``."""

    rows: pl.DataFrame
    gone: frozenset[str]
    accessed: pl.DataFrame
    mark: RowsMark


class WrittenIds:
    """Version -> the memory ids that commit of ours wrote (appended, replaced or deleted): a reader
    that saw the table before a rewrite of ours moves on by those ids alone, where a version missing
    here (another process's commit, a compaction) makes it read everything."""

    def __init__(self) -> None:
        self._by_version: dict[int, frozenset[str]] = {}

    def note(self, before: int, after: int, ids: Iterable[str]) -> None:
        """Our commit moved the table from version ``before`` to ``after``, writing ``ids``. A commit
        that changed nothing leaves the version where it was (nothing to note); versions between
        are other processes' and stay unknown."""
        if after > before:
            self._by_version[after] = frozenset(ids)
            if len(self._by_version) > WRITES_KEPT:
                del self._by_version[min(self._by_version)]

    def between(self, since: int, now: int) -> frozenset[str] | None:
        """The ids written by the commits after version ``since`` up to ``now``; None when one of
        them is not ours (or too old to be remembered)."""
        written = [self._by_version.get(v) for v in range(since + 1, now + 1)]
        if since < 0 or any(ids is None for ids in written):
            return None
        return frozenset().union(*written)


class MemoriesTable:
    """Memory rows, one per id. Every commit names the chunks version it saw (``chunks_version``,
    the chunks table's version as of our last read or write), since chunks are committed first."""

    def __init__(self, delta: DeltaFrame, access: AccessLog, chunks_version: Callable[[], int]) -> None:
        self.delta = delta
        self.access = access
        self._chunks_version = chunks_version
        # id set and (namespace, content_hash) -> id, for duplicate checks on every save; kept
        # up to date across our own commits, rebuilt after anyone else's (lab.store.lookups)
        self.lookups = IdLookups()
        # hashes of both columns, followed by appends: a save of new memories (the usual one) is
        # answered "not stored" from them, without the id set and index above, which a million
        # memories took two seconds to build on a process's first save and after every rewrite
        self._id_hashes = ColumnHashes(delta, "id")
        self._content_hashes = ColumnHashes(delta, "content_hash")
        self.written = WrittenIds()

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
        stored, generation, version = frame_marked(self.delta)
        log, log_generation, _ = frame_marked(self.access.delta)
        frame = self.access.fold(stored.filter(pl.col("namespace") == namespace), log)
        return frame, RowsMark(generation, stored.height, log_generation, log.height, version)

    def changed_since(self, mark: RowsMark, namespace: str, at_most: int) -> Change | None:
        """What the tables gained in ``namespace`` since ``mark``: rows appended, or rewritten and
        deleted by our own commits (at most ``at_most`` ids of them). None when anything else
        changed (another process's rewrite, a compaction, the access log rewritten, more ids than
        ``at_most``): the caller reads ``live`` again."""
        stored, generation, version = frame_marked(self.delta)
        log, log_generation, _ = frame_marked(self.access.delta)
        if log_generation != mark.log_generation or log.height < mark.log_rows:
            return None
        in_namespace = pl.col("namespace") == namespace
        if generation == mark.generation and stored.height >= mark.rows:  # appends only
            gone: frozenset[str] = frozenset()
            added = stored.slice(mark.rows).filter(in_namespace)
        else:  # rewritten since: by our commits alone, each of which says which ids it wrote
            gone = self.written.between(mark.version, version)
            if gone is None or len(gone) > at_most:
                return None
            added = stored.filter(in_namespace & pl.col("id").is_in(sorted(gone))) if gone else stored.clear()
        if added.height > at_most:
            return None
        if added.height:  # accesses logged for them, if any (the log's rows of these ids alone)
            added = self.access.fold(added, log.filter(pl.col("memory_id").is_in(added["id"].to_list())))
        accessed = log.slice(mark.log_rows).filter(in_namespace)
        if added.height and accessed.height:  # already folded into the rows above
            accessed = accessed.filter(~pl.col("memory_id").is_in(added["id"].to_list()))
        return Change(added, gone, accessed, RowsMark(generation, stored.height, log_generation, log.height, version))

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

    def has_ids(self, ids: Iterable[str]) -> set[str]:
        ids = list(ids)
        if not self._id_hashes.may_hold(ids):
            return set()
        return self.lookups.has(ids, self.stored, self.delta.version)

    def follow_keys(self) -> None:
        """Bring the id and content hashes up to the table (what a save looks in first)."""
        self._id_hashes.follow()
        self._content_hashes.follow()

    def may_hold_contents(self, digests: list[str]) -> bool:
        """Whether any of these content hashes may be stored (False: certainly none is)."""
        return self._content_hashes.may_hold(digests)

    def find_by_hash(self, namespace: str, digest: str) -> str | None:
        """The id of the memory with this content in this namespace, if any (idempotent ingest)."""
        if not self._content_hashes.may_hold([digest]):  # the digest covers the namespace too
            return None
        return self.lookups.find(namespace, digest, self.stored, self.delta.version)

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
        known = self.delta.known_version
        after = self.delta.append(pa.Table.from_pylist(rows, schema=MEMORIES), self._commit_meta())
        self.written.note(known, after, (r["id"] for r in rows))
        self.lookups.appended(rows, known, after)
        return after

    def _before_rewrite(self) -> int:
        self._id_hashes.before_rewrite()
        self._content_hashes.before_rewrite()
        return self.delta.known_version

    def upsert(self, rows: list[dict[str, Any]]) -> int:
        """Replace memory rows by id in one commit; returns the new version."""
        known = self._before_rewrite()
        after = self.delta.upsert(pa.Table.from_pylist(rows, schema=MEMORIES), "id", self._commit_meta())
        self.written.note(known, after, (r["id"] for r in rows))
        self.lookups.rewritten(rows, known, after)
        self._id_hashes.rewritten([r["id"] for r in rows], known, after)
        self._content_hashes.rewritten([r["content_hash"] for r in rows], known, after)
        return after

    def delete_ids(self, ids: Sequence[str]) -> int:
        """Delete these memories' rows in one commit; returns the new version."""
        known = self._before_rewrite()
        after = self.delta.delete(in_list("id", list(ids)), self._commit_meta())
        self.written.note(known, after, ids)
        self.lookups.deleted(ids, known, after)
        self._id_hashes.rewritten([], known, after)
        self._content_hashes.rewritten([], known, after)
        return after

    def invalidate(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Soft delete: mark memories invalid in one commit (kept, hidden from valid-only search);
        returns the rows as written."""
        rows = self.stored().filter(pl.col("id").is_in(list(ids))).with_columns(
            pl.lit(False).alias("valid"), pl.lit(utcnow()).cast(pl.Datetime("us", "UTC")).alias("updated_at")
        ).to_dicts()
        if rows:
            self.upsert(rows)
        return rows
