"""The read side: a store at one version, its indexes, the embedder and a configuration; read-only.

Search, context assembly and evaluation take a ``Retriever`` and nothing else; so will the
exported serving module and the server. A read never writes to disk: indexes are loaded from their
snapshots (or, where a snapshot is missing or behind, built or caught up in memory), views are
built in memory, accesses are not recorded. Writing is the ``Writer``'s job (``lab.write``).
"""
from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import polars as pl

from lab.assemble import Context, Item, item_from_result, make_counter
from lab.assemble import assemble as assemble_items
from lab.config import AssembleConfig, IndexConfig, SearchConfig
from lab.embed import Embedder, make_embedder
from lab.embed.base import assume_dim
from lab.embed.registry import query_model_name, space_of
from lab.embed.embedding_cache import EmbeddingCache
from lab.errors import ConflictError, ValidationError
from lab.index.encoders import Encoder, EncoderIndex, make_encoder
from lab.index.manager import IndexManager
from lab.index.namespace import NamespaceIndex
from lab.index.open_namespaces import LeastRecentlyUsed
from lab.search.candidates import NamespaceSnapshot, Query, candidates, encoder_alias, reference_time
from lab.search.searcher import Result, SearchRequest, SearchResponse, search, search_many
from lab.search.presets import resolve
from lab.search.view import NamespaceView
from lab.search.view_insert import current_view
from lab.store.layout import StoreVersion
from lab.store.records import item_text, validate_namespace
from lab.store.settings import StoreSettings
from lab.store.store import Store

log = logging.getLogger(__name__)


def require_model(store: Store, embedder: Embedder) -> None:
    """The store's vectors are the embedder's model's, of its dimension: else refused, both named."""
    if embedder.model_id != store.info.embed_model or embedder.dim != store.info.dim:
        raise ConflictError(
            f"store {store.root} holds {store.info.dim}-dimensional vectors of {store.info.embed_model!r}; "
            f"the embedder given is {embedder.model_id!r} ({embedder.dim} dimensions)", field="embed.model")


def require_query_model(store: Store, query_embedder: Embedder) -> None:
    """A query model must encode into the stored vectors' space."""
    # the space the store declares (a server model's file), else its model's own
    stored_space = store.info.embed_space or space_of(store.info.embed_model)
    if query_embedder.space != stored_space or query_embedder.dim != store.info.dim:
        raise ConflictError(
            f"query model {query_embedder.model_id!r} encodes into {query_embedder.space!r} "
            f"({query_embedder.dim} dimensions); store {store.root} holds vectors of {store.info.embed_model!r} "
            f"({stored_space!r}, {store.info.dim} dimensions)", field="query_model")


class Retriever:
    """Searches and assembles over one store, latest or pinned at a version, without writing."""

    def __init__(
        self,
        store: Store,
        embedder: Embedder,
        indexes: IndexManager,
        *,
        search: SearchConfig | None = None,
        assemble: AssembleConfig | None = None,
        cache: EmbeddingCache | None = None,
        query_embedder: Embedder | None = None,
        encoder_cache: Path | None = None,
    ) -> None:
        require_model(store, embedder)
        query_embedder = query_embedder or embedder
        if query_embedder is not embedder:
            require_query_model(store, query_embedder)
        self.store = store
        self.embedder = embedder
        # queries may be encoded by another backend of the stored vectors' space (MiniLM's int8
        # ONNX export for a MiniLM store): judged on the same stored vectors before it is adopted
        self.query_embedder = query_embedder
        self.indexes = indexes
        self.search_config = search or resolve(None)
        self.assemble_config = assemble or AssembleConfig()
        self.cache = cache  # query embeddings are looked up here (added in memory; only its owner flushes it)
        self._views: LeastRecentlyUsed[str, NamespaceView] = LeastRecentlyUsed(store.settings.open_namespaces)
        # the extra encoders the index config names (index.models), made on first use; their
        # passage vectors are cached under ``encoder_cache`` (None: in memory, nothing written)
        self.encoder_cache = encoder_cache
        self.encoder_progress = False  # a progress bar while an encoder embeds a namespace's chunks
        # the evaluation root an evaluation store was built under (`eval_retriever`): its candidate
        # tables are kept there, so a store in a temporary root leaves none in the workspace's
        self.eval_root: Path | None = None
        self._encoders: dict[str, Encoder] | None = None
        self._encoder_indexes = LeastRecentlyUsed(self._views.cap * max(1, len(indexes.config.models)))

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        pin: StoreVersion | str | None = None,
        embedder: Embedder | None = None,
        search: SearchConfig | str | None = None,
        assemble: AssembleConfig | None = None,
        index: IndexConfig | None = None,
        cache: EmbeddingCache | None = None,
        query_model: str | Embedder | None = None,
        encoder_cache: Path | None = None,
        settings: StoreSettings | None = None,
    ) -> "Retriever":
        """Open the store at ``path`` read-only: its latest version, or ``pin`` ("M.C.E.A").

        ``search`` is a SearchConfig, a preset name or a config file (default: the `lab` preset);
        the embedder defaults to the one the store was created with; ``query_model`` (an embedder,
        a model name, ``auto``: the fastest installed of the store's space, or ``store``) encodes
        queries instead, if its vectors share the store's space. ``settings``: the edge's
        (lab.store.settings; None: the built-in defaults).
        """
        store = Store.open(path, pin=pin, read_only=True, settings=settings)
        recorded = store.recorded_config()
        embedder = embedder or make_embedder(recorded.embed)
        assume_dim(embedder, store.info.dim)
        indexes = IndexManager(store, index or recorded.index, embedder.dim, embedder.model_id, warn_on_build=True)
        config = search if isinstance(search, SearchConfig) else resolve(search)
        if isinstance(query_model, str):  # auto, store, or a model of the stored vectors' space
            name = query_model_name(query_model, store.info.embed_model, store.info.embed_space)
            query_model = embedder if name == embedder.model_id else make_embedder(replace(recorded.embed, model=name))
        return cls(store, embedder, indexes, search=config, assemble=assemble, cache=cache,
                   query_embedder=query_model, encoder_cache=encoder_cache)

    def close(self) -> None:
        """Wait for background index merges; the extra encoders' cache (when the opener gave it a
        folder) gets their new passage vectors; nothing else is written."""
        self.indexes.wait()
        self.flush_encoders()

    def __enter__(self) -> "Retriever":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ------------------------------------------------------------------ what is read
    @property
    def version(self) -> StoreVersion:
        """The store version searches see: the pinned one, or the latest committed."""
        return self.store.version()

    def namespaces(self) -> list[str]:
        return self.store.namespaces()

    def view(self, namespace: str) -> NamespaceView:
        """The namespace's array view, rebuilt only when its memories, edges or accesses changed."""
        # the chunks version is not part of it: chunks become visible only through a memories commit
        key = (self.store.memories_version, self.store.edges_version, self.store.access_version)
        held = self._views.get(namespace)
        view = current_view(self.store, namespace, key, held)  # moved on by appended rows where it can be
        if view is not held:
            self._views[namespace] = view
        return view

    def index(self, namespace: str) -> NamespaceIndex:
        """The namespace's index at this version (loaded, or caught up in memory)."""
        return self.indexes.get(namespace)

    def analyse(self, namespace: str) -> int:
        """Analyse the namespace's texts for the coverage feature now, not one search's candidates at
        a time (at 100,000 memories a third of the first minute of searches), within half the analyzer
        memo's room; resolve their event times (seconds at a million); return how many were analysed."""
        snap = self.snapshot(namespace)
        snap.view.event_s()
        analyzer = snap.index.analyzer
        n = min(len(snap.view.ids), analyzer.term_set_room // 2)
        if n:
            snap.view.terms(list(range(n)), analyzer.term_sets)
        return n

    def snapshot(self, namespace: str) -> NamespaceSnapshot:
        validate_namespace(namespace)
        index = self.index(namespace)
        return NamespaceSnapshot(self.view(namespace), index, self._encoder_snapshots(namespace, index))

    # ------------------------------------------------------------------ extra encoders
    @property
    def encoders(self) -> dict[str, Encoder]:
        """The store's extra encoders (index.models) by list name ("vector@e5")."""
        if self._encoders is None:
            made = [make_encoder(alias, self.encoder_cache) for alias in self.indexes.config.models]
            self._encoders = {e.list_name: e for e in made}
        return self._encoders

    def _encoder_snapshots(self, namespace: str, index: NamespaceIndex) -> dict[str, EncoderIndex]:
        if not self.indexes.config.models:
            return {}
        out = {}
        for name, encoder in self.encoders.items():
            held = self._encoder_indexes[(namespace, name)] = self._encoder_indexes.get((namespace, name)) or EncoderIndex(encoder)
            out[name] = held.caught_up(index, progress=self.encoder_progress)
        return out

    def flush_encoders(self) -> int:
        """Write the extra encoders' new passage vectors to their cache (when it has a folder)."""
        return sum(e.passages.flush() for e in (self._encoders or {}).values())

    def encode_queries(self, texts: Sequence[str], names: Sequence[str]) -> dict[str, Any]:
        """The queries' vectors by each extra encoder in ``names`` (row i for text i)."""
        missing = [n for n in names if n not in self.encoders]
        if missing:
            carried = list(self.indexes.config.models)
            raise ValidationError(f"{missing[0]} is not an encoder of store {self.store.root} (index.models: "
                                  f"{carried}): add {encoder_alias(missing[0])!r} to its index.models", field="encoders")
        return {n: self.encoders[n].embed_queries(list(texts)) for n in names}

    def memories(self, namespace: str | None = None) -> pl.DataFrame:
        return self.store.memories(namespace)

    def get(self, memory_id: str) -> dict[str, Any]:
        return self.store.get(memory_id)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors: the one path every search and evaluation embeds through."""
        if self.cache is not None and self.cache.model_id == self.query_embedder.model_id:
            return self.cache.embed(self.query_embedder, list(texts), queries=True)
        return self.query_embedder.embed_queries(list(texts))

    def resolve_config(self, config: SearchConfig | None, preset: str | None) -> SearchConfig:
        if config is not None and preset is not None:
            raise ValidationError("give a search config or a preset, not both")
        return config or (resolve(preset) if preset is not None else self.search_config)

    # ------------------------------------------------------------------ search
    def candidates(self, queries: Sequence[Query], config: SearchConfig | None = None, *,
                   query_vectors: np.ndarray | None = None) -> pl.DataFrame:
        """Every signal's ranked lists for a batch of queries, as one candidate table."""
        config = config or self.search_config
        snapshots = {ns: self.snapshot(ns) for ns in sorted({q.namespace for q in queries})}
        if query_vectors is None:
            query_vectors = self.embed_queries([q.text for q in queries])
        encoded = self.encode_queries([q.text for q in queries], config.encoders) if config.encoders else None
        return candidates(snapshots, queries, query_vectors, config, encoder_vectors=encoded)

    def search_response(self, query: str, namespace: str, k: int | None = None, *,
                        config: SearchConfig | None = None, preset: str | None = None,
                        explain: bool = False, query_vector: np.ndarray | None = None) -> SearchResponse:
        """The whole response of a search: results, the query's analysis, the config's name.

        ``query_vector`` is the query's embedding when the caller has it already (a server embeds
        concurrent queries in one model call)."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError("query must be a non-empty string")
        snap = self.snapshot(namespace)
        vector = self.embed_queries([query])[0] if query_vector is None else query_vector
        config = self.resolve_config(config, preset)
        encoded = ({n: m[0] for n, m in self.encode_queries([query], config.encoders).items()}
                   if config.encoders else None)
        return search(snap, query, vector, config, k=k, explain=explain, encoded=encoded)

    def search_many(self, requests: Sequence[SearchRequest], namespace: str, *, config: SearchConfig | None = None,
                    preset: str | None = None) -> list[SearchResponse]:
        """Several queries of one namespace answered together (one candidate table, one fusion);
        each response is the one ``search_response`` gives for its query alone. Requests without a
        vector are embedded here, in one model call."""
        missing = [i for i, r in enumerate(requests) if r.vector is None]
        if missing:
            for i, r in enumerate(requests):
                if not isinstance(r.query, str) or not r.query.strip():
                    raise ValidationError(f"search request {i}: query must be a non-empty string")
            vectors = self.embed_queries([requests[i].query for i in missing])
            requests = list(requests)
            for i, vector in zip(missing, vectors):
                requests[i] = replace(requests[i], vector=vector)
        config = self.resolve_config(config, preset)
        if config.encoders:  # the extra encoders' query vectors, for requests that came without them
            todo = [i for i, r in enumerate(requests) if not r.encoded or any(n not in r.encoded for n in config.encoders)]
            if todo:
                encoded = self.encode_queries([requests[i].query for i in todo], config.encoders)
                requests = list(requests)
                for row, i in enumerate(todo):
                    requests[i] = replace(requests[i], encoded={n: m[row] for n, m in encoded.items()})
        return search_many(self.snapshot(namespace), requests, config)

    def search(self, query: str, namespace: str, k: int | None = None, *, config: SearchConfig | None = None,
               preset: str | None = None, explain: bool = False, query_vector: np.ndarray | None = None) -> list[Result]:
        """The ranked results of one query in one namespace (default configuration: the retriever's)."""
        return self.search_response(query, namespace, k, config=config, preset=preset, explain=explain,
                                    query_vector=query_vector).results

    # ------------------------------------------------------------------ assembly
    def neighbours(self, namespace: str, items: Sequence[Item], window: int) -> dict[str, list[Item]]:
        """For each item with an episode: up to ``window`` valid turns before and after it."""
        if window <= 0 or not any(i.episode for i in items):
            return {}
        nsview = self.view(namespace)
        members = nsview.episode_members()
        out: dict[str, list[Item]] = {}
        for it in items:
            group = members.get(it.episode) if it.episode else None
            p = nsview.pos.get(it.memory_id)
            if group is None or p is None or p not in group:
                continue
            at = group.index(p)
            around = [q for q in group[max(0, at - window):at + window + 1] if q != p]
            out[it.memory_id] = [
                Item(r["id"], item_text(r["title"], r["content"]), 0.0, r["created_at"], r["type"],
                     bool(r["pinned"]), it.episode)
                for r in nsview.rows_at(around)
            ]
        return out

    def context(self, query: str, namespace: str, budget: int | None = None, *,
                config: SearchConfig | None = None, preset: str | None = None,
                assemble_config: AssembleConfig | None = None, candidates: int = 50) -> Context:
        """Search ``namespace`` for ``query`` (``candidates`` fused results), then assemble them.

        The reference time for "recent" is the assemble config's, else the search's, else the
        namespace's latest memory; the exact counter uses the embedding model's tokenizer.
        """
        return self.search_and_assemble(query, namespace, budget, config=config, preset=preset,
                                        assemble_config=assemble_config, candidates=candidates)[0]

    def search_and_assemble(self, query: str, namespace: str, budget: int | None = None, *,
                            config: SearchConfig | None = None, preset: str | None = None,
                            assemble_config: AssembleConfig | None = None, candidates: int = 50,
                            query_vector: np.ndarray | None = None) -> tuple[Context, list[Result]]:
        """``context``, also returning the search results offered to assembly (a writer logs them)."""
        if candidates < 1:
            raise ValidationError(f"candidates must be >= 1, got {candidates}")
        acfg = assemble_config or self.assemble_config
        if budget is not None:
            acfg = replace(acfg, budget=budget)
        scfg = self.resolve_config(config, preset)
        response = self.search_response(query, namespace, k=candidates, config=scfg, query_vector=query_vector)
        return self.assemble_response(response, namespace, acfg, scfg), response.results

    def assemble_response(self, response: SearchResponse, namespace: str, assemble_config: AssembleConfig | None = None,
                          config: SearchConfig | None = None) -> Context:
        """A search response assembled into a context that carries its abstention decision; a
        search that abstains assembles nothing (an agent is given no context rather than loosely
        related text)."""
        context = self.assemble([] if response.abstention.abstain else response.results, namespace,
                                assemble_config, config)
        context.abstention = response.abstention
        return context

    def assemble(self, results: Sequence[Result], namespace: str, assemble_config: AssembleConfig | None = None,
                 config: SearchConfig | None = None) -> Context:
        """Assemble search results of ``namespace`` into a context (the second half of ``context``)."""
        acfg = assemble_config or self.assemble_config
        scfg = config or self.search_config
        items = [item_from_result(r) for r in results]
        counter = self.counter(acfg.counter)
        ref: datetime | str = acfg.reference_time or reference_time(scfg, self.view(namespace))
        return assemble_items(items, acfg, counter=counter, reference_time=ref,
                        neighbours=self.neighbours(namespace, items, acfg.neighbours))

    def counter(self, name: str):
        """The token counter ``name`` names; the exact one is the embedding model's tokenizer."""
        return make_counter(name, getattr(self.embedder, "tokenizer", None) if name == "exact" else None)
