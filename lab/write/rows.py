"""From validated memory rows to chunk rows: index-time context, token windows, embeddings."""
from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from lab.chunking import Chunk, chunk_text
from lab.config import ChunkConfig
from lab.embed.base import Tokenizer
from lab.schema import chunks_schema
from lab.store.records import chunk_id, episode_expr, episode_of
from lab.store.store import Store

EmbedFn = Callable[[Sequence[str]], tuple[np.ndarray, int]]  # texts -> (vectors, texts embedded anew)


def index_context(store: Store, rows: list[dict[str, Any]], cfg: ChunkConfig) -> dict[str, str]:
    """Per memory id, the index-time context ``cfg`` asks for: its date and/or the earlier
    memories of its episode (from this batch and from the store), oldest first."""
    if not cfg.context_turns and not cfg.time_in_text:
        return {}
    episode = {r["id"]: episode_of(r["metadata"]) if cfg.context_turns else None for r in rows}
    wanted: dict[str, set[str]] = {}  # namespace -> episodes of this batch
    for r in rows:
        if episode[r["id"]] is not None:
            wanted.setdefault(r["namespace"], set()).add(episode[r["id"]])
    turns: dict[tuple[str, str], list[tuple[Any, str, str]]] = {}  # (namespace, episode) -> (time, id, text)
    for ns, episodes in wanted.items():
        stored = (
            store.memories(ns)
            .filter(pl.col("valid") & ~pl.col("id").is_in(list(episode)))  # an update's row replaces its stored version
            .with_columns(episode_expr().alias("_episode"))
            .filter(pl.col("_episode").is_in(list(episodes)))
        )
        for ep, created, mid, content in stored.select("_episode", "created_at", "id", "content").iter_rows():
            turns.setdefault((ns, ep), []).append((created, mid, content))
    for r in rows:
        if episode[r["id"]] is not None:
            turns.setdefault((r["namespace"], episode[r["id"]]), []).append((r["created_at"], r["id"], r["content"]))
    position = {}
    for group in turns.values():
        group.sort(key=lambda t: (t[0], t[1]))
        position.update((t[1], i) for i, t in enumerate(group))
    out = {}
    for r in rows:
        parts = [f"{r['created_at'].day} {r['created_at']:%B %Y}"] if cfg.time_in_text else []
        if episode[r["id"]] is not None:
            at = position[r["id"]]
            group = turns[(r["namespace"], episode[r["id"]])]
            parts.extend(t[2] for t in group[max(0, at - cfg.context_turns):at])
        if parts:
            out[r["id"]] = "\n".join(parts)
    return out


def chunk_records(
    store: Store, rows: list[dict[str, Any]], cfg: ChunkConfig, tokenizer: Tokenizer,
) -> tuple[list[dict[str, Any]], list[str]]:
    """The chunk rows of ``rows`` without embeddings, and the texts to embed (one per chunk)."""
    records: list[dict[str, Any]] = []
    texts: list[str] = []
    context = index_context(store, rows, cfg)
    for row in rows:
        # the main view (with its index-time context), then each extra view (ChunkConfig.views):
        # a memory without context has no view chunks, its main chunks are its plain ones
        ctx = context.get(row["id"], "")
        for view, view_ctx in (("", ctx), *((v, "") for v in (cfg.indexed_views if ctx else ()))):
            _add_chunks(records, texts, row, view, chunk_text(row["content"], tokenizer, cfg, title=row["title"],
                                                              tags=row["tags"], context=view_ctx))
    return records, texts


def _add_chunks(records: list[dict[str, Any]], texts: list[str], row: dict[str, Any], view: str,
                chunks: Iterable[Chunk]) -> None:
    for chunk in chunks:
        records.append({
            "chunk_id": chunk_id(row["id"], row["index_hash"], chunk.ordinal, view),
            "memory_id": row["id"],
            "namespace": row["namespace"],
            "index_hash": row["index_hash"],
            "ordinal": chunk.ordinal,
            "text": chunk.text,
            "start_char": chunk.start_char,
            "end_char": chunk.end_char,
            "n_tokens": chunk.n_tokens,
        })
        texts.append(chunk.text)


def chunk_rows(
    store: Store, rows: list[dict[str, Any]], cfg: ChunkConfig, tokenizer: Tokenizer, dim: int, embed: EmbedFn,
) -> tuple[pa.Table, int]:
    """The chunks table of ``rows`` (token windows with their embeddings); returns (table, texts embedded anew)."""
    records, texts = chunk_records(store, rows, cfg, tokenizer)
    vectors, embedded = embed(texts)
    schema = chunks_schema(dim)
    columns = {name: [r[name] for r in records] for name in schema.names if name != "embedding"}
    columns["embedding"] = pa.FixedSizeListArray.from_arrays(
        pa.array(np.asarray(vectors, dtype=np.float32).ravel(), type=pa.float32()), dim
    )
    return pa.table(columns, schema=schema), embedded
