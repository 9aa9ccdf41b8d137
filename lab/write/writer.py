"""The write side: validate, de-duplicate, chunk and embed, commit, and keep the indexes in step."""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from lab.config import SaveConfig
from lab.embed import Embedder
from lab.embed.embedding_cache import EmbeddingCache
from lab.engine import Engine
from lab.engine.local import LocalEngine
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.index.manager import IndexManager
from lab.store.ingest import find_dataset_files, read_records
from lab.store.layout import StoreVersion
from lab.store.records import normalize_edge, normalize_memory, utcnow, validate_id
from lab.store.store import Store
from lab.write.lock import locked
from lab.write.rows import chunk_records, chunk_rows
from lab.write.upkeep import Upkeep
from lab.progress import progress

EDITABLE = (
    "content", "title", "tags", "type", "source", "importance", "pinned", "valid",
    "superseded_by", "metadata", "created_at",
)
Records = Iterable[Mapping[str, Any] | tuple[str, Mapping[str, Any]]]


@dataclass
class IngestReport:
    """What a save did: new ids, ids of duplicates already stored, and the work it took."""
    created: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    # requested id -> stored id, for duplicates saved earlier under another id (edges follow it)
    id_map: dict[str, str] = field(default_factory=dict)
    edges: int = 0
    chunks: int = 0
    embedded: int = 0  # texts actually run through the model (cache misses)
    seconds: float = 0.0
    version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "created": len(self.created), "duplicates": len(self.duplicates), "edges": self.edges,
            "chunks": self.chunks,
            "embedded": self.embedded, "seconds": round(self.seconds, 3), "version": self.version,
        }


EMBED_AHEAD_MIN = 64  # a save of at least this many new memories shows its embedding progress


def _progress(iterable: Iterable, total: int, desc: str, enabled: bool):
    return progress(iterable, total=total, desc=desc, unit="batch", enabled=enabled)


class Writer(Upkeep):
    """Every change to a store goes through here. Indexes are kept in step on write: those loaded
    are updated at once, the others are brought up to date and saved by ``flush``. Repair,
    rebuilds and compaction (the writes that change no memory) are ``Upkeep``'s."""
    def __init__(self, store: Store, config: SaveConfig, embedder: Embedder, indexes: IndexManager,
                 cache: EmbeddingCache | None = None, engine: Engine | None = None) -> None:
        self.store = store
        self.config = config
        self.embedder = embedder
        self.indexes = indexes
        self.cache = cache
        self.engine: Engine = engine or LocalEngine()  # where the model calls run (lab.engine)

    @locked
    def flush(self) -> list[str]:
        """Make what was written durable beyond the store: the embedding cache and the indexes
        writes changed (saved as snapshots, so the next reader loads instead of rebuilding)."""
        if self.store.read_only:
            return []  # a pinned store takes no writes, not even to its embedding cache
        if self.cache is not None:
            self.cache.flush()
        return self.indexes.save_changed()

    # ------------------------------------------------------------------ embedding
    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Vectors for ``texts`` through the cache; returns (vectors, texts embedded anew)."""
        if self.cache is None:
            return self.engine.embed(self.embedder, texts), len(texts)
        misses = self.cache.misses
        vectors = self.cache.embed(self.embedder, texts)
        return vectors, self.cache.misses - misses

    def chunk_texts(self, rows: list[dict[str, Any]]) -> list[str]:
        """The texts saving ``rows`` will embed (a server embeds them ahead, outside its store lock,
        so the save itself finds them in the embedding cache)."""
        return chunk_records(self.store, rows, self.config.chunk, self.embedder.tokenizer)[1]

    def _embed_ahead(self, rows: list[dict[str, Any]], show: bool) -> int:
        """Embed the texts saving ``rows`` will need into the cache through the engine, with progress
        when ``show``: embedding is most of a save's time, and a batch embeds all of its texts in
        one call (the Ray engine sends them all out as one job)."""
        assert self.cache is not None
        return self.engine.fill_cache(self.cache, self.embedder, self.chunk_texts(rows), progress=show)

    def _chunks(self, rows: list[dict[str, Any]]):
        return chunk_rows(self.store, rows, self.config.chunk, self.embedder.tokenizer, self.embedder.dim, self.embed)

    # ------------------------------------------------------------------ saving
    def validate(self, records: Records, namespace: str | None = None) -> list[dict[str, Any]]:
        """Normalise every record first: one bad record fails the batch before anything is written.

        Records may be (where, record) pairs so errors can name a file line.
        """
        return [row for _, row in self._validate(records, namespace)]

    def _validate(self, records: Records, namespace: str | None) -> list[tuple[str, dict[str, Any]]]:
        now = utcnow()
        out = []
        for i, item in enumerate(records):
            where, raw = item if isinstance(item, tuple) else (f"record {i}: ", item)
            out.append((where, normalize_memory(raw, now=now, namespace=namespace, where=where)))
        return out

    @locked
    def save_many(self, records: Records, namespace: str | None = None, *, batch_size: int = 512,
                  progress: bool = True) -> IngestReport:
        """Validate, de-duplicate, chunk, embed, commit and index a batch of memories.

        Idempotent: a memory whose content is already stored in its namespace is reported as a
        duplicate (with the stored id) and not written again. Each batch of ``batch_size`` is
        one chunks commit followed by one memories commit.
        """
        started = time.perf_counter()
        located = self._validate(records, namespace)
        rows = [row for _, row in located]
        report = IngestReport()
        fresh: list[dict[str, Any]] = []
        seen: dict[tuple[str, str], str] = {}
        # one look at the stored hashes for the whole batch: most batches hold no stored content
        maybe_stored = self.store.memories_table.may_hold_contents([r["content_hash"] for r in rows])
        for row in rows:
            key = (row["namespace"], row["content_hash"])
            existing = seen.get(key) or (self.store.find_by_hash(*key) if maybe_stored else None)
            if existing is not None:
                report.duplicates.append(existing)
                if existing != row["id"]:
                    report.id_map[row["id"]] = existing
                continue
            seen[key] = row["id"]
            fresh.append(row)
        ids = [r["id"] for r in fresh]
        if len(set(ids)) != len(ids):
            from collections import Counter

            dup = sorted(i for i, n in Counter(ids).items() if n > 1)[0]
            places = [where.rstrip(": ") for where, row in located if row["id"] == dup]
            raise ValidationError(f"id {dup!r} is used for different contents at {', '.join(places[:5])}")
        clash = self.store.memories_table.has_ids(ids)
        if clash:
            raise ConflictError(f"memory id(s) {sorted(clash)[:5]} exist already with other content; use update")
        batches = [fresh[i:i + batch_size] for i in range(0, len(fresh), batch_size)]
        try:
            self._save_batches(fresh, batches, report, progress)
        except BaseException:
            if self.cache is not None:  # vectors a model server gave before it failed: a re-run embeds only the rest
                self.cache.flush()
            raise
        if self.cache is not None and (report.embedded >= 256 or len(batches) > 1):
            self.cache.flush()
        report.version = str(self.store.known_version())
        report.seconds = time.perf_counter() - started
        return report

    def _save_batches(self, fresh: list[dict[str, Any]], batches: list[list[dict[str, Any]]], report: IngestReport,
                      progress: bool) -> None:
        """Embed (ahead, when that shows progress or the engine does it), then chunk, commit and
        index batch by batch: each commit is acknowledged in ``report`` as it lands."""
        ahead = self.engine.embeds_ahead or (progress and len(fresh) >= EMBED_AHEAD_MIN)
        if self.cache is not None and fresh and ahead:
            report.embedded += self._embed_ahead(fresh, progress)
        for batch in _progress(batches, len(batches), "save", progress and len(batches) > 1):
            chunks, embedded = self._chunks(batch)
            version = self.store.insert(batch, chunks)
            report.created.extend(r["id"] for r in batch)
            report.chunks += chunks.num_rows
            report.embedded += embedded
            self._index_added(pl.from_arrow(chunks), [], version)

    @locked
    def ingest(self, path: str | Path, namespace: str | None = None, *, progress: bool = True) -> IngestReport:
        """Load a memories file or folder (memories + edges) after validating all of it."""
        memories_path, edges_path = find_dataset_files(path)
        records = read_records(memories_path)
        rows = self.validate(records, namespace)  # fail before any write
        now = utcnow()
        edges = []
        if edges_path is not None:
            # every edge is checked against the file's memories and the store before anything is
            # written: an edge that would fail in add_edges must not fail after the memories landed
            ns_of = {r["id"]: r["namespace"] for r in rows}
            raw_edges = read_records(edges_path)
            # (only strings can be ids: anything else is named by normalize_edge below)
            wanted = {e.get(end) for _, e in raw_edges for end in ("src", "dst")
                      if isinstance(e.get(end), str)} - set(ns_of)
            if wanted:
                stored = self.store.memories().filter(pl.col("id").is_in(sorted(map(str, wanted))))
                ns_of.update(zip(stored["id"].to_list(), stored["namespace"].to_list()))
            for where, raw in raw_edges:
                edge = normalize_edge(raw, now=now, namespace=namespace, where=where)
                for end in ("src", "dst"):
                    if edge[end] not in ns_of:
                        raise ValidationError(f"{where}edge field '{end}': no memory with id {edge[end]!r}", field=end)
                src_ns, dst_ns = ns_of[edge["src"]], ns_of[edge["dst"]]
                if src_ns != dst_ns:
                    raise ValidationError(f"{where}edge {edge['src']} -> {edge['dst']} crosses namespaces "
                                          f"({src_ns} vs {dst_ns}); edges stay inside one namespace")
                if edge["namespace"] not in (None, src_ns):
                    raise ValidationError(f"{where}edge field 'namespace': {edge['namespace']!r} does not match "
                                          f"its memories' namespace {src_ns!r}", field="namespace")
                edges.append(edge)
        report = self.save_many(records, namespace, progress=progress)
        for edge in edges:
            edge["src"] = report.id_map.get(edge["src"], edge["src"])
            edge["dst"] = report.id_map.get(edge["dst"], edge["dst"])
        report.edges = self.store.edges_table.add(edges)
        report.version = str(self.store.version())
        return report

    def _index_added(self, chunks: pl.DataFrame, removed: list[str], version: StoreVersion) -> None:
        """Fold a write into loaded indexes at once; others are brought up to date by ``flush``
        (loading an index only to add a batch to it would make bulk ingests pay for every namespace)."""
        loaded = self.indexes.loaded()
        for ns in sorted(set(chunks["namespace"].to_list())):
            if ns in loaded:
                self.indexes.apply(ns, chunks.filter(pl.col("namespace") == ns), removed, version)
            else:
                self.indexes.mark_written(ns)

    # ------------------------------------------------------------------ editing
    @locked
    def update(self, memory_id: str, **changes: Any) -> dict[str, Any]:
        """Change fields of a memory; a change of content, title or tags re-chunks and re-embeds it."""
        unknown = sorted(set(changes) - set(EDITABLE))
        if unknown:
            raise ValidationError(f"cannot update field(s) {unknown}; editable: {list(EDITABLE)}")
        current = self.store.get(memory_id)
        raw = {k: current[k] for k in (
            "id", "namespace", "content", "title", "tags", "type", "source", "created_at",
            "accessed_at", "access_count", "importance", "pinned", "valid", "superseded_by",
        )}
        raw["metadata"] = json.loads(current["metadata"])
        # access_count in the memory row is the base; the log's accesses are added on read
        raw["access_count"] = self.store.memories_table.stored_access_count(memory_id)
        raw.update(changes)
        row = normalize_memory(raw, now=utcnow(), where=f"update {memory_id}: ")
        if changes.get("superseded_by") is not None:
            self._check_superseder(memory_id, row["namespace"], row["superseded_by"])
        row["updated_at"] = max(utcnow(), row["created_at"])
        if row["content_hash"] != current["content_hash"]:
            other = self.store.find_by_hash(row["namespace"], row["content_hash"])
            if other is not None and other != memory_id:
                raise ConflictError(f"memory {other!r} in {row['namespace']!r} already has this content")
        chunks, old_chunks = None, []
        if row["index_hash"] != current["index_hash"]:
            chunks, _ = self._chunks([row])
            # the chunks the new ones replace, from the memory's stored rows (not a walk over every
            # label of the index, which grows with the namespace)
            old_chunks = self.store.chunks_table.superseded([row])
        version = self.store.replace([row], chunks, old_chunks if chunks is not None else None)
        if chunks is not None:
            self._index_added(pl.from_arrow(chunks), old_chunks, version)
        else:
            self.indexes.touch(row["namespace"], version)
        return self.store.get(memory_id)

    def _check_superseder(self, memory_id: str, namespace: str, superseder: str) -> None:
        """``superseded_by`` names another memory of the same namespace, never the memory itself."""
        if superseder == memory_id:
            raise ValidationError(f"field 'superseded_by': memory {memory_id!r} cannot supersede itself",
                                  field="superseded_by")
        # one answer whether the id is absent or in another namespace: no caller learns of a
        # memory in a namespace it may not read
        if not self.store.memories_table.has_ids([superseder]) or self.store.get(superseder)["namespace"] != namespace:
            raise NotFoundError(f"field 'superseded_by': no memory {superseder!r} in namespace {namespace!r} "
                                "(a memory is superseded only by one of its own namespace)", field="superseded_by")

    @locked
    def delete(self, ids: Sequence[str] | str, *, hard: bool = False) -> int:
        """Soft delete (mark invalid, kept and hidden from valid-only search) or hard delete."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        for i in ids:
            validate_id(i)
        present = self.store.memories_table.has_ids(ids)
        missing = sorted(set(ids) - present)
        if missing:
            raise NotFoundError(f"no memory with id(s) {missing[:5]}")
        if hard:
            namespaces = set(self.store.memories_table.get_many(ids)["namespace"].to_list())
            loaded = self.indexes.loaded()
            chunk_ids = {ns: [c for c, m in loaded[ns].chunk_owners() if m in present]
                         for ns in namespaces if ns in loaded}
            n = self.store.hard_delete(ids)
            version = self.store.known_version()
            for ns in sorted(namespaces):
                if ns in chunk_ids:
                    self.indexes.apply(ns, None, chunk_ids[ns], version)
                else:
                    self.indexes.mark_written(ns)
            return n
        rows = self.store.memories_table.invalidate(ids)
        version = self.store.known_version()
        for ns in sorted({r["namespace"] for r in rows}):
            self.indexes.touch(ns, version)
        return len(rows)

    @locked
    def delete_namespace(self, namespace: str) -> dict[str, int]:
        """Delete a namespace, its memories, edges and indexes."""
        counts = self.store.delete_namespace(namespace)
        self.indexes.forget(namespace)
        return counts

    @locked
    def add_edges(self, edges: Iterable[Mapping[str, Any]], namespace: str | None = None) -> int:
        now = utcnow()
        rows = [normalize_edge(e, now=now, namespace=namespace, where=f"edge {i}: ") for i, e in enumerate(edges)]
        return self.store.edges_table.add(rows)

    @locked
    def remove_edges(self, src: str, dst: str, relation: str | None = None) -> int:
        """Remove the edges src -> dst (of one relation, or all); NotFoundError when there is none."""
        return self.store.edges_table.remove(src, dst, relation)

    @locked
    def create_namespace(self, name: str, description: str = "") -> bool:
        """Create an empty namespace (ConflictError when it exists)."""
        return self.store.namespaces_table.create(name, description)

    @locked
    def record_access(self, ids: Sequence[str], *, context: str = "search") -> int:
        """Log that memories were served (frequency and last-access signals read the log)."""
        return self.store.record_access(ids, context=context)

    @locked
    def rechunk(self, ids: Sequence[str]) -> int:
        """Chunk, embed and index memories again from their stored rows (repair, after the chunks
        they had were lost); the rows themselves are written back unchanged."""
        rows = self.store.memories_table.rows(ids)
        if not rows:
            return 0
        chunks, _ = self._chunks(rows)
        version = self.store.replace(rows, chunks)
        self._index_added(pl.from_arrow(chunks), [], version)
        return len(rows)
