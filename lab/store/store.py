"""The store: one folder's tables opened together (lifecycle, lock, versions), and the commits that
span tables; each table's reads and single-table writes are its own class's."""
from __future__ import annotations

import shutil
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import polars as pl
import pyarrow as pa

from lab.version import __version__
from lab.config import SaveConfig
from lab.errors import ConflictError, NotFoundError
from lab.schema import ACCESS_LOG, EDGES, MEMORIES, NAMESPACES, chunks_schema
from lab.store.access import AccessLog
from lab.store.chunks import ChunksTable
from lab.store.edges import EdgesTable
from lab.store.layout import INFO_FILE, STORE_FORMAT, StoreInfo, StoreVersion, info_path, prepare_folder
from lab.store.location import Location, is_uri, location_of
from lab.store.lock import WriterLock
from lab.store.memories import MemoriesTable
from lab.store.namespaces import NamespacesTable
from lab.store.settings import StoreSettings, settings_or_default
from lab.store.records import namespace_folder, utcnow, validate_id
from lab.store.stats import store_stats
from lab.store.table import DeltaFrame, in_list


class Store:
    """Tables of one store folder. Reads are consistent per table version; writes are commits.

    Write order keeps multi-table changes safe without a multi-table transaction: chunks are
    committed first and only become visible when the memories commit naming their content hash
    lands. A process killed in between leaves invisible chunks, never a half-saved memory.
    """

    def __init__(self, root: Path, info: StoreInfo, pin: StoreVersion | None = None, *, create_tables: bool = True,
                 location: Location | None = None, settings: StoreSettings | None = None) -> None:
        # a store at a URI (``location``) keeps its files there; ``root`` is this machine's working folder
        self.root = root
        self.settings = settings_or_default(settings)  # the edge's (lab.store.settings): the lock's wait, ...
        self.location = location
        self.info = info
        self.pin = pin
        self.read_only = pin is not None or not create_tables  # pinned, or opened to read: writes refused

        def table(name: str, schema: pa.Schema, version: int | None = None, lazy: tuple[str, ...] = ()) -> DeltaFrame:
            return DeltaFrame(root / "tables" / name if location is None else location.table(name), schema,
                              version=version, create=create_tables and pin is None, read_only=not create_tables,
                              lazy=lazy, storage_options=None if location is None else location.options)

        self._memories = table("memories", MEMORIES, pin and pin.memories)
        # the embeddings stay in the files: the indexes hold their own copy (ChunksTable.visible)
        self._chunks = table("chunks", chunks_schema(info.dim), pin and pin.chunks, lazy=("embedding",))
        self._edges = table("edges", EDGES, pin and pin.edges)
        self._access = table("access_log", ACCESS_LOG, pin and pin.access)
        self._namespaces = table("namespaces", NAMESPACES)
        self.access_log = AccessLog(self._access)
        self.memories_table = MemoriesTable(self._memories, self.access_log, lambda: self._chunks.known_version)
        self.chunks_table = ChunksTable(self._chunks, self.memories_table)
        self.edges_table = EdgesTable(self._edges, self.memories_table)
        self.namespaces_table = NamespacesTable(self._namespaces)
        self._writer = WriterLock(root, self.tables().values())

    # ----------------------------------------------------------------- lifecycle
    @classmethod
    def create(cls, root: str | Path, *, embed_model: str, dim: int, save_config: dict[str, Any],
               settings: StoreSettings | None = None, embed_space: str | None = None) -> "Store":
        """A new store in an empty folder or at an empty URI (``_create``), of this embedder and config."""
        return _create(cls, root, StoreInfo(format=STORE_FORMAT, created_at=utcnow().isoformat(), lab_version=__version__,
                                            embed_model=embed_model, dim=dim, save_config=save_config,
                                            embed_space=embed_space), settings)

    @classmethod
    def open(cls, root: str | Path, *, pin: StoreVersion | str | None = None, read_only: bool = False,
             settings: StoreSettings | None = None) -> "Store":
        """Open a store (a folder, or a URI: lab.store.location), latest or pinned at ``pin`` (read-only);
        ``read_only``: the latest version to read, a missing table an error, not created."""
        pin = StoreVersion.parse(pin) if isinstance(pin, str) else pin
        if not is_uri(root):
            return cls(Path(root), StoreInfo.read(Path(root)), pin, create_tables=not read_only, settings=settings)
        return _open_at(cls, location_of(str(root), settings), pin, read_only, settings)

    # the store as users name it: its URI, or its folder
    where = property(lambda self: self.location.uri if self.location is not None else str(self.root))

    def record_index_config(self, index: dict[str, Any]) -> None:
        """Record new index parameters (a writer changed them), so readers load the snapshots built
        with them instead of rebuilding. Written to a temporary file, then swapped in."""
        if self.read_only:
            raise ConflictError(f"store {self.root} is opened read-only: its index configuration cannot change")
        self.info = self.info.with_index(index).put(self.root, self.location)

    def recorded_config(self) -> SaveConfig:
        """The save configuration the store was created with (chunking, embedding, indexes)."""
        return self.info.saved_config(self.root)

    def write_lock(self, timeout: float | None = None):
        """The writer lock (``WriterLock``), with a bounded wait: ``timeout`` seconds, by default the settings'
        (the workspace's ``write_lock_timeout``, 600); past it a writer gets a ConflictError."""
        return self._writer.held(self.settings.lock_timeout if timeout is None else timeout)

    def follow_other_writers(self, every_seconds: float) -> None:
        """Look for other processes' commits at most every ``every_seconds``, not on every read (a server:
        its own writes are seen at once, another process's within that time; a look lists each table's log)."""
        for table in self.tables().values():
            table.refresh_seconds = every_seconds

    def tables(self) -> dict[str, DeltaFrame]:
        """The store's tables by name (for locking, checking and repair)."""
        return {"memories": self._memories, "chunks": self._chunks, "edges": self._edges,
                "access_log": self._access, "namespaces": self._namespaces}

    def version(self) -> StoreVersion:
        return StoreVersion(self._memories.version, self._chunks.version, self._edges.version, self._access.version)

    def known_version(self) -> StoreVersion:
        """The version after our last read or write, without checking for other writers."""
        return StoreVersion(self._memories.known_version, self._chunks.known_version,
                            self._edges.known_version, self._access.known_version)

    memories_version = property(lambda self: self._memories.version)
    chunks_version = property(lambda self: self._chunks.version)
    edges_version = property(lambda self: self._edges.version)
    access_version = property(lambda self: self._access.version)

    # ----------------------------------------------------------------- reads, by table
    def namespaces(self) -> list[str]:
        return self.namespaces_table.names()

    def require_namespace(self, name: str) -> str:
        return self.namespaces_table.require(name)

    def memories(self, namespace: str | None = None) -> pl.DataFrame:
        """Current memories, with accesses from the access log folded into access_count/accessed_at."""
        return self.memories_table.live(namespace)

    def get(self, memory_id: str) -> dict[str, Any]:
        return self.memories_table.get(memory_id)

    def find_by_hash(self, namespace: str, digest: str) -> str | None:
        return self.memories_table.find_by_hash(namespace, digest)

    def list(self, namespace: str | None = None, **filters: Any) -> pl.DataFrame:
        """``MemoriesTable.list`` in a namespace the store knows (or in all)."""
        if namespace is not None:
            self.require_namespace(namespace)
        return self.memories_table.list(namespace, **filters)

    def chunks(self, namespace: str | None = None, *, embeddings: bool = True) -> pl.DataFrame:
        """Visible chunks (``ChunksTable.visible``); without ``embeddings``, no vectors are read."""
        return self.chunks_table.visible(namespace, embeddings=embeddings)

    def edges(self, namespace: str | None = None, **filters: Any) -> pl.DataFrame:
        """Edges whose two ends still exist (``EdgesTable.current``)."""
        return self.edges_table.live(namespace, **filters)

    # ----------------------------------------------------------------- writes
    def insert(self, rows: list[dict[str, Any]], chunks: pa.Table) -> StoreVersion:
        """Add new memories and their chunks: chunks commit first, then one memories commit."""
        if not rows:
            return self.version()
        clash = self.memories_table.has_ids(r["id"] for r in rows)
        if clash:
            raise ConflictError(f"memory id(s) exist already: {sorted(clash)[:5]}; use update")
        self.namespaces_table.create_missing(sorted({r["namespace"] for r in rows}))
        self.chunks_table.append(chunks)
        self.memories_table.append(rows)
        return self.known_version()

    def replace(self, rows: list[dict[str, Any]], chunks: pa.Table | None = None, superseded: list[str] | None = None) -> StoreVersion:
        """Update existing memories (one commit), after committing their new chunks if any; then the chunk rows
        the new ones replace (``superseded``, if read already) are deleted (``ChunksTable.drop_superseded``)."""
        if not rows:
            return self.version()
        missing = sorted({r["id"] for r in rows} - self.memories_table.has_ids(r["id"] for r in rows))
        if missing:
            raise NotFoundError(f"no memory with id(s) {missing[:5]}")
        if chunks is not None:
            self.chunks_table.append(chunks)
        self.memories_table.upsert(rows)
        if chunks is not None:
            self.chunks_table.drop_superseded(rows, superseded)
        return self.known_version()

    def hard_delete(self, ids: Sequence[str]) -> int:
        """Remove memories for good; their edges, chunks and accesses go in later commits."""
        ids = [validate_id(i) for i in ids]
        present = sorted(self.memories_table.has_ids(ids))
        if not present:
            return 0
        self.memories_table.delete_ids(present)
        _delete_naming(self._edges, ("src", "dst"), present)
        self.chunks_table.delete(in_list("memory_id", present))
        _delete_naming(self._access, ("memory_id",), present)
        return len(present)

    def delete_namespace(self, name: str) -> dict[str, int]:
        """Hard-delete a namespace and everything in it; memories first, so a crash hides the rest."""
        self.require_namespace(name)
        counts = {"memories": self.memories(name).height}
        pred = f"namespace = '{name}'"
        for table in (self._memories, self._edges, self._chunks, self._access):
            table.delete(pred)
        self.namespaces_table.delete(name)
        _drop_index(self, name)
        return counts

    def record_access(self, ids: Sequence[str], *, at: datetime | None = None, context: str = "search") -> int:
        """Log accesses (append-only, so serving reads never rewrite memory rows)."""
        if not ids:
            return 0
        return self.access_log.record(ids, self.memories_table.namespace_of(), at=at or utcnow(), context=context)

    # ----------------------------------------------------------------- maintenance
    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        """``lab stats``: the store's figures (``describe``), of one namespace or all."""
        return store_stats(self, namespace)

    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Drop chunks no memory shows any more (and second copies), then merge small files in every table."""
        report: dict[str, Any] = self.chunks_table.remove_orphans()
        for name, table in self.tables().items():
            report[name] = table.compact(vacuum_hours=vacuum_hours)
        return report

    def file_counts(self) -> dict[str, int]:
        return {name: table.n_files() for name, table in self.tables().items() if name != "namespaces"}


def _create(cls: type[Store], root: str | Path, info: StoreInfo, settings: StoreSettings | None) -> Store:
    """A new store: in a folder, its info moved in place last; at a URI, its tables first, its info
    last (the store exists once that is there; a killed create leaves empty tables, which the next
    create reuses)."""
    if not is_uri(root):
        tmp = prepare_folder(Path(root), info)
        store = cls(Path(root), info, settings=settings)
        tmp.replace(info_path(Path(root)))
        return store
    location = location_of(str(root), settings)
    if location.exists(INFO_FILE):
        raise ConflictError(f"a store exists already at {location.uri}")
    if not location.is_empty() and not location.exists("tables"):
        raise ConflictError(f"{location.uri} is not empty and holds no lab store; choose an empty prefix")
    location.folder.mkdir(parents=True, exist_ok=True)
    store = cls(location.folder, info, location=location, settings=settings)
    location.write_text(INFO_FILE, info.text())
    return store


def _open_at(cls: type[Store], location: Location, pin: StoreVersion | None, read_only: bool,
             settings: StoreSettings | None) -> Store:
    info = StoreInfo.read_at(location)
    location.folder.mkdir(parents=True, exist_ok=True)
    return cls(location.folder, info, pin, create_tables=not read_only, location=location, settings=settings)


def warm_writes(store: Store) -> None:
    """Do now what the first write of this process would otherwise do: hash the key columns its
    duplicate checks look in, and load the writer lock's module (a server warming up calls this; at
    a million memories the first save cost more than any later one)."""
    store._writer.load()
    store.memories_table.follow_keys()
    store.chunks_table.stored_ids.follow()


def _drop_index(store: Store, namespace: str) -> None:
    """The namespace's index snapshot removed, here and (a store at a URI) beside its tables."""
    shutil.rmtree(store.root / "indexes" / namespace_folder(namespace), ignore_errors=True)
    if store.location is not None:
        store.location.delete_dir(f"indexes/{namespace_folder(namespace)}")


def _delete_naming(table: DeltaFrame, columns: tuple[str, ...], ids: list[str]) -> None:
    """Delete the rows whose ``columns`` name one of ``ids``, when there are any: a commit that
    removes nothing would still move the table, and a reader's namespace view would then be built
    again from every row rather than moved on by the deleted ids."""
    if table.frame().filter(pl.any_horizontal(pl.col(c).is_in(ids) for c in columns)).height:
        table.delete(" OR ".join(in_list(c, ids) for c in columns))
