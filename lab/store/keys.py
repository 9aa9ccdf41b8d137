"""Whether values may already be stored in a column of a table, answered from hashes kept up to date
with the table instead of a scan of it on every write."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import polars as pl

from lab.store.table import DeltaFrame


class ColumnHashes:
    """The sorted 64-bit hashes of one column of a table's rows. A new table version that only
    appended rows (``DeltaFrame.rows_generation`` unchanged) hashes the appended rows alone; any
    other change hashes the column again. A hash match may be a collision: ``may_hold`` answers
    "perhaps" and the caller then looks in the rows themselves; a miss is certain."""

    def __init__(self, delta: DeltaFrame, column: str) -> None:
        self.delta = delta
        self.column = column
        self._hashes = np.zeros(0, dtype=np.uint64)
        self._generation = -1
        self._rows = 0
        self._version = -1  # the table version the hashes are of
        self.rehashes = 0  # times the whole column was hashed (tests hold it at one per rewrite)

    def follow(self) -> None:
        """Bring the hashes up to the table's current version (a server warming up calls this, so
        that its first write does not hash a whole column)."""
        frame = self.delta.frame()
        generation = self.delta.rows_generation
        if generation != self._generation or frame.height < self._rows:
            self._hashes = np.sort(_hash(frame[self.column]))
            self.rehashes += 1
        elif frame.height > self._rows:
            fresh = np.sort(_hash(frame[self.column].slice(self._rows)))
            self._hashes = np.insert(self._hashes, np.searchsorted(self._hashes, fresh), fresh)
        self._generation, self._rows, self._version = generation, frame.height, self.delta.rows_version

    def rewritten(self, values: Sequence[str], before: int, after: int) -> None:
        """Our commit moved the table from version ``before`` to ``after``, rewriting or deleting rows
        and writing ``values``: their hashes are added, and those of rows it took out stay (a hash
        kept for a value no longer stored answers "perhaps", never a wrong "no"). Without this a
        rewrite hashed the whole column again, a cost that grows with the table (benchmarks/scale_store.py).
        When another commit may sit in between, the next look hashes the column again."""
        if self._generation < 0 or self._version != before or after != before + 1:
            return
        if len(values):
            fresh = np.sort(_hash(pl.Series(list(values), dtype=pl.String)))
            self._hashes = np.insert(self._hashes, np.searchsorted(self._hashes, fresh), fresh)
        frame = self.delta.frame()  # at ``after``: the frame later appends are counted from
        if self.delta.rows_version != after:  # another commit came in since: hash everything next time
            self._generation = -1
            return
        self._generation, self._rows, self._version = self.delta.rows_generation, frame.height, after

    def before_rewrite(self) -> None:
        """Follow the table up to now (appended rows alone: cheap) before a rewrite of ours, so that
        ``rewritten`` finds the hashes at the version the rewrite starts from."""
        if self._generation >= 0:
            self.follow()

    def may_hold(self, values: Sequence[str]) -> bool:
        """False when no value is stored in the column; True when one may be."""
        self.follow()
        if not len(values) or not len(self._hashes):
            return False
        wanted = _hash(pl.Series(values, dtype=pl.String))
        at = np.minimum(np.searchsorted(self._hashes, wanted), len(self._hashes) - 1)
        return bool((self._hashes[at] == wanted).any())


def _hash(values: pl.Series) -> np.ndarray:
    # polars' hash is stable within a process, which is all these hashes live for
    return values.hash(seed=0).to_numpy().astype(np.uint64, copy=False)
