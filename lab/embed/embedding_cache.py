"""A Parquet embedding cache keyed by (model id, text hash): unchanged text is never re-embedded."""
from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lab.embed.base import Embedder


QUERY_KEY = "\x00query\x00"  # prefixed to a text before hashing, for an asymmetric model's query vectors


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def cache_folder(root: str | Path, model_id: str) -> Path:
    return Path(root) / re.sub(r"[^A-Za-z0-9_.-]", "_", model_id)


def recorded_dim(root: str | Path | None, model_id: str) -> int | None:
    """The dimension of the vectors cached for ``model_id`` under ``root`` (None: none cached)."""
    if root is None:
        return None
    for part in sorted(cache_folder(root, model_id).glob("part-*.parquet"))[:1]:
        vector = pq.read_schema(part).field("vector").type
        return int(vector.list_size) if hasattr(vector, "list_size") else None
    return None


class EmbeddingCache:
    """Vectors of one model, in part files under ``root/<model>/``; loaded whole into memory.

    New vectors are buffered and written as a new part file by ``flush`` (write to a temporary
    name, then rename, so a killed process leaves no half file). ``compact`` merges the parts.
    """

    def __init__(self, root: str | Path | None, model_id: str, dim: int) -> None:
        # no root: a cache in memory only (``flush`` keeps the vectors, writes nothing)
        self.dir = None if root is None else cache_folder(root, model_id)
        self.model_id = model_id
        self.dim = dim
        self._index: dict[str, int] = {}
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        self._pending_keys: list[str] = []
        self._pending: list[np.ndarray] = []
        self.hits = 0
        self.misses = 0
        self._load()

    def _schema(self) -> pa.Schema:
        return pa.schema([("text_hash", pa.string()), ("vector", pa.list_(pa.float32(), self.dim))])

    def _load(self) -> None:
        if self.dir is None or not self.dir.is_dir():
            return
        keys: list[str] = []
        blocks: list[np.ndarray] = []
        for part in sorted(self.dir.glob("part-*.parquet")):
            table = pq.read_table(part)
            keys.extend(table["text_hash"].to_pylist())
            flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
            blocks.append(np.asarray(flat, dtype=np.float32).reshape(-1, self.dim))
        if blocks:
            self._vectors = np.vstack(blocks)
            self._index = {k: i for i, k in enumerate(keys)}

    def __len__(self) -> int:
        return len(self._index) + len(self._pending_keys)

    def embed(self, embedder: Embedder, texts: Sequence[str], *, queries: bool = False) -> np.ndarray:
        """Vectors for ``texts``: cached ones looked up, the rest embedded once and remembered.

        ``queries``: encode them as search queries; an asymmetric model's query vectors are kept
        under keys of their own (the same text is another vector as a query than as a passage)."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        as_query = queries and not getattr(embedder, "symmetric", True)
        keys = [text_hash(QUERY_KEY + t) if as_query else text_hash(t) for t in texts]
        pending = {k: i for i, k in enumerate(self._pending_keys)}
        todo: dict[str, list[int]] = {}
        for i, key in enumerate(keys):
            if key in self._index:
                out[i] = self._vectors[self._index[key]]
            elif key in pending:
                out[i] = self._pending[pending[key]]
            else:
                todo.setdefault(key, []).append(i)
        self.hits += len(texts) - len(todo)  # a repeat inside the batch is embedded once
        if todo:
            first = [positions[0] for positions in todo.values()]
            batch = [texts[i] for i in first]
            vectors = embedder.embed_queries(batch) if queries else embedder.embed(batch)
            self.misses += len(first)
            for (key, positions), vector in zip(todo.items(), vectors):
                out[positions] = vector
                self._pending_keys.append(key)
                self._pending.append(vector)
        return out

    def missing(self, texts: Sequence[str]) -> list[str]:
        """The distinct texts among ``texts`` (as passages) whose vectors the cache lacks, in first-seen
        order: what an engine embedding elsewhere must compute."""
        pending = set(self._pending_keys)
        out: dict[str, str] = {}
        for text in texts:
            key = text_hash(text)
            if key not in self._index and key not in pending and key not in out:
                out[key] = text
        return list(out.values())

    def add(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Remember vectors computed elsewhere for ``texts`` (as passages, each not cached yet), as
        ``embed`` remembers its own: pending until ``flush``."""
        if len(texts) != len(vectors) or (len(vectors) and vectors.shape[1] != self.dim):
            raise ValueError(f"{len(texts)} texts but vectors of shape {vectors.shape} (dim {self.dim})")
        for text, vector in zip(texts, np.asarray(vectors, dtype=np.float32)):
            self._pending_keys.append(text_hash(text))
            self._pending.append(vector)
        self.misses += len(texts)

    def flush(self) -> int:
        """Write buffered vectors as one new part file; returns how many were written."""
        if not self._pending_keys:
            return 0
        vectors = np.vstack(self._pending).astype(np.float32)
        if self.dir is not None:
            self._write(vectors)
        start = len(self._vectors)
        self._vectors = np.vstack([self._vectors, vectors])
        for offset, key in enumerate(self._pending_keys):
            self._index[key] = start + offset
        n = len(self._pending_keys)
        self._pending_keys, self._pending = [], []
        return n

    def _write(self, vectors: np.ndarray) -> None:
        assert self.dir is not None
        self.dir.mkdir(parents=True, exist_ok=True)
        table = pa.table(
            {
                "text_hash": self._pending_keys,
                "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), self.dim),
            },
            schema=self._schema(),
        )
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = self.dir / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.dir / name)

    def compact(self) -> int:
        """Rewrite all parts as one file; returns the number of parts merged."""
        self.flush()
        parts = sorted(self.dir.glob("part-*.parquet")) if self.dir is not None and self.dir.is_dir() else []
        if len(parts) <= 1:
            return len(parts)
        keys = sorted(self._index, key=self._index.get)
        table = pa.table(
            {
                "text_hash": keys,
                "vector": pa.FixedSizeListArray.from_arrays(
                    pa.array(self._vectors[[self._index[k] for k in keys]].ravel()), self.dim
                ),
            },
            schema=self._schema(),
        )
        name = f"part-{uuid.uuid4().hex}.parquet"
        tmp = self.dir / f".{name}.tmp"
        pq.write_table(table, tmp)
        os.replace(tmp, self.dir / name)
        for part in parts:
            part.unlink()
        return len(parts)


class SparseCache:
    """Sparse vectors of one model (``embedder.embed`` gives scipy CSR rows), cached like
    ``EmbeddingCache`` by text hash, in part files of (text_hash, indices, values) under
    ``root/<model>/``; no root: in memory only."""

    def __init__(self, root: str | Path | None, model_id: str, dim: int) -> None:
        self.dir = None if root is None else cache_folder(root, model_id)
        self.model_id, self.dim = model_id, dim
        self._rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._pending: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.hits = self.misses = 0
        if self.dir is not None and self.dir.is_dir():
            for part in sorted(self.dir.glob("part-*.parquet")):
                table = pq.read_table(part).to_pydict()
                for key, ix, vl in zip(table["text_hash"], table["indices"], table["values"]):
                    self._rows[key] = (np.asarray(ix, dtype=np.int32), np.asarray(vl, dtype=np.float32))

    def __len__(self) -> int:
        return len(self._rows) + len(self._pending)

    def embed(self, embedder: Embedder, texts: Sequence[str], *, queries: bool = False):
        """A CSR matrix of ``texts``' rows: cached ones looked up, the rest encoded once."""
        from scipy.sparse import csr_matrix

        keys = [text_hash(t) for t in texts]
        todo = {}
        for i, key in enumerate(keys):
            if key not in self._rows and key not in self._pending:
                todo.setdefault(key, i)
        self.hits += len(texts) - len(todo)
        if todo:
            batch = [texts[i] for i in todo.values()]
            fresh = (embedder.embed_queries(batch) if queries else embedder.embed(batch)).tocsr()
            self.misses += len(batch)
            for row, key in enumerate(todo):
                lo, hi = fresh.indptr[row], fresh.indptr[row + 1]
                self._pending[key] = (fresh.indices[lo:hi].astype(np.int32), fresh.data[lo:hi].astype(np.float32))
        rows = [self._rows.get(k) or self._pending[k] for k in keys]
        indptr = np.cumsum([0] + [len(ix) for ix, _ in rows])
        indices = np.concatenate([ix for ix, _ in rows]) if rows else np.zeros(0, np.int32)
        data = np.concatenate([vl for _, vl in rows]) if rows else np.zeros(0, np.float32)
        return csr_matrix((data, indices, indptr), shape=(len(texts), self.dim), dtype=np.float32)

    def flush(self) -> int:
        if not self._pending:
            return 0
        if self.dir is not None:
            self.dir.mkdir(parents=True, exist_ok=True)
            keys = list(self._pending)
            table = pa.table({
                "text_hash": keys,
                "indices": pa.array([self._pending[k][0] for k in keys], type=pa.list_(pa.int32())),
                "values": pa.array([self._pending[k][1] for k in keys], type=pa.list_(pa.float32())),
            })
            name = f"part-{uuid.uuid4().hex}.parquet"
            tmp = self.dir / f".{name}.tmp"
            pq.write_table(table, tmp)
            os.replace(tmp, self.dir / name)
        n = len(self._pending)
        self._rows.update(self._pending)
        self._pending = {}
        return n
