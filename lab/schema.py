"""Arrow schemas and column names of every table lab stores or passes around, declared once."""
from __future__ import annotations

import pyarrow as pa

MEMORY_TYPES: tuple[str, ...] = (
    "semantic", "episodic", "working", "fact", "decision", "entity", "event", "topic", "anchor",
)
EDGE_RELATIONS: tuple[str, ...] = (
    "related_to", "supersedes", "contradicts", "derived_from", "part_of",
)

TS = pa.timestamp("us", tz="UTC")

MEMORIES = pa.schema([
    pa.field("id", pa.string(), nullable=False),
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("content", pa.string(), nullable=False),
    # sha256 of (namespace, content): the idempotency key.
    pa.field("content_hash", pa.string(), nullable=False),
    # hash of what gets indexed (content, title, tags): chunks carry it, and only chunks whose
    # index_hash matches their memory's current one are visible.
    pa.field("index_hash", pa.string(), nullable=False),
    pa.field("title", pa.string(), nullable=False),
    pa.field("tags", pa.list_(pa.string()), nullable=False),
    pa.field("type", pa.string(), nullable=False),
    pa.field("source", pa.string(), nullable=False),
    pa.field("created_at", TS, nullable=False),
    pa.field("updated_at", TS, nullable=False),
    pa.field("accessed_at", TS, nullable=True),
    pa.field("access_count", pa.int64(), nullable=False),
    pa.field("importance", pa.float64(), nullable=False),
    pa.field("pinned", pa.bool_(), nullable=False),
    pa.field("valid", pa.bool_(), nullable=False),
    pa.field("superseded_by", pa.string(), nullable=True),
    pa.field("metadata", pa.string(), nullable=False),  # JSON object
])


def chunks_schema(dim: int) -> pa.Schema:
    """Chunks with their embeddings; ``dim`` is the embedder's dimension."""
    return pa.schema([
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("memory_id", pa.string(), nullable=False),
        pa.field("namespace", pa.string(), nullable=False),
        pa.field("index_hash", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),  # what is indexed (title/tags prepended)
        pa.field("start_char", pa.int32(), nullable=False),
        pa.field("end_char", pa.int32(), nullable=False),
        pa.field("n_tokens", pa.int32(), nullable=False),
        pa.field("embedding", pa.list_(pa.float32(), dim), nullable=False),
    ])


EDGES = pa.schema([
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("src", pa.string(), nullable=False),
    pa.field("dst", pa.string(), nullable=False),
    pa.field("relation", pa.string(), nullable=False),
    pa.field("weight", pa.float64(), nullable=False),
    pa.field("created_at", TS, nullable=False),
])

ACCESS_LOG = pa.schema([
    pa.field("memory_id", pa.string(), nullable=False),
    pa.field("namespace", pa.string(), nullable=False),
    pa.field("accessed_at", TS, nullable=False),
    pa.field("context", pa.string(), nullable=False),
])

NAMESPACES = pa.schema([
    pa.field("name", pa.string(), nullable=False),
    pa.field("created_at", TS, nullable=False),
    pa.field("description", pa.string(), nullable=False),
])

# One row per (query, memory, signal): the candidate cache every query-time parameter works on.
CANDIDATES = pa.schema([
    pa.field("qid", pa.string(), nullable=False),
    pa.field("memory_id", pa.string(), nullable=False),
    pa.field("signal", pa.string(), nullable=False),
    pa.field("rank", pa.int32(), nullable=False),  # 1-based
    pa.field("score", pa.float64(), nullable=False),
])
