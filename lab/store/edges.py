"""The edges table: typed links between two memories of one namespace."""
from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from lab.errors import NotFoundError, ValidationError
from lab.schema import EDGE_RELATIONS, EDGES
from lab.store.memories import MemoriesTable
from lab.store.records import validate_id
from lab.store.table import DeltaFrame


class EdgesTable:
    """Edge rows (src, dst, relation, ...); an edge counts while both its memories exist."""

    def __init__(self, delta: DeltaFrame, memories: MemoriesTable) -> None:
        self.delta = delta
        self.memories = memories

    def add(self, edges: list[dict[str, Any]]) -> int:
        """Add edges whose ends exist (same namespace); duplicates of an existing edge are skipped."""
        if not edges:
            return 0
        ns_of = self.memories.namespace_of()
        existing = set(
            zip(*(self.delta.frame()[c].to_list() for c in ("src", "dst", "relation")))
        ) if self.delta.frame().height else set()
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
            self.delta.append(pa.Table.from_pylist(rows, schema=EDGES))
        return len(rows)

    def live(
        self,
        namespace: str | None = None,
        *,
        memory_id: str | None = None,
        relation: str | None = None,
    ) -> pl.DataFrame:
        """Edges whose two ends still exist, filtered by namespace, touching memory, relation."""
        frame = self.delta.frame()
        if namespace is not None:
            frame = frame.filter(pl.col("namespace") == namespace)
        if relation is not None:
            if relation not in EDGE_RELATIONS:
                raise ValidationError(f"unknown relation {relation!r}; known: {list(EDGE_RELATIONS)}")
            frame = frame.filter(pl.col("relation") == relation)
        if memory_id is not None:
            frame = frame.filter((pl.col("src") == memory_id) | (pl.col("dst") == memory_id))
        if frame.height == 0:  # nothing to check against every memory id (a million of them: a second)
            return frame.sort(["src", "dst", "relation"])
        ids = self.memories.stored()["id"].implode()  # one list value: no Python list of every id
        return frame.filter(pl.col("src").is_in(ids) & pl.col("dst").is_in(ids)).sort(
            ["src", "dst", "relation"]
        )

    def remove(self, src: str, dst: str, relation: str | None = None) -> int:
        """Delete the edge(s) src -> dst (of ``relation``, or of any); returns how many."""
        validate_id(src, "src")
        validate_id(dst, "dst")
        match = self.live(memory_id=src, relation=relation).filter(
            (pl.col("src") == src) & (pl.col("dst") == dst)
        )
        if match.height == 0:
            raise NotFoundError(f"no edge {src} -> {dst}" + (f" ({relation})" if relation else ""))
        pred = f"src = '{src}' AND dst = '{dst}'"
        if relation:
            pred += f" AND relation = '{relation}'"
        self.delta.delete(pred)
        return match.height
