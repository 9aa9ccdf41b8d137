"""A store's figures (``lab stats``): counts by type, namespace and relation, and the time span."""
from __future__ import annotations

from typing import Any

import polars as pl


def describe(mem: pl.DataFrame, chunks: pl.DataFrame, edges: pl.DataFrame, *, version: str,
             namespaces: list[str], embed_model: str) -> dict[str, Any]:
    """The figures of current memories, visible chunks and current edges (of one namespace or all)."""
    out: dict[str, Any] = {
        "version": version,
        "namespaces": namespaces,
        "memories": mem.height,
        "valid": int(mem["valid"].sum()) if mem.height else 0,
        "pinned": int(mem["pinned"].sum()) if mem.height else 0,
        "chunks": chunks.height,
        "edges": edges.height,
        "embed_model": embed_model,
    }
    if mem.height:
        out["by_type"] = dict(sorted(mem.group_by("type").len().iter_rows()))
        out["by_namespace"] = dict(sorted(mem.group_by("namespace").len().iter_rows()))
        out["created_from"] = mem["created_at"].min().isoformat()
        out["created_to"] = mem["created_at"].max().isoformat()
    if edges.height:
        out["by_relation"] = dict(sorted(edges.group_by("relation").len().iter_rows()))
    return out


def store_stats(store: Any, namespace: str | None = None) -> dict[str, Any]:
    """``lab stats`` of a store (``describe``), of one namespace or all."""
    return describe(store.memories(namespace), store.chunks(namespace, embeddings=False), store.edges(namespace),
                    version=str(store.version()), namespaces=store.namespaces() if namespace is None else [namespace],
                    embed_model=store.info.embed_model)
