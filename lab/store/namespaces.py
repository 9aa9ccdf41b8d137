"""The namespaces table: the names a store knows, each created once."""
from __future__ import annotations

import pyarrow as pa

from lab.errors import ConflictError, NotFoundError
from lab.schema import NAMESPACES
from lab.store.records import utcnow, validate_namespace
from lab.store.table import DeltaFrame


SHOWN = 20  # known namespaces an unknown one's error lists


class NamespacesTable:
    """One row per namespace (name, created_at, description)."""

    def __init__(self, delta: DeltaFrame) -> None:
        self.delta = delta
        # the names as of one frame of the table, sorted and as a set: a store of 10,000 namespaces
        # (one per user) is asked for one on every search, and sorting them each time cost more
        self._known: tuple[object, list[str], frozenset[str]] = (None, [], frozenset())

    def _names(self) -> tuple[list[str], frozenset[str]]:
        frame = self.delta.frame()
        if self._known[0] is not frame:  # the cache hands back the same frame while nothing changed
            names = sorted(frame["name"].to_list())
            self._known = (frame, names, frozenset(names))
        return self._known[1], self._known[2]

    def names(self) -> list[str]:
        return list(self._names()[0])

    def require(self, name: str) -> str:
        """``name``, if it is a valid namespace the store knows (else the error lists some known ones)."""
        validate_namespace(name)
        names, known = self._names()
        if name not in known:
            shown = ", ".join(repr(n) for n in names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
            raise NotFoundError(f"unknown namespace {name!r}; known: [{shown}]")
        return name

    def create(self, name: str, description: str = "", *, exist_ok: bool = False) -> bool:
        """Create a namespace; returns False if it existed (and exist_ok)."""
        validate_namespace(name)
        if name in self._names()[1]:
            if exist_ok:
                return False
            raise ConflictError(f"namespace {name!r} exists already")
        row = pa.table({"name": [name], "created_at": [utcnow()], "description": [description]})
        self.delta.append(row.cast(NAMESPACES))
        return True

    def create_missing(self, names: list[str]) -> list[str]:
        """Create those of ``names`` the store does not know, in one commit (a bulk load into many
        namespaces made a commit, and a file, per namespace); returns them."""
        for name in names:
            validate_namespace(name)
        known = self._names()[1]
        new = sorted(set(names) - known)
        if new:
            now = utcnow()
            rows = pa.table({"name": new, "created_at": [now] * len(new), "description": [""] * len(new)})
            self.delta.append(rows.cast(NAMESPACES))
        return new

    def delete(self, name: str) -> None:
        """Take the namespace's row out (its contents are the store's to delete first)."""
        self.delta.delete(f"name = '{name}'")
