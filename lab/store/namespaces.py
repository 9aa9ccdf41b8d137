"""The namespaces table: the names a store knows, each created once."""
from __future__ import annotations

import pyarrow as pa

from lab.errors import ConflictError, NotFoundError
from lab.schema import NAMESPACES
from lab.store.records import utcnow, validate_namespace
from lab.store.table import DeltaFrame


class NamespacesTable:
    """One row per namespace (name, created_at, description)."""

    def __init__(self, delta: DeltaFrame) -> None:
        self.delta = delta

    def names(self) -> list[str]:
        return sorted(self.delta.frame()["name"].to_list())

    def require(self, name: str) -> str:
        """``name``, if it is a valid namespace the store knows (else the error lists the known ones)."""
        validate_namespace(name)
        known = self.names()
        if name not in known:
            raise NotFoundError(f"unknown namespace {name!r}; known: {known}")
        return name

    def create(self, name: str, description: str = "", *, exist_ok: bool = False) -> bool:
        """Create a namespace; returns False if it existed (and exist_ok)."""
        validate_namespace(name)
        if name in self.names():
            if exist_ok:
                return False
            raise ConflictError(f"namespace {name!r} exists already")
        row = pa.table({"name": [name], "created_at": [utcnow()], "description": [description]})
        self.delta.append(row.cast(NAMESPACES))
        return True

    def delete(self, name: str) -> None:
        """Take the namespace's row out (its contents are the store's to delete first)."""
        self.delta.delete(f"name = '{name}'")
