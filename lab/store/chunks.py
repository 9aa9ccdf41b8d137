"""The chunks table: the rows a memory is indexed by, visible while their memory shows them."""
from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from lab.store.keys import ColumnHashes
from lab.store.memories import MemoriesTable
from lab.store.table import DeltaFrame, StoredRows, in_list


class ChunksTable:
    """Chunk rows, keyed by (memory_id, index_hash): a chunk is visible while a current memory
    carries its index hash. Chunks are committed before the memories commit that shows them."""

    def __init__(self, delta: DeltaFrame, memories: MemoriesTable) -> None:
        self.delta = delta
        self.memories = memories
        # the stored chunk ids, hashed: a save asks whether its ids are stored (the orphans of a
        # cut-off save) without scanning a table that grows with every save
        self.stored_ids = ColumnHashes(delta, "chunk_id")

    def visible(self, namespace: str | None = None, *, embeddings: bool = True) -> pl.DataFrame:
        """Visible chunks: those whose (memory_id, index_hash) matches a current memory; their
        vectors read from the table's files when ``embeddings`` (the cache does not hold them)."""
        frame, stored = self.visible_rows(namespace)
        if embeddings:
            frame = frame.with_columns(stored.read("embedding", frame["_row"].to_numpy()).alias("embedding"))
            return frame.select(self.delta.schema.names)
        return frame.drop("_row")

    def visible_rows(self, namespace: str | None = None) -> tuple[pl.DataFrame, StoredRows]:
        """Visible chunks without their vectors, with a ``_row`` column saying where each is stored
        in the ``StoredRows`` returned beside them (an index reads the vectors a file at a time).

        Memories are read before chunks: a memory's chunks are committed before it, so every memory
        read has its chunks in the chunks read after (the other order races with a writer and can
        drop a just-saved memory's chunks while its version is counted as seen). Chunk rows a
        memory shows are deleted only after a memories commit that stops showing them (an update,
        a hard delete), so when the memories table did not move while the chunks were read, none
        of the memories read lost its chunks; when it did, both are read again."""
        memories = self.memories.delta
        for attempt in range(3):  # each retry needs another writer's commit in a window of milliseconds
            if attempt:
                memories.refresh()  # a server looks for other writers only every so often: look now
            read = self.memories.stored()
            read_at = memories.known_version
            chunks = self.delta.frame()
            stored = self.delta.stored_rows()
            # (never refreshed after the last read: the version the caller stamps is the one read)
            if not memories.committed_after(read_at):
                break
        mem = read.select(pl.col("id").alias("memory_id"), "index_hash", "namespace")
        chunks = chunks.with_row_index("_row")
        if namespace is not None:
            chunks = chunks.filter(pl.col("namespace") == namespace)
            mem = mem.filter(pl.col("namespace") == namespace)
        # which rows are visible is found on the key columns alone; the rows are gathered only when
        # some are not (all are, but after a crash)
        keys = chunks.select("memory_id", "index_hash").with_row_index("_at")
        at = keys.join(mem.drop("namespace"), on=["memory_id", "index_hash"], how="semi")["_at"]
        return (chunks if at.len() == chunks.height else chunks[at.sort()]), stored

    def append(self, chunks: pa.Table) -> None:
        """Commit chunk rows, first deleting stored rows with the same chunk ids.

        A chunk id names its memory and the memory's index hash, so a stored row with a new row's
        id can only be the orphan of a save cut off between its chunks commit and its memories
        commit: the retry of that save would otherwise store every chunk twice."""
        ids = chunks.column("chunk_id").to_pylist()
        if not self.stored_ids.may_hold(ids):  # the common case, known without a scan of every row
            self.delta.append(chunks)
            return
        present = self.stored(ids)
        if present:
            self.delta.delete(in_list("chunk_id", present))
        self.delta.append(chunks)

    def stored(self, ids: list[str]) -> list[str]:
        """Which of ``ids`` have a stored row (a scan of every row)."""
        return self.delta.frame().filter(pl.col("chunk_id").is_in(ids))["chunk_id"].unique().sort().to_list()

    def drop_superseded(self, rows: list[dict[str, Any]], ids: list[str] | None = None) -> None:
        """Delete the chunk rows of these memories that their new index hash no longer shows.

        Only after the memories commit: a process killed before it leaves each memory as it was,
        its old chunks still visible; one killed after it leaves invisible rows that `lab store
        check` reports as orphans and compact or repair removes. Without this every content update
        left its old chunks behind, and check took them for the leftovers of a cut-off save."""
        ids = self.superseded(rows) if ids is None else ids  # ids: ``superseded(rows)``, read before
        if ids:
            self.delete(in_list("chunk_id", ids))

    def delete(self, predicate: str) -> None:
        """Delete the chunk rows matching a SQL predicate in one commit (the chunk id hashes follow)."""
        self.stored_ids.before_rewrite()
        known = self.delta.known_version
        self.stored_ids.rewritten([], known, self.delta.delete(predicate))

    def superseded(self, rows: list[dict[str, Any]]) -> list[str]:
        """The stored chunk ids of these memories that their rows' index hashes no longer show."""
        current = pl.DataFrame({"memory_id": [r["id"] for r in rows], "current": [r["index_hash"] for r in rows]})
        stored = (self.delta.frame().select("chunk_id", "memory_id", "index_hash")
                  .filter(pl.col("memory_id").is_in(current["memory_id"].to_list())))
        old = stored.join(current, on="memory_id").filter(pl.col("index_hash") != pl.col("current"))
        return old["chunk_id"].unique().sort().to_list()

    def orphans(self) -> tuple[list[str], list[str]]:
        """(chunk ids no memory shows, chunk ids stored more than once): what a cut-off save leaves."""
        stored = self.delta.frame()
        stale = stored.join(self.visible(embeddings=False).select("chunk_id"), on="chunk_id",
                            how="anti")["chunk_id"].unique().sort()
        twice = stored.filter(pl.col("chunk_id").is_duplicated() & ~pl.col("chunk_id").is_in(stale.to_list()))
        return stale.to_list(), twice["chunk_id"].unique().sort().to_list()

    def remove_orphans(self) -> dict[str, int]:
        """Delete chunk rows no memory shows and keep one row of any chunk stored twice, whatever
        their age (at most two commits: the duplicates are deleted, then written back once)."""
        stale, twice = self.orphans()
        if stale:
            self.delta.delete(in_list("chunk_id", stale))
        if twice:
            rows = self.delta.frame().with_row_index("_row")
            keep = rows.filter(pl.col("chunk_id").is_in(twice)).unique("chunk_id", keep="first", maintain_order=True)
            vectors = self.delta.stored_rows().read("embedding", keep["_row"].to_numpy())
            keep = keep.with_columns(vectors.alias("embedding")).select(self.delta.schema.names)
            self.delta.delete(in_list("chunk_id", twice))
            self.delta.append(keep.to_arrow().cast(self.delta.schema))
        return {"stale_chunks_removed": len(stale), "duplicate_chunks_removed": len(twice)}
