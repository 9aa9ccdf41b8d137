"""The chunks table: the rows a memory is indexed by, visible while their memory shows them."""
from __future__ import annotations

from typing import Any

import polars as pl
import pyarrow as pa

from lab.store.memories import MemoriesTable
from lab.store.table import DeltaFrame, in_list


class ChunksTable:
    """Chunk rows, keyed by (memory_id, index_hash): a chunk is visible while a current memory
    carries its index hash. Chunks are committed before the memories commit that shows them."""

    def __init__(self, delta: DeltaFrame, memories: MemoriesTable) -> None:
        self.delta = delta
        self.memories = memories

    def visible(self, namespace: str | None = None) -> pl.DataFrame:
        """Visible chunks: those whose (memory_id, index_hash) matches a current memory.

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
            # (never refreshed after the last read: the version the caller stamps is the one read)
            if not memories.committed_after(read_at):
                break
        mem = read.select(pl.col("id").alias("memory_id"), "index_hash", "namespace")
        if namespace is not None:
            chunks = chunks.filter(pl.col("namespace") == namespace)
            mem = mem.filter(pl.col("namespace") == namespace)
        return chunks.join(mem.drop("namespace"), on=["memory_id", "index_hash"], how="semi")

    def append(self, chunks: pa.Table) -> None:
        """Commit chunk rows, first deleting stored rows with the same chunk ids.

        A chunk id names its memory and the memory's index hash, so a stored row with a new row's
        id can only be the orphan of a save cut off between its chunks commit and its memories
        commit: the retry of that save would otherwise store every chunk twice."""
        ids = chunks.column("chunk_id").to_pylist()
        present = self.delta.frame().filter(pl.col("chunk_id").is_in(ids))["chunk_id"].unique().sort().to_list()
        if present:
            self.delta.delete(in_list("chunk_id", present))
        self.delta.append(chunks)

    def drop_superseded(self, rows: list[dict[str, Any]]) -> None:
        """Delete the chunk rows of these memories that their new index hash no longer shows.

        Only after the memories commit: a process killed before it leaves each memory as it was,
        its old chunks still visible; one killed after it leaves invisible rows that `lab store
        check` reports as orphans and compact or repair removes. Without this every content update
        left its old chunks behind, and check took them for the leftovers of a cut-off save."""
        current = pl.DataFrame({"memory_id": [r["id"] for r in rows], "current": [r["index_hash"] for r in rows]})
        stored = self.delta.frame().select("chunk_id", "memory_id", "index_hash")
        old = stored.join(current, on="memory_id").filter(pl.col("index_hash") != pl.col("current"))
        ids = old["chunk_id"].unique().sort().to_list()
        if ids:
            self.delta.delete(in_list("chunk_id", ids))

    def orphans(self) -> tuple[list[str], list[str]]:
        """(chunk ids no memory shows, chunk ids stored more than once): what a cut-off save leaves."""
        stored = self.delta.frame()
        stale = stored.join(self.visible().select("chunk_id"), on="chunk_id", how="anti")["chunk_id"].unique().sort()
        twice = stored.filter(pl.col("chunk_id").is_duplicated() & ~pl.col("chunk_id").is_in(stale.to_list()))
        return stale.to_list(), twice["chunk_id"].unique().sort().to_list()

    def remove_orphans(self) -> dict[str, int]:
        """Delete chunk rows no memory shows and keep one row of any chunk stored twice, whatever
        their age (at most two commits: the duplicates are deleted, then written back once)."""
        stale, twice = self.orphans()
        if stale:
            self.delta.delete(in_list("chunk_id", stale))
        if twice:
            keep = self.delta.frame().filter(pl.col("chunk_id").is_in(twice)).unique("chunk_id", keep="first",
                                                                                     maintain_order=True)
            self.delta.delete(in_list("chunk_id", twice))
            self.delta.append(keep.to_arrow().cast(self.delta.schema))
        return {"stale_chunks_removed": len(stale), "duplicate_chunks_removed": len(twice)}
