"""The save pipeline (chunk, embed, index) over a store, and a minimal two-index search."""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl
import pyarrow as pa

from lab.chunking import chunk_text
from lab.config import SaveConfig, from_dict, to_dict
from lab.embed import Embedder, make_embedder
from lab.embed.cache import EmbeddingCache
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.index.namespace import NamespaceIndex
from lab.schema import chunks_schema
from lab.store.records import normalize_edge, normalize_memory, validate_id, validate_namespace
from lab.store.store import Store, StoreVersion, utcnow

if TYPE_CHECKING:
    from lab.config import SearchConfig
    from lab.assemble import Context
    from lab.config import AssembleConfig
    from lab.search.engine import Result

EDITABLE = (
    "content", "title", "tags", "type", "source", "importance", "pinned", "valid",
    "superseded_by", "metadata", "created_at",
)


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


def _progress(iterable: Iterable, total: int, desc: str, enabled: bool):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    # disable=None: a bar on a terminal, silence when output is piped or logged
    return tqdm(iterable, total=total, desc=desc, unit="batch", disable=None, leave=False)


class Pipeline:
    """A store plus its embedder, embedding cache and per-namespace indexes."""

    def __init__(self, store: Store, config: SaveConfig, embedder: Embedder, cache_dir: str | Path | None = None) -> None:
        self.store = store
        self.config = config
        self.embedder = embedder
        self.cache: EmbeddingCache | None = None
        if config.embed.cache:
            cache_root = cache_dir or os.environ.get("LAB_EMBED_CACHE") or store.root / "cache" / "embeddings"
            self.cache = EmbeddingCache(cache_root, embedder.model_id, embedder.dim)
        self._indexes: dict[str, NamespaceIndex] = {}
        self._saved_versions: dict[str, str] = {}

    # ------------------------------------------------------------------ lifecycle
    @classmethod
    def open(
        cls,
        path: str | Path,
        config: SaveConfig | None = None,
        *,
        embedder: Embedder | None = None,
        create: bool = False,
        pin: StoreVersion | str | None = None,
        cache_dir: str | Path | None = None,
    ) -> "Pipeline":
        """Open the store at ``path`` (creating it when ``create`` and absent).

        The chunking and embedding configuration is fixed when a store is created; opening it
        with another is refused, since its stored chunks were made with the first one. Index
        parameters may change: indexes are then rebuilt.
        """
        path = Path(path)
        exists = (path / "lab-store.json").is_file()
        if not exists and not create:
            raise NotFoundError(f"no lab store at {path} (run `lab init {path}` first)")
        if exists:
            store = Store.open(path, pin=pin)
            recorded = dict(store.info.save_config)
            # stores made before context_turns existed were indexed without context: keep them so
            recorded["chunk"] = {"context_turns": 0, **recorded.get("chunk", {})}
            stored = from_dict(SaveConfig, recorded)
            config = config or stored
            for part in ("chunk", "embed"):
                if to_dict(getattr(config, part)) != to_dict(getattr(stored, part)):
                    raise ConflictError(
                        f"store {path} was created with {part} config {to_dict(getattr(stored, part))}; "
                        f"got {to_dict(getattr(config, part))}: create a new store to change it"
                    )
        config = config or SaveConfig()
        if embedder is None:
            embedder = make_embedder(config.embed)
        if embedder.model_id != config.embed.model:
            config = replace(config, embed=replace(config.embed, model=embedder.model_id))
        if exists:
            if store.info.embed_model != embedder.model_id:
                raise ConflictError(
                    f"store {path} holds embeddings of {store.info.embed_model!r}; "
                    f"the embedder given is {embedder.model_id!r}"
                )
        else:
            store = Store.create(path, embed_model=embedder.model_id, dim=embedder.dim, save_config=to_dict(config))
        return cls(store, config, embedder, cache_dir)

    def close(self) -> None:
        """Flush the embedding cache and persist indexes that moved since they were saved."""
        if self.cache is not None:
            self.cache.flush()
        for ns, idx in self._indexes.items():
            idx.wait_for_merge()
            if not self.store.read_only and self._saved_versions.get(ns) != idx.store_version:
                self._save_index(ns, idx)

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ embedding
    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Vectors for ``texts`` through the cache; returns (vectors, texts embedded anew)."""
        if self.cache is None:
            return self.embedder.embed(texts), len(texts)
        misses = self.cache.misses
        vectors = self.cache.embed(self.embedder, texts)
        return vectors, self.cache.misses - misses

    def _index_context(self, rows: list[dict[str, Any]]) -> dict[str, str]:
        """Per memory id, the index-time context ``ChunkConfig`` asks for: its date and/or the
        earlier memories of its episode (from this batch and from the store), oldest first."""
        cfg = self.config.chunk
        if not cfg.context_turns and not cfg.time_in_text:
            return {}
        from lab.search.engine import episode_key, episode_of

        episode = {r["id"]: episode_of(r["metadata"]) if cfg.context_turns else None for r in rows}
        wanted: dict[str, set[str]] = {}  # namespace -> episodes of this batch
        for r in rows:
            if episode[r["id"]] is not None:
                wanted.setdefault(r["namespace"], set()).add(episode[r["id"]])
        turns: dict[tuple[str, str], list[tuple[Any, str, str]]] = {}  # (namespace, episode) -> (time, id, text)
        for ns, episodes in wanted.items():
            stored = (
                self.store.memories(ns)
                .filter(pl.col("valid") & ~pl.col("id").is_in(list(episode)))  # an update's row replaces its stored version
                .with_columns(episode_key().alias("_episode"))
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

    def _chunk_rows(self, rows: list[dict[str, Any]]) -> tuple[pa.Table, int]:
        records: list[dict[str, Any]] = []
        texts: list[str] = []
        context = self._index_context(rows)
        for row in rows:
            for chunk in chunk_text(
                row["content"], self.embedder.tokenizer, self.config.chunk, title=row["title"], tags=row["tags"],
                context=context.get(row["id"], ""),
            ):
                records.append({
                    "chunk_id": f"{row['id']}#{row['index_hash'][:12]}#{chunk.ordinal}",
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
        vectors, embedded = self.embed(texts)
        schema = chunks_schema(self.embedder.dim)
        columns = {name: [r[name] for r in records] for name in schema.names if name != "embedding"}
        columns["embedding"] = pa.FixedSizeListArray.from_arrays(
            pa.array(vectors.astype(np.float32).ravel(), type=pa.float32()), self.embedder.dim
        )
        return pa.table(columns, schema=schema), embedded

    # ------------------------------------------------------------------ saving
    def save(self, content: str | None = None, namespace: str | None = None, **fields: Any) -> IngestReport:
        """Save one memory; it is searchable as soon as this returns."""
        record = dict(fields)
        if content is not None:
            record["content"] = content
        return self.save_many([record], namespace=namespace, progress=False)

    def validate(
        self, records: Iterable[Mapping[str, Any] | tuple[str, Mapping[str, Any]]], namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """Normalise every record first: one bad record fails the batch before anything is written.

        Records may be (where, record) pairs so errors can name a file line.
        """
        now = utcnow()
        rows = []
        for i, item in enumerate(records):
            where, raw = item if isinstance(item, tuple) else (f"record {i}: ", item)
            rows.append(normalize_memory(raw, now=now, namespace=namespace, where=where))
        return rows

    def save_many(
        self,
        records: Iterable[Mapping[str, Any] | tuple[str, Mapping[str, Any]]],
        namespace: str | None = None,
        *,
        batch_size: int = 512,
        progress: bool = True,
    ) -> IngestReport:
        """Validate, de-duplicate, chunk, embed, commit and index a batch of memories.

        Idempotent: a memory whose content is already stored in its namespace is reported as a
        duplicate (with the stored id) and not written again. Each batch of ``batch_size`` is
        one chunks commit followed by one memories commit.
        """
        started = time.perf_counter()
        rows = self.validate(records, namespace)
        report = IngestReport()
        fresh: list[dict[str, Any]] = []
        seen: dict[tuple[str, str], str] = {}
        for row in rows:
            key = (row["namespace"], row["content_hash"])
            existing = seen.get(key) or self.store.find_by_hash(*key)
            if existing is not None:
                report.duplicates.append(existing)
                if existing != row["id"]:
                    report.id_map[row["id"]] = existing
                continue
            seen[key] = row["id"]
            fresh.append(row)
        ids = [r["id"] for r in fresh]
        if len(set(ids)) != len(ids):
            dup = sorted({i for i in ids if ids.count(i) > 1})
            raise ValidationError(f"the same id is used for different contents: {dup[:5]}")
        clash = self.store.has_ids(ids)
        if clash:
            raise ConflictError(
                f"memory id(s) {sorted(clash)[:5]} exist already with other content; use update"
            )
        batches = [fresh[i:i + batch_size] for i in range(0, len(fresh), batch_size)]
        for batch in _progress(batches, len(batches), "save", progress and len(batches) > 1):
            chunks, embedded = self._chunk_rows(batch)
            version = self.store.insert(batch, chunks)
            report.created.extend(r["id"] for r in batch)
            report.chunks += chunks.num_rows
            report.embedded += embedded
            self._index_added(pl.from_arrow(chunks), [], version)
        if self.cache is not None and (report.embedded >= 256 or len(batches) > 1):
            self.cache.flush()
        report.version = str(self.store.known_version())
        report.seconds = time.perf_counter() - started
        return report

    def ingest(self, path: str | Path, namespace: str | None = None, *, progress: bool = True) -> IngestReport:
        """Load a memories file or folder (memories + edges) after validating all of it."""
        from lab.store.ingest import find_dataset_files, read_records

        memories_path, edges_path = find_dataset_files(path)
        records = read_records(memories_path)
        rows = self.validate(records, namespace)  # fail before any write
        now = utcnow()
        edges = []
        if edges_path is not None:
            known = {r["id"] for r in rows}
            for where, raw in read_records(edges_path):
                edge = normalize_edge(raw, now=now, namespace=namespace, where=where)
                for end in ("src", "dst"):
                    if edge[end] not in known and not self.store.has_ids([edge[end]]):
                        raise ValidationError(f"{where}edge field '{end}': no memory with id {edge[end]!r}")
                edges.append(edge)
        report = self.save_many(records, namespace, progress=progress)
        for edge in edges:
            edge["src"] = report.id_map.get(edge["src"], edge["src"])
            edge["dst"] = report.id_map.get(edge["dst"], edge["dst"])
        report.edges = self.store.add_edges(edges)
        report.version = str(self.store.version())
        return report

    def _index_added(self, chunks: pl.DataFrame, removed: list[str], version: StoreVersion) -> None:
        """Tell already-loaded indexes about a write we made (others sync when next loaded)."""
        for ns in set(chunks["namespace"].to_list()):
            idx = self._indexes.get(ns)
            if idx is None:
                continue
            idx.apply(chunks.filter(pl.col("namespace") == ns), removed, str(version))
            if idx.needs_merge():
                idx.merge_in_background()

    # ------------------------------------------------------------------ reading and editing
    def get(self, memory_id: str) -> dict[str, Any]:
        return self.store.get(memory_id)

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
        raw["access_count"] = int(self.store._memories_raw().filter(pl.col("id") == memory_id)["access_count"][0])
        raw.update(changes)
        row = normalize_memory(raw, now=utcnow(), where=f"update {memory_id}: ")
        row["updated_at"] = max(utcnow(), row["created_at"])
        if row["content_hash"] != current["content_hash"]:
            other = self.store.find_by_hash(row["namespace"], row["content_hash"])
            if other is not None and other != memory_id:
                raise ConflictError(f"memory {other!r} in {row['namespace']!r} already has this content")
        chunks = None
        if row["index_hash"] != current["index_hash"]:
            chunks, _ = self._chunk_rows([row])
        version = self.store.replace([row], chunks)
        old_chunks = []
        if chunks is not None:
            idx = self._indexes.get(row["namespace"])
            if idx is not None:
                old_chunks = [c for c, m in zip(idx.chunk_ids, idx.memory_of) if m == memory_id]
                old_chunks = [c for c in old_chunks if c.split("#")[1] != row["index_hash"][:12]]
            self._index_added(pl.from_arrow(chunks), old_chunks, version)
        else:
            self._touch_index_version(row["namespace"], version)
        return self.store.get(memory_id)

    def _touch_index_version(self, namespace: str, version: StoreVersion) -> None:
        idx = self._indexes.get(namespace)
        if idx is not None:
            idx.store_version = str(version)

    def delete(self, ids: Sequence[str] | str, *, hard: bool = False) -> int:
        """Soft delete (mark invalid, kept and hidden from valid-only search) or hard delete."""
        ids = [ids] if isinstance(ids, str) else list(ids)
        for i in ids:
            validate_id(i)
        present = self.store.has_ids(ids)
        missing = sorted(set(ids) - present)
        if missing:
            raise NotFoundError(f"no memory with id(s) {missing[:5]}")
        if hard:
            namespaces = set(self.store.get_many(ids)["namespace"].to_list())
            chunk_ids = [
                c for ns in namespaces if ns in self._indexes
                for c, m in zip(self._indexes[ns].chunk_ids, self._indexes[ns].memory_of) if m in present
            ]
            n = self.store.hard_delete(ids)
            version = self.store.known_version()
            for ns in namespaces:
                idx = self._indexes.get(ns)
                if idx is not None:
                    idx.apply(None, chunk_ids, str(version))
            return n
        now = utcnow()
        rows = self.store._memories_raw().filter(pl.col("id").is_in(ids)).with_columns(
            pl.lit(False).alias("valid"), pl.lit(now).cast(pl.Datetime("us", "UTC")).alias("updated_at")
        ).to_dicts()
        version = self.store.replace(rows)
        for ns in {r["namespace"] for r in rows}:
            self._touch_index_version(ns, version)
        return len(rows)

    def delete_namespace(self, namespace: str) -> dict[str, int]:
        """Delete a namespace, its memories, edges and indexes."""
        counts = self.store.delete_namespace(namespace)
        self._indexes.pop(namespace, None)
        self._saved_versions.pop(namespace, None)
        return counts

    def list(self, namespace: str | None = None, **filters: Any) -> pl.DataFrame:
        return self.store.list(namespace, **filters)

    def add_edges(self, edges: Iterable[Mapping[str, Any]], namespace: str | None = None) -> int:
        now = utcnow()
        rows = [normalize_edge(e, now=now, namespace=namespace, where=f"edge {i}: ") for i, e in enumerate(edges)]
        return self.store.add_edges(rows)

    def add_edge(self, src: str, dst: str, relation: str = "related_to", weight: float = 1.0) -> int:
        return self.add_edges([{"src": src, "dst": dst, "relation": relation, "weight": weight}])

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        if namespace is not None:
            self.store.require_namespace(namespace)
        out = self.store.stats(namespace)
        out["indexes"] = {
            ns: {"live_chunks": idx.n_live, "delta": idx.delta_size, "built_at": idx.built_at}
            for ns, idx in sorted(self._indexes.items()) if namespace in (None, ns)
        }
        return out

    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Compact the store's tables and the embedding cache, and rebuild every index."""
        report = self.store.compact(vacuum_hours=vacuum_hours)
        if self.cache is not None:
            report["embedding_cache_parts_merged"] = self.cache.compact()
        for ns in self.store.namespaces():
            self.build_index(ns)
        report["indexes_rebuilt"] = self.store.namespaces()
        return report

    # ------------------------------------------------------------------ indexes
    def _index_dir(self, namespace: str) -> Path:
        return self.store.root / "indexes" / namespace

    def _save_index(self, namespace: str, idx: NamespaceIndex) -> None:
        idx.save(self._index_dir(namespace))
        self._saved_versions[namespace] = idx.store_version

    def build_index(self, namespace: str) -> NamespaceIndex:
        """Rebuild a namespace's indexes from the store (folds the delta in) and persist them."""
        self.store.require_namespace(namespace)
        idx = NamespaceIndex.build(
            namespace, self.store.chunks(namespace), self.embedder.dim, self.config.index,
            self.embedder.model_id, str(self.store.version()),
        )
        self._indexes[namespace] = idx
        if not self.store.read_only:
            self._save_index(namespace, idx)
        return idx

    def index(self, namespace: str) -> NamespaceIndex:
        """The namespace's index, loaded or built on first use and synced with the store.

        Chunks only become visible or invisible through a memories commit, so the memories
        version alone tells whether the index is behind the store.
        """
        idx = self._indexes.get(namespace)
        current = self.store.memories_version
        version = str(self.store.known_version())
        if idx is None:
            self.store.require_namespace(namespace)
            chunks = self.store.chunks(namespace)
            idx = NamespaceIndex.load(self._index_dir(namespace), chunks, self.config.index)
            if idx is None:
                return self.build_index(namespace)
            self._indexes[namespace] = idx
            self._saved_versions[namespace] = idx.store_version
            if StoreVersion.parse(idx.store_version).memories != current:
                idx.sync(chunks, version)
        elif StoreVersion.parse(idx.store_version).memories != current:
            idx.sync(self.store.chunks(namespace), version)  # another process wrote
        return idx

    # ------------------------------------------------------------------ search
    def search(
        self,
        query: str,
        namespace: str,
        k: int | None = None,
        *,
        preset: str | None = None,
        config: "SearchConfig | None" = None,
        explain: bool = False,
        record_access: bool = False,
    ) -> list["Result"]:
        """Multi-signal search of one namespace with a preset (default `lab`) or a SearchConfig."""
        from lab.search.engine import search
        from lab.search.presets import resolve

        validate_namespace(namespace)
        cfg = config or resolve(preset)
        return search(self, query, namespace, cfg, k=k, explain=explain, record_access=record_access).results

    def context(
        self,
        query: str,
        namespace: str,
        budget: int | None = None,
        *,
        preset: str | None = None,
        config: "SearchConfig | None" = None,
        assemble: "AssembleConfig | None" = None,
        candidates: int = 50,
        record_access: bool = False,
    ) -> "Context":
        """Search, then assemble the results into a zoned context within ``budget`` tokens."""
        from dataclasses import replace

        from lab.assemble.context import context
        from lab.config import AssembleConfig
        from lab.search.presets import resolve

        validate_namespace(namespace)
        acfg = assemble or AssembleConfig()
        if budget is not None:
            acfg = replace(acfg, budget=budget)
        return context(self, query, namespace, config or resolve(preset), acfg, candidates=candidates,
                       record_access=record_access)
