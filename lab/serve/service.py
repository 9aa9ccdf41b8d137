"""The server's engine: one store, its writer and retriever, writes group-committed and queries
embedded in batches; safe to call from many request threads at once.

Three locks keep it simple and correct:
- ``lock`` (store, indexes, views): held by one thread at a time for one read or one commit. A
  write is acknowledged after its commit and its index update, under this lock, so the next
  search sees it.
- ``embed_lock`` (the store's model): one model call at a time (the tokenizer is not re-entrant).
- the store's file lock (taken by the writer): other processes writing the same store take turns.

Writes queue to one committer thread. Consecutive creates are committed together (one chunks
commit, one memories commit for up to ``group_max`` memories), their texts embedded ahead in one
model call outside the store lock.

Searches and context requests go through a pipeline. Embedder threads, each driving a model in
a process of its own (``query_embedders``; see ``lab.embed.worker``), take every query waiting
and embed them in one model call. One searcher thread answers the embedded queries; those of one
namespace and configuration are answered together (one candidate table, one fusion: most of a
search's Python cost is paid once for the batch). So while the searcher answers one batch, the
next is embedded on the other core. A model call runs on ``model_threads`` threads (one by
default: with searches running beside it, a second thread mostly spins waiting for the first).
"""
from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from lab.config import AssembleConfig, SaveConfig, SearchConfig, to_dict
from lab.embed import Embedder
from lab.embed.base import set_model_threads
from lab.embed.registry import lookup, make_embedder, query_model_name
from lab.embed.server_spec import is_server_model
from lab.embed.worker import ProcessEmbedder
from lab.errors import ConflictError, LabError
from lab.pipeline import Pipeline
from lab.retriever import require_query_model
from lab.search.searcher import SearchRequest
from lab.serve.bundle import Served, served_save_config
from lab.serve.committer import Committer
from lab.serve.jobs import Job, Observer
from lab.serve.settings import Settings
from lab.serve.work import Context, Read, Write
from lab.store.location import is_uri
from lab.store.layout import is_store
from lab.store.settings import StoreSettings
from lab.store.store import Store, warm_writes

log = logging.getLogger("lab.serve")


def store_config(path: Path | str, served: Served, stores: StoreSettings | None = None) -> SaveConfig:
    """The save config to open the served store with: the gated index-time settings. A store
    created with other chunking or another model is refused (its chunks would not be what the
    gate measured)."""
    gated = served_save_config(served, stores)
    if not is_store(path, stores):
        return gated or SaveConfig()
    stored = Store.open(path, read_only=True, settings=stores).recorded_config()
    if gated is None:
        return stored
    # what the stored chunks were made with must be what the gate measured (batch size and the
    # embedding cache do not change a vector)
    for what, gated_value, stored_value in (("chunk settings", to_dict(gated.chunk), to_dict(stored.chunk)),
                                            ("embedding model", gated.embed.model, stored.embed.model)):
        if gated_value != stored_value:
            raise ConflictError(
                f"the served configuration was gated with {what} {gated_value}, but the store was created with "
                f"{stored_value}: serve another store (--store) or gate a candidate with the store's settings")
    return replace(stored, index=gated.index)


class MemoryService:
    """Everything the HTTP layer calls; no HTTP in here."""

    def __init__(self, settings: Settings, served: Served, *, embedder: Embedder | None = None,
                 observer: Observer | None = None, stores: StoreSettings | None = None) -> None:
        # stores: the settings the store is opened with, the edge's (lab.store.settings; None: the built-in defaults)
        self.settings = settings
        self.served = served
        self._observer = observer or Observer()
        path = settings.store if is_uri(settings.store) else Path(settings.store)  # a folder, or a URI
        self.pipeline = Pipeline.open(path, store_config(path, served, stores), create=True, embedder=embedder,
                                      settings=stores)
        self.store = self.pipeline.store
        self.store.follow_other_writers(settings.refresh_seconds)
        self.retriever = self.pipeline.retriever
        self.writer = self.pipeline.writer
        self.search_config: SearchConfig = served.search
        self.assemble_config: AssembleConfig = served.assemble
        self.lock = threading.Lock()
        self.embed_lock = threading.Lock()
        self._reads: deque[Job] = deque()
        self._embedded: deque[tuple[Job, Any]] = deque()  # (job, its query vector), for the searcher
        self._read_cond = threading.Condition()
        self._embedded_cond = threading.Condition()
        self._closing = False  # no more reads are taken
        self.committer = Committer(settings, self.pipeline, self.lock, self.embed_lock, self._observer)
        self.ready = threading.Event()
        self.startup_error: str | None = None
        # queries are embedded in model processes of their own (the GIL stays with searches and
        # HTTP); with none asked for, or an embedder handed in (tests), by the store's embedder
        # in this process, under embed_lock (shared with the committer)
        self._query_embedders: list[tuple[Embedder, threading.Lock]]
        store_model = self.pipeline.embedder
        # auto defers to the gated candidate's own query model (a query adapter the bundle carries)
        setting = served.query_model if settings.query_model == "auto" and served.query_model else settings.query_model
        self.query_model = embedder.model_id if embedder is not None else query_model_name(
            setting, store_model.model_id, self.store.info.embed_space)
        # a server model's calls wait on the network, not the GIL: no process of its own
        in_process = settings.query_embedders == 0 or embedder is not None or is_server_model(self.query_model)
        if self.query_model == store_model.model_id and in_process:
            set_model_threads(store_model, settings.model_threads)
            self._query_embedders = [(store_model, self.embed_lock)]
        elif in_process:
            query = make_embedder(replace(self.pipeline.config.embed, model=self.query_model, cache=False))
            require_query_model(self.store, query)
            set_model_threads(query, settings.model_threads)
            self._query_embedders = [(query, threading.Lock())]
        else:
            spec = lookup(self.query_model)
            space = spec.space if spec is not None else store_model.space
            symmetric = spec.symmetric if spec is not None else store_model.symmetric
            self._query_embedders = [(ProcessEmbedder(self.query_model, store_model.dim, threads=settings.model_threads,
                                                      timeout_s=settings.embed_timeout_s, space=space,
                                                      symmetric=symmetric),
                                      threading.Lock()) for _ in range(settings.query_embedders)]
            require_query_model(self.store, self._query_embedders[0][0])
        log.info("queries are encoded by %s (the store's vectors are %s)", self.query_model, store_model.model_id)
        self._embedders_running = len(self._query_embedders)
        self._threads = [threading.Thread(target=self._embed_loop, args=(i,), name=f"lab-embedder-{i}", daemon=True)
                         for i in range(len(self._query_embedders))]
        self._threads += [threading.Thread(target=self._search_loop, name="lab-searcher", daemon=True),
                          self.committer.thread]
        for t in self._threads:
            t.start()

    def embedding_models(self) -> dict[str, Any]:
        """The models in use, a local folder named by its last part (no path leaves the server)."""
        def shown(model_id: str) -> str:
            backend, sep, rest = model_id.partition(":")
            return f"{backend}:{Path(rest).name}" if sep and "/" in rest else model_id

        return {"store": shown(self.pipeline.embedder.model_id), "query": shown(self.query_model),
                "encoders": list(self.pipeline.config.index.models)}

    @property
    def observer(self) -> Observer:
        return self._observer

    @observer.setter
    def observer(self, observer: Observer) -> None:  # the app's metrics, set after the service is made
        self._observer = self.committer.observer = observer

    # ------------------------------------------------------------------ lifecycle
    def warm(self) -> None:
        """Load the namespaces' indexes (snapshot, then catch up with the store; the first
        ``open_namespaces`` of them by name) and the models."""
        try:
            started = time.perf_counter()
            with self.lock:
                # at most as many as stay open: warming more would close the first ones again (a
                # store of 10,000 one-user namespaces took twenty minutes to be ready)
                namespaces = self.store.namespaces()[:self.store.settings.open_namespaces]
                warm_writes(self.store)  # the first save then costs what the others do
                analysed = 0
                for ns in namespaces:  # analysing loads the namespace's index and view first
                    analysed += self.retriever.analyse(ns)
                log.info("analysed %d memories' texts for the coverage feature", analysed)
            # the store's model (writes) and the query models load now, not at the first request
            with self.embed_lock:
                self.pipeline.embedder.embed(["warm up"])
            for model, model_lock in self._query_embedders:
                with model_lock:
                    vector = model.embed_queries(["warm up"])[0]
            # one search per namespace: the first search's one-time costs (query plans, caches
            # of the view) are paid here, not by the first caller
            with self.lock:
                for ns in namespaces:
                    self.retriever.search_many([SearchRequest("warm up", vector)], ns, config=self.search_config)
            # the loaded indexes and views live as long as the process: taken out of the cyclic
            # garbage collector's full passes, which otherwise stop every thread for ~0.5 s at
            # 100,000 memories now and then (a long tail in benchmarks/serve_load.py)
            gc.collect()
            gc.freeze()
            log.info("ready: %d namespaces loaded in %.1f s", len(namespaces), time.perf_counter() - started)
            self.ready.set()
        except LabError as exc:  # one of lab's own (a store that does not answer): said in one line
            self.startup_error = f"{type(exc).__name__}: {exc}"
            log.error("loading the indexes failed: %s", exc)
        except Exception as exc:  # reported by /ready; the process stays up to say so
            self.startup_error = f"{type(exc).__name__}: {exc}"
            log.exception("loading the indexes failed")

    def close(self) -> None:
        """Finish queued writes, then save the embedding cache and the changed index snapshots."""
        self.committer.close()
        with self._read_cond:
            self._closing = True
            self._read_cond.notify_all()
        for t in self._threads:
            t.join(timeout=60)
        for model, _ in self._query_embedders:
            if isinstance(model, ProcessEmbedder):
                model.close()
        with self.lock:
            try:
                self.pipeline.close()
            except LabError as exc:  # every write was committed before it was acknowledged: only the
                # snapshots and the embedding cache are not saved (the next open rebuilds them)
                log.error("closing the store: index snapshots not saved: %s", exc)

    # ------------------------------------------------------------------ plain reads (request threads)
    def read(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (a read of the store) with the store to itself."""
        with self.lock:
            return fn()

    # ------------------------------------------------------------------ queued work
    def submit_read(self, work: Read) -> Future:
        job = Job(work, Future())
        with self._read_cond:
            if self._closing:
                raise ConflictError("the server is shutting down")
            self._reads.append(job)
            self._read_cond.notify()
        return job.future

    def submit_write(self, work: Write) -> Future:
        return self.committer.submit(work)

    # ------------------------------------------------------------------ the reader threads
    def _embed_loop(self, which: int) -> None:
        model, model_lock = self._query_embedders[which]
        try:
            while True:
                with self._read_cond:
                    while not self._reads and not self._closing:
                        self._read_cond.wait()
                    if not self._reads:
                        return
                    batch = [self._reads.popleft() for _ in range(min(len(self._reads), self.settings.query_batch))]
                batch = [job for job in batch if job.future.set_running_or_notify_cancel()]
                if not batch:
                    continue
                try:
                    texts = sorted({job.work.query for job in batch})
                    started = time.perf_counter()
                    with model_lock:
                        vectors = model.embed_queries(texts)
                    self.observer.embedded(len(texts), time.perf_counter() - started)
                    vector_of = dict(zip(texts, vectors))
                except BaseException as exc:  # the model failed: every query of the batch fails with it
                    for job in batch:
                        job.future.set_exception(exc)
                    continue
                with self._embedded_cond:
                    self._embedded.extend((job, vector_of[job.work.query]) for job in batch)
                    self._embedded_cond.notify()
        finally:
            with self._embedded_cond:
                self._embedders_running -= 1
                self._embedded_cond.notify()

    def _search_loop(self) -> None:
        while True:
            with self._embedded_cond:
                while not self._embedded and self._embedders_running:
                    self._embedded_cond.wait()
                if not self._embedded:
                    return
                batch = list(self._embedded)
                self._embedded.clear()
            for group in _groups(batch):
                try:
                    self._answer_group(group)
                except BaseException as exc:  # never leave a caller waiting, nor end the only searcher
                    log.exception("answering %d queries failed", len(group))
                    for job, _ in group:
                        if not job.future.done():
                            job.future.set_exception(exc)

    def _answer_group(self, group: list[tuple[Job, Any]]) -> None:
        """Answer queries of one namespace and configuration together; should that fail, each
        alone, so one bad request gets its own error and does not fail the others."""
        first = group[0][0].work
        requests = [job.work.request(vector) for job, vector in group]
        started = time.perf_counter()
        try:
            with self.lock:
                responses = self.retriever.search_many(requests, first.namespace, config=first.config)
                searched = time.perf_counter()
                answers = [job.work.finish(self.retriever, response) for (job, _), response in zip(group, responses)]
        except BaseException as exc:
            if len(group) == 1:
                group[0][0].future.set_exception(exc)
                return
            for one in group:
                self._answer_group([one])
            return
        assembled = time.perf_counter()
        contexts = sum(isinstance(job.work, Context) for job, _ in group)
        self.observer.searched(len(group), searched - started)
        for _ in range(contexts):
            self.observer.assembled((assembled - searched) / contexts)
        for (job, _), answer in zip(group, answers):
            job.future.set_result(answer)


def _groups(batch: list[tuple[Job, Any]]) -> list[list[tuple[Job, Any]]]:
    """The batch split by namespace and search configuration (a request's filters make its own
    configuration), in order of first arrival."""
    groups: list[list[tuple[Job, Any]]] = []
    for item in batch:
        p = item[0].work
        for group in groups:
            q = group[0][0].work
            if q.namespace == p.namespace and (q.config is p.config or q.config == p.config):
                group.append(item)
                break
        else:
            groups.append([item])
    return groups
