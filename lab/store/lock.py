"""The store's writer lock: an OS file lock writers in different processes take turns on."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from lab.errors import ConflictError
from lab.store.layout import WRITE_LOCK
from lab.store.table import DeltaFrame


class WriterLock:
    """The lock file of one store folder (made on first use), re-entrant in one thread; readers
    never take it. ``with lock.held(timeout):`` acquires it with a bounded wait.

    While the lock is held no other process can commit, so each table's log is read once on
    entry and its version is then known without re-reading the log on every check."""

    def __init__(self, root: Path, tables: Iterable[DeltaFrame]) -> None:
        self.root = root
        self.tables = tuple(tables)
        self._lock = None

    def load(self) -> Any:
        """The file lock (its module loaded and the lock made on first use: not at import)."""
        if self._lock is None:
            from filelock import FileLock

            self._lock = FileLock(str(self.root / WRITE_LOCK))
        return self._lock

    def held(self, timeout: float) -> "_Held":
        return _Held(self.load(), self.root, self.tables, timeout)


class _Held:
    """One hold of a ``WriterLock``: says which store was busy when the wait runs out."""

    def __init__(self, lock: Any, root: Path, tables: tuple[DeltaFrame, ...], timeout: float) -> None:
        self.lock, self.root, self.tables, self.timeout = lock, root, tables, timeout

    def __enter__(self) -> None:
        from filelock import Timeout

        lock = self.lock
        try:
            lock.acquire(timeout=self.timeout, poll_interval=0.002)  # short polls: waiters get their turn
        except Timeout:
            raise ConflictError(f"store {self.root} is busy: another writer held its lock for over "
                                f"{self.timeout:g} s (set LAB_WRITE_LOCK_TIMEOUT to wait longer)") from None
        if lock.lock_counter == 1:  # the outermost hold in this thread
            try:
                for table in self.tables:
                    table.hold()
            except BaseException:  # a damaged log: never keep the lock (or a table held) behind
                for table in self.tables:
                    table.unhold()
                lock.release()
                raise

    def __exit__(self, *exc: Any) -> None:
        lock = self.lock
        if lock.lock_counter == 1:
            for table in self.tables:
                table.unhold()
        lock.release()
