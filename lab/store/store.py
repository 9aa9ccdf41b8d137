"""The Parquet-backed (Delta Lake) memory store: namespaces, memories, chunks, edges, access log."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Sequence

import polars as pl
import pyarrow as pa

from lab.version import __version__
from lab.config import SaveConfig, from_dict
from lab.errors import ConflictError, NotFoundError, StoreError, ValidationError
from lab.schema import ACCESS_LOG, EDGES, MEMORIES, MEMORY_TYPES, NAMESPACES, EDGE_RELATIONS, chunks_schema
from lab.store.records import namespace_folder, validate_id, validate_namespace
from lab.store.delta_log import LogDamage, commit_files, log_damage, recover_torn_commit
from lab.store.table import DeltaFrame, in_list
from lab.workspace import current

STORE_FORMAT = 1
INFO_FILE = "lab-store.json"
WRITE_LOCK = ".lab-write.lock"
CHUNKS_VERSION_KEY = "lab.chunks_version"


@dataclass(frozen=True)
class StoreVersion:
    """The versions of the store's tables; a memories commit names the chunks version it saw."""

    memories: int
    chunks: int
    edges: int
    access: int

    def __str__(self) -> str:
        return f"{self.memories}.{self.chunks}.{self.edges}.{self.access}"

    @classmethod
    def parse(cls, text: str) -> "StoreVersion":
        parts = str(text).split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise ValidationError(
                f"store version {text!r} must look like M.C.E.A (four integers, as `lab stats` prints)"
            )
        return cls(*(int(p) for p in parts))


@dataclass(frozen=True)
class StoreInfo:
    """What a store was created with; an embedder that does not match is refused on open."""

    format: int
    created_at: str
    lab_version: str
    embed_model: str
    dim: int
    save_config: dict[str, Any]


def _interrupted_create(root: Path) -> bool:
    """A folder left by a killed ``Store.create``: the info file's temporary copy, perhaps the
    empty tables it was making, and nothing else."""
    if not (root / (INFO_FILE + ".tmp")).is_file() or (root / INFO_FILE).exists():
        return False
    if not {p.name for p in root.iterdir()} <= {INFO_FILE + ".tmp", "tables", "indexes", "cache", WRITE_LOCK}:
        return False
    # and its tables, if any, hold only their creating commit: no data to lose
    for log_dir in (root / "tables").glob("*/_delta_log"):
        if any(p.name != "00000000000000000000.json" for p in log_dir.glob("*.json")):
            return False
    return True


PINNED_TABLES = ("memories", "chunks", "edges", "access_log")  # a StoreVersion's tables, in its order


def log_damages(root: str | Path) -> list[tuple[LogDamage, str]]:
    """Each table whose latest version cannot be read for a torn commit file, with one line saying
    what is wrong and what to do: repair (a torn newest commit), or restore from a backup, the
    store still opening pinned at the versions before the tear when the table is one a pin fixes."""
    root = Path(root)
    tables = {p.name: p for p in sorted((root / "tables").glob("*")) if p.is_dir()}
    found = {name: damage for name, path in tables.items() if (damage := log_damage(path)) is not None}
    out = []
    for name, damage in found.items():
        opener = None
        if all(t in tables for t in PINNED_TABLES) and set(found) <= set(PINNED_TABLES):
            # every damaged table at the version before its tear, the others at their newest
            versions = [found[t].version - 1 if t in found else _newest_version(tables[t]) for t in PINNED_TABLES]
            if min(versions) >= 0:
                opener = f"lab.open_retriever({str(root)!r}, pin={str(StoreVersion(*versions))!r})"
        out.append((damage, damage.describe(opener)))
    return out


def _newest_version(table: Path) -> int:
    commits = commit_files(table)
    return int(commits[-1].name.split(".")[0]) if commits else -1


def recover_torn_commits(root: str | Path, timeout: float = 600.0) -> list[str]:
    """Take a torn newest commit file out of each table's log (``lab store repair``, before the
    store can be opened at all); returns ``table/file`` for each one moved aside.

    A torn commit that later ones build on is refused (a StoreError naming the file and what to do),
    before anything is moved: dropping it would lose acknowledged commits."""
    from filelock import FileLock, Timeout

    root = Path(root)
    if not (root / INFO_FILE).is_file():
        raise NotFoundError(f"no lab store at {root} (create one with `lab init --store {root}`)")
    try:
        with FileLock(str(root / WRITE_LOCK), timeout=timeout):
            for damage, said in log_damages(root):
                if not damage.repairable:
                    raise StoreError(f"table {damage.table}: {said}")
            moved = []
            for table in sorted(p for p in (root / "tables").glob("*") if p.is_dir()):
                name = recover_torn_commit(table)
                if name is not None:
                    moved.append(f"{table.name}/{name}")
            return moved
    except Timeout:
        raise ConflictError(f"store {root} is busy: another writer held its lock for over {timeout:g} s") from None


class _Held:
    """``with store.write_lock():`` acquires with a bounded wait, and says which store was busy.

    While the lock is held no other process can commit, so each table's log is read once on
    entry and its version is then known without re-reading the log on every check."""

    def __init__(self, store: "Store", timeout: float) -> None:
        self.store, self.timeout = store, timeout

    def __enter__(self) -> None:
        from filelock import Timeout

        lock = self.store._lock
        try:
            lock.acquire(timeout=self.timeout, poll_interval=0.002)  # short polls: waiters get their turn
        except Timeout:
            raise ConflictError(f"store {self.store.root} is busy: another writer held its lock for over "
                                f"{self.timeout:g} s (set LAB_WRITE_LOCK_TIMEOUT to wait longer)") from None
        if lock.lock_counter == 1:  # the outermost hold in this thread
            try:
                for table in self.store.tables().values():
                    table.hold()
            except BaseException:  # a damaged log: never keep the lock (or a table held) behind
                for table in self.store.tables().values():
                    table.unhold()
                lock.release()
                raise

    def __exit__(self, *exc: Any) -> None:
        lock = self.store._lock
        if lock.lock_counter == 1:
            for table in self.store.tables().values():
                table.unhold()
        lock.release()


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    """Tables of one store folder. Reads are consistent per table version; writes are commits.

    Write order keeps multi-table changes safe without a multi-table transaction: chunks are
    committed first and only become visible when the memories commit naming their content hash
    lands. A process killed in between leaves invisible chunks, never a half-saved memory.
    """

    def __init__(self, root: Path, info: StoreInfo, pin: StoreVersion | None = None, *, create_tables: bool = True) -> None:
        self.root = root
        self.info = info
        self.pin = pin
        tables = root / "tables"
        make = create_tables and pin is None
        self._read_only = pin is not None or not create_tables
        self._memories = DeltaFrame(tables / "memories", MEMORIES, version=pin and pin.memories, create=make, read_only=not create_tables)
        self._chunks = DeltaFrame(
            tables / "chunks", chunks_schema(info.dim), version=pin and pin.chunks, create=make,
            read_only=not create_tables,
        )
        self._edges = DeltaFrame(tables / "edges", EDGES, version=pin and pin.edges, create=make, read_only=not create_tables)
        self._access = DeltaFrame(tables / "access_log", ACCESS_LOG, version=pin and pin.access, create=make, read_only=not create_tables)
        self._namespaces = DeltaFrame(tables / "namespaces", NAMESPACES, create=make, read_only=not create_tables)
        # id set and (namespace, content_hash) -> id, for duplicate checks on every save; kept
        # up to date incrementally across our own inserts, rebuilt after anyone else's write
        self._ids: set[str] = set()
        self._hash_index: dict[tuple[str, str], str] = {}
        self._lookup_version = -1
        self._lock = None  # the writer lock, made on first write

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, root: str | Path, *, embed_model: str, dim: int, save_config: dict[str, Any]) -> "Store":
        root = Path(root)
        if (root / INFO_FILE).exists():
            raise ConflictError(f"a store exists already at {root}")
        if _interrupted_create(root):
            # the info file is written last: its temporary copy without it is a create that was
            # killed half-way, which holds nothing anyone saved; start it over
            import logging

            logging.getLogger(__name__).warning("%s holds an interrupted store creation; starting it over", root)
            for child in root.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        if root.exists() and any(root.iterdir()):
            raise ConflictError(f"{root} is not empty and holds no lab store; choose an empty folder")
        root.mkdir(parents=True, exist_ok=True)
        info = StoreInfo(
            format=STORE_FORMAT,
            created_at=utcnow().isoformat(),
            lab_version=__version__,
            embed_model=embed_model,
            dim=dim,
            save_config=save_config,
        )
        tmp = root / (INFO_FILE + ".tmp")
        tmp.write_text(json.dumps(info.__dict__, indent=2, sort_keys=True), encoding="utf-8")
        store = cls(root, info)
        tmp.replace(root / INFO_FILE)  # the store exists once its tables and info are in place
        return store

    @classmethod
    def open(cls, root: str | Path, *, pin: StoreVersion | str | None = None, read_only: bool = False) -> "Store":
        """Open a store folder, at its latest version or pinned at ``pin`` (then read-only).

        ``read_only`` opens the latest version for reading: a missing table is an error instead
        of being created, so opening writes nothing."""
        root = Path(root)
        info_path = root / INFO_FILE
        if not info_path.is_file():
            raise NotFoundError(f"no lab store at {root} (create one with `lab init --store {root}`)")
        try:
            info = StoreInfo(**json.loads(info_path.read_text(encoding="utf-8")))
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{info_path} is unreadable: {exc}") from exc
        if info.format != STORE_FORMAT:
            raise StoreError(f"store format {info.format} is not supported (expected {STORE_FORMAT})")
        if isinstance(pin, str):
            pin = StoreVersion.parse(pin)
        return cls(root, info, pin, create_tables=not read_only)

    def record_index_config(self, index: dict[str, Any]) -> None:
        """Record new index parameters (a writer changed them), so readers load the snapshots built
        with them instead of rebuilding. Written to a temporary file, then swapped in."""
        if self.read_only:
            raise ConflictError(f"store {self.root} is opened read-only: its index configuration cannot change")
        data = dict(self.info.__dict__)
        data["save_config"] = {**self.info.save_config, "index": index}
        tmp = self.root / (INFO_FILE + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True), encoding="utf-8")
        tmp.replace(self.root / INFO_FILE)
        self.info = StoreInfo(**data)

    def recorded_config(self) -> SaveConfig:
        """The save configuration the store was created with (chunking, embedding, indexes)."""
        recorded = dict(self.info.save_config)
        # stores made before context_turns existed were indexed without context: keep them so
        # and so were they without extra index views
        recorded["chunk"] = {"context_turns": 0, "views": [], **recorded.get("chunk", {})}
        return from_dict(SaveConfig, recorded, where=f"{self.root / INFO_FILE} save_config")

    def write_lock(self, timeout: float | None = None):
        """The store's writer lock: an OS file lock, so writers in different processes (a server,
        a notebook, the CLI) take turns. Re-entrant in one thread; readers never take it.

        ``timeout`` (seconds; default the workspace's ``write_lock_timeout``, 600) bounds the wait: a
        writer stuck behind another for longer gets a ConflictError instead of hanging."""
        from filelock import FileLock

        if self._lock is None:
            self._lock = FileLock(str(self.root / WRITE_LOCK))
        wait = current().write_lock_timeout if timeout is None else timeout
        return _Held(self, wait)

    def follow_other_writers(self, every_seconds: float) -> None:
        """Look for other processes' commits at most every ``every_seconds`` instead of on every
        read (a server: its own writes are seen at once, another process's within that time;
        each look costs a listing of the log per table)."""
        for table in self.tables().values():
            table.refresh_seconds = every_seconds

    def tables(self) -> dict[str, DeltaFrame]:
        """The store's tables by name (for checking and repair)."""
        return {"memories": self._memories, "chunks": self._chunks, "edges": self._edges,
                "access_log": self._access, "namespaces": self._namespaces}

    @property
    def read_only(self) -> bool:
        """Pinned at a version, or opened for reading: every write is refused."""
        return self._read_only

    def version(self) -> StoreVersion:
        return StoreVersion(
            self._memories.version, self._chunks.version, self._edges.version, self._access.version
        )

    def known_version(self) -> StoreVersion:
        """The version after our last read or write, without checking for other writers."""
        return StoreVersion(
            self._memories.known_version, self._chunks.known_version,
            self._edges.known_version, self._access.known_version,
        )

    @property
    def memories_version(self) -> int:
        return self._memories.version

    @property
    def chunks_version(self) -> int:
        return self._chunks.version

    @property
    def edges_version(self) -> int:
        return self._edges.version

    @property
    def access_version(self) -> int:
        return self._access.version

    # ----------------------------------------------------------------- namespaces
    def namespaces(self) -> list[str]:
        return sorted(self._namespaces.frame()["name"].to_list())

    def require_namespace(self, name: str) -> str:
        validate_namespace(name)
        known = self.namespaces()
        if name not in known:
            raise NotFoundError(f"unknown namespace {name!r}; known: {known}")
        return name

    def create_namespace(self, name: str, description: str = "", *, exist_ok: bool = False) -> bool:
        """Create a namespace; returns False if it existed (and exist_ok)."""
        validate_namespace(name)
        if name in self.namespaces():
            if exist_ok:
                return False
            raise ConflictError(f"namespace {name!r} exists already")
        row = pa.table({"name": [name], "created_at": [utcnow()], "description": [description]})
        self._namespaces.append(row.cast(NAMESPACES))
        return True

    def delete_namespace(self, name: str) -> dict[str, int]:
        """Hard-delete a namespace and everything in it; memories first, so a crash hides the rest."""
        self.require_namespace(name)
        counts = {"memories": self.memories(name).height}
        pred = f"namespace = '{name}'"
        self._memories.delete(pred)
        self._edges.delete(pred)
        self._chunks.delete(pred)
        self._access.delete(pred)
        self._namespaces.delete(f"name = '{name}'")
        shutil.rmtree(self.root / "indexes" / namespace_folder(name), ignore_errors=True)
        return counts

    # ----------------------------------------------------------------- memories
    def _memories_raw(self) -> pl.DataFrame:
        return self._memories.frame()

    def memories(self, namespace: str | None = None) -> pl.DataFrame:
        """Current memories, with accesses from the access log folded into access_count/accessed_at."""
        frame = self._memories_raw()
        if namespace is not None:
            frame = frame.filter(pl.col("namespace") == namespace)
        log = self._access.frame()
        if log.height:
            folded = log.group_by("memory_id").agg(
                pl.len().cast(pl.Int64).alias("_n"), pl.col("accessed_at").max().alias("_last")
            )
            frame = (
                frame.join(folded, left_on="id", right_on="memory_id", how="left")
                .with_columns(
                    (pl.col("access_count") + pl.col("_n").fill_null(0)).alias("access_count"),
                    pl.max_horizontal("accessed_at", "_last").alias("accessed_at"),
                )
                .drop("_n", "_last")
            )
        return frame

    def get(self, memory_id: str) -> dict[str, Any]:
        validate_id(memory_id)
        rows = self.memories().filter(pl.col("id") == memory_id)
        if rows.height == 0:
            raise NotFoundError(f"no memory with id {memory_id!r}")
        return rows.row(0, named=True)

    def get_many(self, ids: Sequence[str]) -> pl.DataFrame:
        return self.memories().filter(pl.col("id").is_in(list(ids)))

    def _lookups(self) -> None:
        version = self._memories.version
        if self._lookup_version != version:
            frame = self._memories_raw()
            ids = frame["id"].to_list()
            self._ids = set(ids)
            self._hash_index = dict(zip(zip(frame["namespace"].to_list(), frame["content_hash"].to_list()), ids))
            self._lookup_version = version

    def has_ids(self, ids: Iterable[str]) -> set[str]:
        self._lookups()
        return {i for i in ids if i in self._ids}

    def find_by_hash(self, namespace: str, digest: str) -> str | None:
        """The id of the memory with this content in this namespace, if any (idempotent ingest)."""
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
        if namespace is not None:
            self.require_namespace(namespace)
        if offset < 0 or limit < 0:
            raise ValidationError(f"offset and limit must be >= 0, got offset={offset}, limit={limit}")
        frame = self.memories(namespace)
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

    def _memories_commit_meta(self) -> dict[str, Any]:
        return {CHUNKS_VERSION_KEY: self._chunks.known_version}

    def insert(self, rows: list[dict[str, Any]], chunks: pa.Table) -> StoreVersion:
        """Add new memories and their chunks: chunks commit first, then one memories commit."""
        if not rows:
            return self.version()
        ids = [r["id"] for r in rows]
        clash = self.has_ids(ids)
        if clash:
            raise ConflictError(f"memory id(s) exist already: {sorted(clash)[:5]}; use update")
        known = set(self.namespaces())
        for ns in sorted({r["namespace"] for r in rows} - known):
            self.create_namespace(ns, exist_ok=True)
        before = self._lookup_version
        self._append_chunks(chunks)
        after = self._memories.append(pa.Table.from_pylist(rows, schema=MEMORIES), self._memories_commit_meta())
        if after == before + 1:  # nobody else wrote in between: extend the lookups in place
            self._ids.update(ids)
            self._hash_index.update({(r["namespace"], r["content_hash"]): r["id"] for r in rows})
            self._lookup_version = after
        return self.known_version()

    def replace(self, rows: list[dict[str, Any]], chunks: pa.Table | None = None) -> StoreVersion:
        """Update existing memories (one MERGE commit), after committing their new chunks if any;
        then the chunk rows the new ones replace are deleted (see ``_drop_superseded_chunks``)."""
        if not rows:
            return self.version()
        missing = sorted({r["id"] for r in rows} - self.has_ids(r["id"] for r in rows))
        if missing:
            raise NotFoundError(f"no memory with id(s) {missing[:5]}")
        if chunks is not None:
            self._append_chunks(chunks)
        self._memories.upsert(pa.Table.from_pylist(rows, schema=MEMORIES), "id", self._memories_commit_meta())
        if chunks is not None:
            self._drop_superseded_chunks(rows)
        return self.known_version()

    def _drop_superseded_chunks(self, rows: list[dict[str, Any]]) -> None:
        """Delete the chunk rows of these memories that their new index hash no longer shows.

        Only after the memories commit: a process killed before it leaves each memory as it was,
        its old chunks still visible; one killed after it leaves invisible rows that `lab store
        check` reports as orphans and compact or repair removes. Without this every content update
        left its old chunks behind, and check took them for the leftovers of a cut-off save."""
        current = pl.DataFrame({"memory_id": [r["id"] for r in rows], "current": [r["index_hash"] for r in rows]})
        stored = self._chunks.frame().select("chunk_id", "memory_id", "index_hash")
        old = stored.join(current, on="memory_id").filter(pl.col("index_hash") != pl.col("current"))
        ids = old["chunk_id"].unique().sort().to_list()
        if ids:
            self._chunks.delete(in_list("chunk_id", ids))

    def memory_rows(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Memories as stored (the access log not folded in): rows to write back unchanged."""
        return self._memories_raw().filter(pl.col("id").is_in(list(ids))).to_dicts()

    def stored_access_count(self, memory_id: str) -> int:
        """The access count in the memory's own row, without the log's accesses folded in."""
        rows = self._memories_raw().filter(pl.col("id") == memory_id)
        if rows.height == 0:
            raise NotFoundError(f"no memory with id {memory_id!r}")
        return int(rows["access_count"][0])

    def invalidate(self, ids: Sequence[str]) -> list[dict[str, Any]]:
        """Soft delete: mark memories invalid in one commit (kept, hidden from valid-only search)."""
        rows = self._memories_raw().filter(pl.col("id").is_in(list(ids))).with_columns(
            pl.lit(False).alias("valid"), pl.lit(utcnow()).cast(pl.Datetime("us", "UTC")).alias("updated_at")
        ).to_dicts()
        self.replace(rows)
        return rows

    def hard_delete(self, ids: Sequence[str]) -> int:
        """Remove memories for good; their edges, chunks and accesses go in later commits."""
        ids = [validate_id(i) for i in ids]
        present = sorted(self.has_ids(ids))
        if not present:
            return 0
        self._memories.delete(in_list("id", present), self._memories_commit_meta())
        self._edges.delete(f"{in_list('src', present)} OR {in_list('dst', present)}")
        self._chunks.delete(in_list("memory_id", present))
        self._access.delete(in_list("memory_id", present))
        return len(present)

    # ----------------------------------------------------------------- chunks
    def chunks(self, namespace: str | None = None) -> pl.DataFrame:
        """Visible chunks: those whose (memory_id, index_hash) matches a current memory.

        Memories are read before chunks: a memory's chunks are committed before it, so every memory
        read has its chunks in the chunks read after (the other order races with a writer and can
        drop a just-saved memory's chunks while its version is counted as seen). Chunk rows a
        memory shows are deleted only after a memories commit that stops showing them (an update,
        a hard delete), so when the memories table did not move while the chunks were read, none
        of the memories read lost its chunks; when it did, both are read again."""
        for attempt in range(3):  # each retry needs another writer's commit in a window of milliseconds
            if attempt:
                self._memories.refresh()  # a server looks for other writers only every so often: look now
            read = self._memories_raw()
            read_at = self._memories.known_version
            chunks = self._chunks.frame()
            # (never refreshed after the last read: the version the caller stamps is the one read)
            if not self._memories.committed_after(read_at):
                break
        mem = read.select(pl.col("id").alias("memory_id"), "index_hash", "namespace")
        if namespace is not None:
            chunks = chunks.filter(pl.col("namespace") == namespace)
            mem = mem.filter(pl.col("namespace") == namespace)
        return chunks.join(mem.drop("namespace"), on=["memory_id", "index_hash"], how="semi")

    # ----------------------------------------------------------------- edges
    def add_edges(self, edges: list[dict[str, Any]]) -> int:
        """Add edges whose ends exist (same namespace); duplicates of an existing edge are skipped."""
        if not edges:
            return 0
        mem = self._memories_raw().select("id", "namespace")
        ns_of = dict(zip(mem["id"].to_list(), mem["namespace"].to_list()))
        existing = set(
            zip(*(self._edges.frame()[c].to_list() for c in ("src", "dst", "relation")))
        ) if self._edges.frame().height else set()
        rows = []
        for e in edges:
            for end in ("src", "dst"):
                if e[end] not in ns_of:
                    raise NotFoundError(f"edge {e['src']} -> {e['dst']}: no memory with id {e[end]!r}")
            if ns_of[e["src"]] != ns_of[e["dst"]]:
                raise ValidationError(
                    f"edge {e['src']} -> {e['dst']} crosses namespaces "
                    f"({ns_of[e['src']]} vs {ns_of[e['dst']]}); edges stay inside one namespace"
                )
            if e.get("namespace") not in (None, ns_of[e["src"]]):
                raise ValidationError(
                    f"edge {e['src']} -> {e['dst']}: namespace {e['namespace']!r} does not match "
                    f"its memories' namespace {ns_of[e['src']]!r}"
                )
            key = (e["src"], e["dst"], e["relation"])
            if key in existing:
                continue
            existing.add(key)
            rows.append({**e, "namespace": ns_of[e["src"]]})
        if rows:
            self._edges.append(pa.Table.from_pylist(rows, schema=EDGES))
        return len(rows)

    def edges(
        self,
        namespace: str | None = None,
        *,
        memory_id: str | None = None,
        relation: str | None = None,
    ) -> pl.DataFrame:
        """Edges whose two ends still exist, filtered by namespace, touching memory, relation."""
        frame = self._edges.frame()
        if namespace is not None:
            frame = frame.filter(pl.col("namespace") == namespace)
        if relation is not None:
            if relation not in EDGE_RELATIONS:
                raise ValidationError(f"unknown relation {relation!r}; known: {list(EDGE_RELATIONS)}")
            frame = frame.filter(pl.col("relation") == relation)
        if memory_id is not None:
            frame = frame.filter((pl.col("src") == memory_id) | (pl.col("dst") == memory_id))
        ids = self._memories_raw()["id"].to_list()
        return frame.filter(pl.col("src").is_in(ids) & pl.col("dst").is_in(ids)).sort(
            ["src", "dst", "relation"]
        )

    def remove_edges(self, src: str, dst: str, relation: str | None = None) -> int:
        validate_id(src, "src")
        validate_id(dst, "dst")
        match = self.edges(memory_id=src, relation=relation).filter(
            (pl.col("src") == src) & (pl.col("dst") == dst)
        )
        if match.height == 0:
            raise NotFoundError(f"no edge {src} -> {dst}" + (f" ({relation})" if relation else ""))
        pred = f"src = '{src}' AND dst = '{dst}'"
        if relation:
            pred += f" AND relation = '{relation}'"
        self._edges.delete(pred)
        return match.height

    # ----------------------------------------------------------------- accesses
    def record_access(self, ids: Sequence[str], *, at: datetime | None = None, context: str = "search") -> int:
        """Log accesses (append-only, so serving reads never rewrite memory rows)."""
        if not ids:
            return 0
        at = at or utcnow()
        ns_of = dict(self._memories_raw().select("id", "namespace").iter_rows())
        rows = [
            {"memory_id": i, "namespace": ns_of[i], "accessed_at": at, "context": context}
            for i in ids if i in ns_of
        ]
        self._access.append(pa.Table.from_pylist(rows, schema=ACCESS_LOG))
        return len(rows)

    # ----------------------------------------------------------------- maintenance
    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        mem = self.memories(namespace)
        chunks = self.chunks(namespace)
        edges = self.edges(namespace)
        out: dict[str, Any] = {
            "version": str(self.version()),
            "namespaces": self.namespaces() if namespace is None else [namespace],
            "memories": mem.height,
            "valid": int(mem["valid"].sum()) if mem.height else 0,
            "pinned": int(mem["pinned"].sum()) if mem.height else 0,
            "chunks": chunks.height,
            "edges": edges.height,
            "embed_model": self.info.embed_model,
        }
        if mem.height:
            out["by_type"] = dict(sorted(mem.group_by("type").len().iter_rows()))
            out["by_namespace"] = dict(sorted(mem.group_by("namespace").len().iter_rows()))
            out["created_from"] = mem["created_at"].min().isoformat()
            out["created_to"] = mem["created_at"].max().isoformat()
        if edges.height:
            out["by_relation"] = dict(sorted(edges.group_by("relation").len().iter_rows()))
        return out

    def _append_chunks(self, chunks: pa.Table) -> None:
        """Commit chunk rows, first deleting stored rows with the same chunk ids.

        A chunk id names its memory and the memory's index hash, so a stored row with a new row's
        id can only be the orphan of a save cut off between its chunks commit and its memories
        commit: the retry of that save would otherwise store every chunk twice."""
        ids = chunks.column("chunk_id").to_pylist()
        present = self._chunks.frame().filter(pl.col("chunk_id").is_in(ids))["chunk_id"].unique().sort().to_list()
        if present:
            self._chunks.delete(in_list("chunk_id", present))
        self._chunks.append(chunks)

    def orphan_chunks(self) -> tuple[list[str], list[str]]:
        """(chunk ids no memory shows, chunk ids stored more than once): what a cut-off save leaves."""
        stored = self._chunks.frame()
        stale = stored.join(self.chunks().select("chunk_id"), on="chunk_id", how="anti")["chunk_id"].unique().sort()
        twice = stored.filter(pl.col("chunk_id").is_duplicated() & ~pl.col("chunk_id").is_in(stale.to_list()))
        return stale.to_list(), twice["chunk_id"].unique().sort().to_list()

    def remove_orphan_chunks(self) -> dict[str, int]:
        """Delete chunk rows no memory shows and keep one row of any chunk stored twice, whatever
        their age (at most two commits: the duplicates are deleted, then written back once)."""
        stale, twice = self.orphan_chunks()
        if stale:
            self._chunks.delete(in_list("chunk_id", stale))
        if twice:
            keep = self._chunks.frame().filter(pl.col("chunk_id").is_in(twice)).unique("chunk_id", keep="first",
                                                                                        maintain_order=True)
            self._chunks.delete(in_list("chunk_id", twice))
            self._chunks.append(keep.to_arrow().cast(self._chunks.schema))
        return {"stale_chunks_removed": len(stale), "duplicate_chunks_removed": len(twice)}

    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Drop chunks no memory shows any more (and second copies), then merge small files in every table."""
        report: dict[str, Any] = self.remove_orphan_chunks()
        for name, table in (
            ("memories", self._memories), ("chunks", self._chunks), ("edges", self._edges),
            ("access_log", self._access), ("namespaces", self._namespaces),
        ):
            report[name] = table.compact(vacuum_hours=vacuum_hours)
        return report

    def file_counts(self) -> dict[str, int]:
        return {
            "memories": self._memories.n_files(), "chunks": self._chunks.n_files(),
            "edges": self._edges.n_files(), "access_log": self._access.n_files(),
        }
