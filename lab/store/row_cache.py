"""The rows of a Delta table at one version, cached per data file; columns too big to hold (the chunks'
embeddings: 1.5 GB at a million chunks, already held by the indexes built from them) are left in
the files and read from them when asked (``StoredRows``)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
from deltalake import DeltaTable

from lab.errors import StoreError
from lab.store.reach import reaching


class FileCache:
    """The rows of a Delta table at one version, kept per data file: a new version (ours or another
    process's) reads only the files that version added and drops the ones it removed, so a writer
    sharing the store with another does not reload whole tables on every foreign commit. Files are
    read with pyarrow, so a missing or corrupt file is a StoreError naming it (never a crash).
    The ``lazy`` columns are not read into the cache (``stored_rows`` reads them when asked)."""

    def __init__(self, name: str, schema: pa.Schema, lazy: tuple[str, ...] = ()) -> None:
        self.name = name  # the table's, for error messages
        self.schema = schema
        self.lazy = lazy
        self.kept = [n for n in schema.names if n not in lazy]
        self.clear()

    def clear(self) -> None:
        """Forget every cached row (the table's files were rewritten outside a commit's adds and removes)."""
        # bumped whenever the frame is made anew rather than by appending rows to the one before:
        # while it stays, the earlier frame's rows are the first rows of the current one
        self.generation = getattr(self, "generation", -1) + 1
        self._frame: pl.DataFrame | None = None
        self._frame_version = -1
        self._parts: dict[str, pl.DataFrame] = {}  # data file -> its rows
        self._files: list[str] = []  # the files of the cached frame, in frame order

    def frame(self, dt: DeltaTable, version: int) -> pl.DataFrame:
        """The rows of ``dt``, which stands at ``version`` (without the lazy columns)."""
        if self._frame is None or self._frame_version != version:
            self._reload(dt, version)
        return self._frame

    @property
    def frame_version(self) -> int:
        return self._frame_version

    def stored_rows(self) -> "StoredRows":
        """Where the rows of the frame last returned are stored (to read a lazy column of some of them)."""
        if self._frame is not None and self.lazy and self.lazy[0] in self._frame.columns:
            return StoredRows(self.name, self.schema, (), np.zeros(0, dtype=np.int64), self._frame)
        heights = [self._parts[f].height for f in self._files]
        starts = np.cumsum([0, *heights[:-1]]).astype(np.int64) if heights else np.zeros(0, dtype=np.int64)
        return StoredRows(self.name, self.schema, tuple(uri_path(f) for f in self._files), starts, None)

    def _reload(self, dt: DeltaTable, version: int) -> None:
        if dt.protocol().reader_features:  # e.g. deletion vectors: only deltalake reads those right
            # (every column kept: which file a row is in is deltalake's to know here)
            table = dt.to_pyarrow_table()
            self._frame = pl.from_arrow(table.cast(self.schema)) if table.num_rows else self._empty(self.schema)
            self._parts, self._files, self._frame_version = {}, [], version
            self.generation += 1
            return
        files = dt.file_uris()
        parts = {f: self._parts[f] if f in self._parts else self._read_file(f) for f in files}
        known = set(self._files)
        if self._frame is not None and known.issubset(files):
            # appends only: the cached frame stays, the new files' rows go after it (deltalake lists
            # files in no fixed order, so "new" is by name, and the frame keeps its own order)
            added = [f for f in files if f not in known]
            fresh = [parts[f] for f in added]
            frame = pl.concat([self._frame, *fresh], how="vertical", rechunk=False) if fresh else self._frame
            files = self._files + added
        else:
            frame = (pl.concat([parts[f] for f in files], how="vertical", rechunk=False) if files
                     else self._empty(self._kept_schema()))
            self.generation += 1
        self._frame, self._parts, self._files, self._frame_version = frame, parts, files, version

    def _kept_schema(self) -> pa.Schema:
        return pa.schema([self.schema.field(n) for n in self.kept])

    def _read_file(self, uri: str) -> pl.DataFrame:
        table = read_parquet(self.name, uri_path(uri), self._kept_schema(), self.kept)
        return pl.from_arrow(table) if table.num_rows else self._empty(self._kept_schema())

    @staticmethod
    def _empty(schema: pa.Schema) -> pl.DataFrame:
        return pl.from_arrow(schema.empty_table())


@dataclass(frozen=True)
class StoredRows:
    """Where the rows of one cached frame are stored: its files in frame order and the frame row each
    starts at (or, for a table read whole, the frame itself). Data files never change once written,
    so this stays right after the cache has moved on to later versions."""

    table: str
    schema: pa.Schema
    files: tuple[str, ...]
    starts: np.ndarray
    whole: pl.DataFrame | None

    def read(self, column: str, rows: np.ndarray) -> pl.Series:
        """The column's values at the frame's ``rows`` (in that order)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.whole is not None:
            return self.whole[column].gather(pl.Series(rows))
        pieces, order = [], []
        for path, local, at in self._by_file(rows):
            read = read_parquet(self.table, path, pa.schema([self.schema.field(column)]), [column])
            pieces.append(pl.from_arrow(read.take(local))[column])
            order.append(at)
        if not pieces:
            return pl.from_arrow(self.schema.empty_table().select([column]))[column]
        back = np.empty(len(rows), dtype=np.int64)
        back[np.concatenate(order)] = np.arange(len(rows), dtype=np.int64)
        return pl.concat(pieces, rechunk=False).gather(pl.Series(back))

    def scatter(self, column: str, rows: np.ndarray, targets: np.ndarray, out: np.ndarray) -> None:
        """Write the vector at frame row ``rows[i]`` into ``out[targets[i]]`` (``targets[i] < 0``: skipped),
        a file at a time: never more than one file's vectors held besides ``out``."""
        keep = np.asarray(targets) >= 0
        rows, targets = np.asarray(rows, dtype=np.int64)[keep], np.asarray(targets)[keep]
        for path, local, at in self._by_file(rows):
            if path is None:
                block = self.whole[column].gather(pl.Series(local)).to_numpy()
            else:
                values = read_parquet(self.table, path, None, [column]).column(column).take(local)
                block = values.combine_chunks().flatten().to_numpy(zero_copy_only=False)
            out[targets[at]] = np.asarray(block, dtype=out.dtype).reshape(len(at), out.shape[1])

    def _by_file(self, rows: np.ndarray):
        """(file path, rows within that file, positions in ``rows``) for each file ``rows`` touch; the
        path is None for a table read whole (its rows are the frame's own)."""
        if self.whole is not None:
            if len(rows):
                yield None, rows, np.arange(len(rows), dtype=np.int64)
            return
        which = np.searchsorted(self.starts, rows, side="right") - 1
        for f in np.unique(which).tolist():
            at = np.flatnonzero(which == f)
            yield self.files[f], rows[at] - self.starts[f], at


def read_parquet(table: str, path: str, schema: pa.Schema | None, columns: list[str]) -> pa.Table:
    """Columns of one data file of ``table``; a missing or unreadable file is a StoreError naming it."""
    import pyarrow.parquet as pq

    try:
        if "://" not in path:
            return pq.read_table(path, columns=columns, schema=schema)
        with reaching(path.rsplit("/tables/", 1)[0], f"reading table {table}"):  # no answer: not damage
            return pq.read_table(path, columns=columns, schema=schema)
    except StoreError:
        raise
    except FileNotFoundError:
        raise StoreError(f"table {table}: data file {Path(path).name} is missing "
                         f"(run `lab store check` and `lab store repair`)") from None
    except Exception as exc:  # pyarrow raises several types for a damaged file
        raise StoreError(f"table {table}: data file {Path(path).name} is unreadable: {exc} "
                         f"(run `lab store check` and `lab store repair`)") from None


def file_exists(path: str) -> bool:
    """Is there a file at ``path`` (a local path, or a URI on object storage)?"""
    if "://" not in path:
        return Path(path).is_file()
    from pyarrow import fs as pafs

    filesystem, where = pafs.FileSystem.from_uri(path)
    return filesystem.get_file_info(where).type == pafs.FileType.File


def uri_path(uri: str) -> str:
    """A local path from a data file URI as deltalake lists it (percent-encoded, maybe file://)."""
    from urllib.parse import unquote, urlparse
    from urllib.request import url2pathname

    if uri.startswith("file:"):
        return url2pathname(urlparse(uri).path)
    return unquote(uri)
