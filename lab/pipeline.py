"""The facade most callers start from: open a store, save into it, search it, assemble context.

A ``Pipeline`` composes the write side (``Writer``) and the read side (``Retriever``) over one
store, sharing the embedder and the indexes, so a saved memory is found by the very next search.
It holds no logic of its own: every method hands over to one of the two.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import polars as pl

from lab.assemble import Context
from lab.config import AssembleConfig, SaveConfig, SearchConfig, to_dict
from lab.embed import Embedder, make_embedder
from lab.embed.base import assume_dim
from lab.embed.embedding_cache import EmbeddingCache, recorded_dim
from lab.embed.registry import space_of
from lab.embed.server_spec import is_server_model
from lab.engine import Engine
from lab.errors import ConflictError, NotFoundError
from lab.index.manager import IndexManager
from lab.index.namespace import NamespaceIndex
from lab.index.snapshot import indexed_config
from lab.retriever import Retriever, require_model
from lab.search.searcher import Result
from lab.store.location import is_uri
from lab.store.layout import StoreVersion, is_store
from lab.store.settings import StoreSettings
from lab.store.store import Store
from lab.write import EDITABLE, IngestReport, Writer
from lab.write.writer import Records

__all__ = ["EDITABLE", "IngestReport", "Pipeline"]


class Pipeline:
    """A store with its writer and its retriever (one embedder, one embedding cache, one set of indexes)."""

    def __init__(self, store: Store, config: SaveConfig, embedder: Embedder, cache_dir: str | Path | None = None,
                 engine: Engine | None = None) -> None:
        self.store = store
        self.config = config
        self.embedder = embedder
        self.cache: EmbeddingCache | None = None
        cache_root = Path(cache_dir or store.settings.embed_cache or store.root / "cache" / "embeddings")
        if config.embed.cache:
            assume_dim(embedder, recorded_dim(cache_root, embedder.model_id))
            self.cache = EmbeddingCache(cache_root, embedder.model_id, embedder.dim)
        self.indexes = IndexManager(store, config.index, embedder.dim, embedder.model_id)
        self.writer = Writer(store, config, embedder, self.indexes, self.cache, engine)
        # extra encoders' passage vectors (index.models) live in the same cache folder
        self.retriever = Retriever(store, embedder, self.indexes,
                                   encoder_cache=None if store.read_only else cache_root)

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
        engine: Engine | None = None,
        settings: StoreSettings | None = None,
    ) -> "Pipeline":
        """Open the store at ``path`` (creating it when ``create`` and absent).

        The chunking and embedding configuration is fixed when a store is created; opening it
        with another is refused, since its stored chunks were made with the first one. Index
        parameters may change: indexes are then rebuilt. With ``pin`` the store is read-only.
        ``settings``: the edge's (lab.store.settings; None: the built-in defaults).
        """
        path = path if is_uri(path) else Path(path)  # a folder, or a URI (lab.store.location)
        exists = is_store(path, settings)
        if not exists and not create:
            raise NotFoundError(f"no lab store at {path} (create one with `lab init --store {path}`)")
        stored = None
        if exists:
            store = Store.open(path, pin=pin, settings=settings)
            stored = store.recorded_config()
        config = config or stored or SaveConfig()
        if embedder is None:
            embedder = make_embedder(config.embed)
        if stored is not None:
            assume_dim(embedder, store.info.dim)  # a server model then needs no probe call
        elif config.embed.cache:  # or a shared cache that holds its vectors already
            assume_dim(embedder, recorded_dim(cache_dir or (settings.embed_cache if settings else None), embedder.model_id))
        # an alias or a folder: recorded as the model's id (a server model's file stays named:
        # its settings are what the id's fingerprint stands for)
        if embedder.model_id != config.embed.model and not is_server_model(config.embed.model):
            config = replace(config, embed=replace(config.embed, model=embedder.model_id))
        if stored is not None:
            for part in ("chunk", "embed"):
                if to_dict(getattr(config, part)) != to_dict(getattr(stored, part)):
                    raise ConflictError(
                        f"store {path} was created with {part} config {to_dict(getattr(stored, part))}; "
                        f"got {to_dict(getattr(config, part))}: create a new store to change it",
                        field=part)
            require_model(store, embedder)
        else:
            space = embedder.space if embedder.space != space_of(embedder.model_id) else None
            store = Store.create(path, embed_model=embedder.model_id, dim=embedder.dim, save_config=to_dict(config),
                                 settings=settings, embed_space=space)
        pipe = cls(store, config, embedder, cache_dir, engine)
        if exists and not store.read_only and to_dict(config.index) != to_dict(stored.index):
            # new index parameters: recorded for readers, and every snapshot rebuilt and saved on close
            store.record_index_config(to_dict(config.index))
            if indexed_config(config.index) != indexed_config(stored.index):  # not for an encoder added
                for ns in store.namespaces():
                    pipe.indexes.mark_written(ns)
        return pipe

    def close(self) -> None:
        """Flush the embedding caches and save the indexes that writes changed."""
        self.indexes.wait()
        self.writer.flush()
        self.retriever.flush_encoders()

    def embed_encoders(self, progress: bool = True, engine: Engine | None = None) -> dict[str, int]:
        """Embed every namespace's chunks by each extra encoder the store carries (index.models),
        through the cache: an encoder already embedded costs a lookup, one cut off resumes. On an
        engine that embeds ahead (Ray), each dense encoder's missing vectors are computed there
        first, all namespaces in one job (a sparse encoder embeds here). Returns the chunks each
        namespace holds."""
        if engine is not None and engine.embeds_ahead and self.indexes.config.models:
            # the texts each namespace's main index holds: what the encoders embed below
            texts = [t for ns in self.store.namespaces() for t in self.retriever.index(ns).texts]
            for encoder in self.retriever.encoders.values():
                if not encoder.sparse:
                    engine.fill_cache(encoder.passages, encoder.model, texts, progress=progress)
                    encoder.passages.flush()
        self.retriever.encoder_progress = progress
        try:
            out = {ns: self.retriever.index(ns).n_live for ns in self.store.namespaces()
                   if self.retriever.snapshot(ns) is not None}
        finally:
            self.retriever.encoder_progress = False
            self.retriever.flush_encoders()
        return out

    def __enter__(self) -> "Pipeline":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ writing (Writer)
    def save(self, content: str | None = None, namespace: str | None = None, **fields: Any) -> IngestReport:
        """Save one memory; it is searchable as soon as this returns."""
        record = dict(fields)
        if content is not None:
            record["content"] = content
        return self.writer.save_many([record], namespace=namespace, progress=False)

    def save_many(self, records: Records, namespace: str | None = None, *, batch_size: int = 512,
                  progress: bool = True) -> IngestReport:
        """Validate, de-duplicate, chunk, embed, commit and index memories (see ``Writer.save_many``)."""
        return self.writer.save_many(records, namespace, batch_size=batch_size, progress=progress)

    def validate(self, records: Records, namespace: str | None = None) -> list[dict[str, Any]]:
        return self.writer.validate(records, namespace)

    def ingest(self, path: str | Path, namespace: str | None = None, *, progress: bool = True) -> IngestReport:
        """Load a memories file or folder (memories + edges) after validating all of it."""
        return self.writer.ingest(path, namespace, progress=progress)

    def embed(self, texts: Sequence[str]) -> tuple[np.ndarray, int]:
        """Vectors for ``texts`` through the embedding cache; returns (vectors, texts embedded anew)."""
        return self.writer.embed(texts)

    def update(self, memory_id: str, **changes: Any) -> dict[str, Any]:
        """Change fields of a memory; a change of content, title or tags re-chunks and re-embeds it."""
        return self.writer.update(memory_id, **changes)

    def delete(self, ids: Sequence[str] | str, *, hard: bool = False) -> int:
        """Soft delete (mark invalid, kept and hidden from valid-only search) or hard delete."""
        return self.writer.delete(ids, hard=hard)

    def delete_namespace(self, namespace: str) -> dict[str, int]:
        return self.writer.delete_namespace(namespace)

    def add_edges(self, edges: Iterable[Mapping[str, Any]], namespace: str | None = None) -> int:
        return self.writer.add_edges(edges, namespace)

    def add_edge(self, src: str, dst: str, relation: str = "related_to", weight: float = 1.0) -> int:
        return self.writer.add_edges([{"src": src, "dst": dst, "relation": relation, "weight": weight}])

    def build(self, namespace: str | None = None) -> list[str]:
        """Rebuild and save the indexes of one namespace, or of all."""
        return self.writer.build(namespace)

    def build_index(self, namespace: str) -> NamespaceIndex:
        """Rebuild and save one namespace's index; returns it."""
        self.writer.build(namespace)
        return self.indexes.get(namespace)

    def repair(self) -> dict[str, Any]:
        """Take damaged files out of their tables and rebuild every index (see ``Writer.repair``)."""
        return self.writer.repair()

    def compact(self, *, vacuum_hours: float | None = None) -> dict[str, Any]:
        """Compact the store's tables and the embedding cache, and rebuild every index."""
        return self.writer.compact(vacuum_hours=vacuum_hours)

    # ------------------------------------------------------------------ reading (Retriever)
    def get(self, memory_id: str) -> dict[str, Any]:
        return self.store.get(memory_id)

    def list(self, namespace: str | None = None, **filters: Any) -> pl.DataFrame:
        return self.store.list(namespace, **filters)

    def index(self, namespace: str) -> NamespaceIndex:
        """The namespace's index, in step with the store (loaded or caught up in memory)."""
        return self.retriever.index(namespace)

    def stats(self, namespace: str | None = None) -> dict[str, Any]:
        if namespace is not None:
            self.store.require_namespace(namespace)
        out = self.store.stats(namespace)
        out["indexes"] = {
            ns: {"live_chunks": idx.n_live, "delta": idx.delta_size, "built_at": idx.built_at}
            for ns, idx in sorted(self.indexes.loaded().items()) if namespace in (None, ns)
        }
        return out

    def search(self, query: str, namespace: str, k: int | None = None, *, preset: str | None = None,
               config: SearchConfig | None = None, explain: bool = False,
               record_access: bool = False) -> list[Result]:
        """Multi-signal search of one namespace with a preset (default `lab`) or a SearchConfig.

        ``record_access`` logs the results as served (serving does; evaluations never do)."""
        hits = self.retriever.search(query, namespace, k, config=config, preset=preset, explain=explain)
        if record_access and hits:
            self.writer.record_access([h.memory_id for h in hits], context="search")
        return hits

    def context(self, query: str, namespace: str, budget: int | None = None, *, preset: str | None = None,
                config: SearchConfig | None = None, assemble: AssembleConfig | None = None,
                candidates: int = 50, record_access: bool = False) -> Context:
        """Search, then assemble the results into a zoned context within ``budget`` tokens."""
        ctx, hits = self.retriever.search_and_assemble(query, namespace, budget, config=config, preset=preset,
                                                       assemble_config=assemble, candidates=candidates)
        if record_access and hits:
            self.writer.record_access([h.memory_id for h in hits], context="search")  # every result offered
        return ctx
