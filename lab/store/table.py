"""One Delta Lake table with an in-memory polars copy that follows the table's version."""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from lab.errors import ConflictError, StoreError
from lab.store.delta_log import log_damage, torn_commit
from lab.store.row_cache import FileCache, StoredRows, file_exists, uri_path
from lab.store.reach import reaching, safe_uri


# a version check that finds no next commit file still re-reads the log this often (a log whose
# old commit files were cleaned up after a checkpoint has no file for the next version to stat)
FULL_CHECK_SECONDS = 1.0


class DeltaFrame:
    """A Delta table plus a cached DataFrame of its rows at ``version`` (a ``FileCache``).

    Every write is one Delta commit (atomic).
    """

    def __init__(self, path: Path | str, schema: pa.Schema, *, version: int | None = None, create: bool = True,
                 read_only: bool = False, lazy: tuple[str, ...] = (), storage_options: dict[str, str] | None = None) -> None:
        # a folder here, or a URI (a store on object storage: lab.store.location), whose files are
        # written whole in one request: no torn commit to look for, and no file to rename
        self.local = path if isinstance(path, Path) else None
        self.path = path
        self.name = path.name if isinstance(path, Path) else path.rstrip("/").rsplit("/", 1)[-1]
        self.options = storage_options
        self.schema = schema
        self.pinned = version is not None
        self.read_only = read_only or self.pinned
        self._dt = open_delta(self, version, create and not self.pinned, schema)
        self._held = False
        # a reader that may see other processes' commits a little late (a server: its own writes
        # move ``_dt`` at once) re-reads the log at most this often; 0 = on every version check
        self.refresh_seconds = 0.0
        self._checked_at = float("-inf")
        self._rows = FileCache(self.name, schema, lazy)

    def hold(self) -> None:
        """The store's writer lock is held: read the log tail once; until ``unhold`` no one else
        can commit, and our own commits move ``_dt`` themselves."""
        self._update()
        self._held = True

    def unhold(self) -> None:
        self._held = False

    @property
    def version(self) -> int:
        """The latest committed version (re-reads the log tail to see other writers, unless the
        writer lock is held)."""
        if not self.pinned and not self._held:
            if self.refresh_seconds <= 0 or time.monotonic() - self._checked_at >= self.refresh_seconds:
                if time.monotonic() - self._checked_at >= FULL_CHECK_SECONDS or self._next_commit_exists():
                    self._update()
        return self._dt.version()

    def _next_commit_exists(self) -> bool:
        """Has anyone committed past our version? A Delta commit is the log file named by the next
        version, so one stat answers (a full log read costs about a millisecond per table)."""
        return self.committed_after(self._dt.version())

    def committed_after(self, version: int) -> bool:
        """Has anyone committed past ``version``? One stat (see ``_next_commit_exists``); a pinned
        table never moves."""
        if self.pinned:
            return False
        log = f"_delta_log/{version + 1:020d}.json"
        if self.local is not None:
            return (self.local / log).exists()
        with _reaching(self, "reading the log of"):
            return file_exists(f"{self.path}/{log}")

    def refresh(self) -> None:
        """Look for other processes' commits now, whatever ``refresh_seconds`` says."""
        if not self.pinned and not self._held:
            self._update()

    def _update(self) -> None:
        """Read the log tail: commits other processes made since our last look."""
        try:
            with _reaching(self, "reading the log of"):
                self._dt.update_incremental()
        except StoreError:
            raise
        except Exception as exc:  # deltalake raises several types for a damaged log
            raise StoreError(f"table {self.name}: its Delta log cannot be read: {exc} "
                             "(run `lab store check`)") from None
        self._checked_at = time.monotonic()

    @property
    def known_version(self) -> int:
        """The version as of our last read or write, without looking for other writers."""
        return self._dt.version()

    def frame(self) -> pl.DataFrame:
        """The table's rows, without its lazy columns (``stored_rows`` says where those are)."""
        version = self.version
        with _reaching(self, "reading"):
            return self._rows.frame(self._dt, version)

    def stored_rows(self) -> StoredRows:  # where the frame last returned is stored
        return self._rows.stored_rows()

    rows_generation = property(lambda self: self._rows.generation)  # see FileCache.clear
    rows_version = property(lambda self: self._rows.frame_version)  # the version the cached frame is of

    def _check_writable(self) -> None:
        if self.pinned:
            raise ConflictError(f"{self.name} is pinned at version {self._dt.version()}: read-only")
        if self.read_only:
            raise ConflictError(f"{self.path} is opened read-only: writes go through a writer (Pipeline)")

    def append(self, table: pa.Table, metadata: dict[str, Any] | None = None) -> int:
        """Append rows in one commit; returns the new version."""
        self._check_writable()
        if table.num_rows == 0:
            return self.version
        table = table.select(self.schema.names).cast(self.schema)
        # write_deltalake moves self._dt to the version it committed; the next frame() reads only
        # the file it added (and those of anyone who committed in between)
        with _reaching(self, "committing to"):
            write_deltalake(self._dt, table, mode="append", commit_properties=_commit_props(metadata))
        return self._dt.version()

    def upsert(self, table: pa.Table, key: str, metadata: dict[str, Any] | None = None) -> int:
        """Insert or replace rows by ``key`` (validated ids) in one commit: an overwrite of the rows
        whose key is one of the new rows' keys. A MERGE did the same by joining every row of the table
        with the new rows: most of an update's cost at a million memories (benchmarks/scale_store.py,
        single_update)."""
        self._check_writable()
        if table.num_rows == 0:
            return self.version
        table = table.select(self.schema.names).cast(self.schema)
        keys = sorted(set(table.column(key).to_pylist()))
        with _reaching(self, "committing to"):
            write_deltalake(self._dt, table, mode="overwrite", predicate=in_list(key, keys),
                            commit_properties=_commit_props(metadata))
        return self._dt.version()

    def delete(self, predicate: str, metadata: dict[str, Any] | None = None) -> int:
        """Delete the rows matching a SQL predicate in one commit."""
        self._check_writable()
        with _reaching(self, "committing to"):
            self._dt.delete(predicate, commit_properties=_commit_props(metadata))
        return self._dt.version()

    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Merge small files into larger ones.

        With ``vacuum_hours``, also delete files that only versions older than that many hours
        need: pins of such old versions stop working, which is why it is not the default.
        """
        self._check_writable()
        result = self._dt.optimize.compact()
        removed: list[str] = []
        if vacuum_hours is not None:
            removed = self._dt.vacuum(
                retention_hours=int(vacuum_hours), enforce_retention_duration=False, dry_run=False
            )
        self._dt.create_checkpoint()
        self._dt.update_incremental()
        return {
            "files_added": int(result.get("numFilesAdded", 0)),
            "files_removed": int(result.get("numFilesRemoved", 0)),
            "files_vacuumed": len(removed),
            "version": self._dt.version(),
        }

    def commit_metadata(self, version: int) -> dict[str, Any]:
        """The custom metadata of one commit (e.g. which chunks version a memories commit saw)."""
        for entry in self._dt.history():
            if entry.get("version") == version:
                return entry
        return {}

    # ----------------------------------------------------------------- checking and repair
    def damaged_files(self, version: int | None = None) -> list[tuple[str, str]]:
        """(file, problem) for every data file of ``version`` (default: the latest) that is missing
        or cannot be read in full."""
        import pyarrow.parquet as pq

        dt = self._dt if version is None else DeltaTable(str(self.path), version=version, storage_options=self.options)
        out = []
        for uri in dt.file_uris():
            path = uri_path(uri)
            name = path.rstrip("/").rsplit("/", 1)[-1]
            if not file_exists(path):
                out.append((name, "missing"))
                continue
            try:
                pq.read_table(path)
            except Exception as exc:  # a damaged file: pyarrow raises several types
                out.append((name, f"unreadable ({type(exc).__name__}: {str(exc)[:120]})"))
        return out

    def drop_damaged_files(self) -> list[str]:
        """Take the missing and unreadable data files out of the table (one FSCK commit): only
        their rows are lost, every other commit stays. An unreadable file is kept beside the
        table as ``NAME.damaged`` for inspection. Returns the files dropped."""
        self._check_writable()
        damaged = self.damaged_files()
        for name, problem in damaged:
            if problem != "missing" and self.local is not None:  # (on object storage it is left in place)
                (self.local / name).rename(self.local / f"{name}.damaged")
        if damaged:
            self._dt.repair(dry_run=False)
            self._dt.update_incremental()
            self._rows.clear()
        return [name for name, _ in damaged]

    def n_files(self) -> int:
        return len(self._dt.file_uris())


def _reaching(table: DeltaFrame, doing: str):
    """A store at a URI that does not answer is a StoreUnavailable naming it (a folder always answers)."""
    return nullcontext() if table.local is not None else reaching(str(table.path).rsplit("/tables/", 1)[0],
                                                                  f"{doing} table {table.name}")


def open_delta(table: DeltaFrame, version: int | None, create: bool, schema: pa.Schema) -> DeltaTable:
    """The Delta table of ``table`` at ``version`` (created empty when absent and ``create``); a torn
    commit file of a local table is named, not deltalake's parse error."""
    uri, local, options = str(table.path), table.local, table.options
    with _reaching(table, "opening"):
        if not DeltaTable.is_deltatable(uri, storage_options=options):
            if not create:
                raise StoreError(f"no Delta table at {safe_uri(uri) if local is None else table.path}")
            write_deltalake(uri, schema.empty_table(), mode="ignore", storage_options=options)
    if local is not None and version is None and torn_commit(local) is not None:  # one file read: the common tear
        damage = log_damage(local)  # (the oldest torn file the latest version needs: maybe an older one)
        if damage is not None:
            raise StoreError(f"table {table.name}: {damage.describe()}")
    try:
        with _reaching(table, "opening"):
            return DeltaTable(uri, version=version, storage_options=options)
    except StoreError:
        raise
    except Exception as exc:  # deltalake raises several types for a missing version
        damage = log_damage(local) if local is not None else None  # an older commit file torn
        if damage is not None and (version is None or damage.version <= version):
            raise StoreError(f"table {table.name}: {damage.describe()}") from None
        raise StoreError(f"cannot open Delta table {table.path} at version {version}: {exc}") from exc


def full_frame(delta: DeltaFrame) -> pl.DataFrame:
    """A table's rows with every column, its lazy ones read from its files (a copy of them all)."""
    frame = delta.frame()
    missing = [c for c in delta.schema.names if c not in frame.columns]
    if missing:
        where, rows = delta.stored_rows(), np.arange(frame.height, dtype=np.int64)
        frame = frame.with_columns(*(where.read(c, rows).alias(c) for c in missing)).select(delta.schema.names)
    return frame


def _commit_props(metadata: dict[str, Any] | None) -> CommitProperties | None:
    """A commit's custom metadata (values as strings), or none."""
    if not metadata:
        return None
    return CommitProperties(custom_metadata={k: str(v) for k, v in metadata.items()})


def in_list(column: str, values: list[str]) -> str:
    """A SQL ``IN`` predicate; values are validated ids/names (no quotes) before they get here."""
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return f"{column} IN ({quoted})"


def frame_marked(delta: DeltaFrame) -> tuple[pl.DataFrame, int, int]:
    """``delta.frame()``, the rows generation it belongs to and the table version it is of, read
    together: while the generation stays, later frames begin with this one's rows (another thread
    may reload in between, so all three are read until they agree)."""
    while True:
        before = (delta.rows_generation, delta.rows_version)
        frame = delta.frame()
        if (delta.rows_generation, delta.rows_version) == before:
            return frame, before[0], before[1]
