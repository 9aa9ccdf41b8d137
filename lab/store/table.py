"""One Delta Lake table with an in-memory polars copy that follows the table's version."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake

from lab.errors import ConflictError, StoreError


class DeltaFrame:
    """A Delta table plus a cached DataFrame of its rows at ``version``.

    Every write is one Delta commit (atomic). Our own appends extend the cache in place; any
    version we did not write ourselves (another process) triggers a full reload, so readers
    always see one consistent version.
    """

    def __init__(self, path: Path, schema: pa.Schema, *, version: int | None = None, create: bool = True,
                 read_only: bool = False) -> None:
        self.path = path
        self.schema = schema
        self.pinned = version is not None
        self.read_only = read_only or self.pinned
        if not DeltaTable.is_deltatable(str(path)):
            if self.pinned or not create:
                raise StoreError(f"no Delta table at {path}")
            write_deltalake(str(path), schema.empty_table(), mode="ignore")
        try:
            self._dt = DeltaTable(str(path), version=version)
        except Exception as exc:  # deltalake raises several types for a missing version
            raise StoreError(f"cannot open Delta table {path} at version {version}: {exc}") from exc
        self._frame: pl.DataFrame | None = None
        self._frame_version = -1

    @property
    def version(self) -> int:
        """The latest committed version (re-reads the log tail to see other writers)."""
        if not self.pinned:
            self._dt.update_incremental()
        return self._dt.version()

    @property
    def known_version(self) -> int:
        """The version as of our last read or write, without looking for other writers."""
        return self._dt.version()

    def frame(self) -> pl.DataFrame:
        version = self.version
        if self._frame is None or self._frame_version != version:
            table = self._dt.to_pyarrow_table()
            self._frame = pl.from_arrow(table.cast(self.schema)) if table.num_rows else pl.from_arrow(
                self.schema.empty_table()
            )
            self._frame_version = version
        return self._frame

    def _check_writable(self) -> None:
        if self.pinned:
            raise ConflictError(f"{self.path.name} is pinned at version {self._dt.version()}: read-only")
        if self.read_only:
            raise ConflictError(f"{self.path} is opened read-only: writes go through a writer (Pipeline)")

    def _commit_props(self, metadata: dict[str, Any] | None) -> CommitProperties | None:
        if not metadata:
            return None
        return CommitProperties(custom_metadata={k: str(v) for k, v in metadata.items()})

    def append(self, table: pa.Table, metadata: dict[str, Any] | None = None) -> int:
        """Append rows in one commit; returns the new version."""
        self._check_writable()
        if table.num_rows == 0:
            return self.version
        table = table.select(self.schema.names).cast(self.schema)
        before = self._frame_version if self._frame is not None else None
        # write_deltalake moves self._dt to the version it committed
        write_deltalake(self._dt, table, mode="append", commit_properties=self._commit_props(metadata))
        new_version = self._dt.version()
        if before is not None and new_version == before + 1:
            # Only our commit happened since the cache was taken: extend it instead of re-reading.
            self._frame = pl.concat([self._frame, pl.from_arrow(table)], how="vertical")
            self._frame_version = new_version
        return new_version

    def upsert(self, table: pa.Table, key: str, metadata: dict[str, Any] | None = None) -> int:
        """Insert or replace rows by ``key`` in one MERGE commit."""
        self._check_writable()
        if table.num_rows == 0:
            return self.version
        table = table.select(self.schema.names).cast(self.schema)
        (
            self._dt.merge(
                table,
                predicate=f"t.{key} = s.{key}",
                source_alias="s",
                target_alias="t",
                commit_properties=self._commit_props(metadata),
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        return self._dt.version()

    def delete(self, predicate: str, metadata: dict[str, Any] | None = None) -> int:
        """Delete the rows matching a SQL predicate in one commit."""
        self._check_writable()
        self._dt.delete(predicate, commit_properties=self._commit_props(metadata))
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

    def n_files(self) -> int:
        return len(self._dt.file_uris())


def in_list(column: str, values: list[str]) -> str:
    """A SQL ``IN`` predicate; values are validated ids/names (no quotes) before they get here."""
    quoted = ", ".join("'" + v.replace("'", "''") + "'" for v in values)
    return f"{column} IN ({quoted})"
