"""The Ray engine: texts to embed flow through ``ray.data`` ``map_batches`` to a pool of workers,
each loading the model once (a class-based UDF); the vectors come back to the caller, whose cache
and single writer commit them as a local run would.

Ray is the ``ray`` extra (``pip install -e '.[ray]'``); nothing here is imported by the local engine.
Connecting: an address (``host:port`` of a running cluster, ``ray://host:port`` for Ray Client, or
``auto``), else a local Ray is started for the command and stopped when it ends. Nothing is ever
installed on workers (no ``runtime_env`` packages: machines may be offline): they must run the same
environment as the driver, as a cluster started from this project's ``.venv`` does.
"""
from __future__ import annotations

import logging
import math
import os
import socket
from typing import Any, Sequence

import numpy as np

from lab.config import EmbedConfig
from lab.embed.base import Embedder, MissingExtra, set_model_threads
from lab.embed.cache import EmbeddingCache
from lab.embed.registry import make_embedder
from lab.errors import ValidationError
from lab.progress import progress as progress_bar
from lab.workspace import set_library_env

BATCH = 128  # texts per model call on a worker: big enough to keep a core busy, small enough to spread
LOCAL_OBJECT_STORE = 200 * 1024**2  # a small /dev/shm would make Ray spill to disk: set it explicitly
CONNECT_TIMEOUT_S = 10.0


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtra("--engine ray needs Ray, an optional extra: pip install -e '.[ray]' "
                           "(ray[data,tune]); or use --engine local") from None
    return ray


def _check_reachable(address: str) -> None:
    """Refuse an address nobody answers at, in seconds and in one line (Ray itself would retry for
    minutes before failing with a page of log)."""
    if address in ("auto", "local") or "://" in address and not address.startswith("ray://"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValidationError(f"--ray-address {address!r}: expected HOST:PORT (a running cluster's head, e.g. "
                              "127.0.0.1:6379), ray://HOST:PORT (Ray Client) or auto", field="ray_address")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ValidationError(f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}); is it running "
                              "(`ray start --head`)? Or leave --ray-address out to start a local Ray",
                              field="ray_address") from None


class _EmbedBatch:
    """One worker's model, loaded once by name (the registry rebuilds it from its id) and called on
    each batch of texts; ``i`` carries each text's position back to the caller."""

    def __init__(self, model: str, threads: int = 1) -> None:
        self.embedder = make_embedder(EmbedConfig(model=model))
        if self.embedder.model_id != model:
            raise ValidationError(f"the worker built {self.embedder.model_id!r} for {model!r}")
        set_model_threads(self.embedder, threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = self.embedder.embed([str(t) for t in batch["text"]])
        return {"i": batch["i"], "vector": np.asarray(vectors, dtype=np.float32)}


class RayEngine:
    name = "ray"
    embeds_ahead = True  # a save's misses go out as one job, not one per batch of rows

    def __init__(self, address: str | None = None, *, workers: int | None = None, batch_size: int = BATCH) -> None:
        ray = _ray()
        self.address, self.batch_size = address, batch_size
        self._started = False
        if address:
            _check_reachable(address)  # also when Ray is up in this process already: the address is named
        if not ray.is_initialized():
            # offline machines: no usage reports; and Ray's C++ core logs errors only
            set_library_env({"RAY_USAGE_STATS_ENABLED": "0", "RAY_BACKEND_LOG_LEVEL": "error"})
            if address:
                ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            else:
                # "local": a new Ray of this machine's cores, whatever RAY_ADDRESS or a running one say
                ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                         object_store_memory=LOCAL_OBJECT_STORE,
                         logging_level=logging.ERROR, log_to_driver=False)
            self._started = True
            for name in ("ray", "ray.data"):  # its progress lines and notices would bury lab's own output
                logging.getLogger(name).setLevel(logging.ERROR)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        self.workers = max(1, min(workers or cpus, cpus))
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False  # lab's own progress reports the texts embedded
        ctx.execution_options.verbose_progress = False

    def fill_cache(self, cache: EmbeddingCache, embedder: Embedder, texts: Sequence[str], *,
                   progress: bool = False) -> int:
        todo = cache.missing(texts)
        if todo:
            cache.add(todo, self.embed(embedder, todo, progress=progress))
        return len(todo)

    def embed(self, embedder: Embedder, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        ray = _ray()
        vectors = np.zeros((len(texts), embedder.dim), dtype=np.float32)
        if not texts:
            return vectors
        items = [{"i": i, "text": t} for i, t in enumerate(texts)]
        # a batch per model call, and at least one per worker: a short list still spreads over them all
        per = max(1, min(self.batch_size, math.ceil(len(texts) / self.workers)))
        ds = ray.data.from_items(items, override_num_blocks=math.ceil(len(texts) / per)).map_batches(
            _EmbedBatch, fn_constructor_kwargs={"model": embedder.model_id}, batch_size=per,
            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=self.workers), num_cpus=1)
        bar = progress_bar(total=len(texts), desc=f"embedding on Ray ({self.workers} workers)", unit="text",
                           enabled=progress)
        done = np.zeros(len(texts), dtype=bool)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            at = batch["i"].astype(np.int64)
            vectors[at] = batch["vector"]
            done[at] = True
            bar.update(len(at))
        bar.close()
        if not done.all():  # Ray retries a lost worker's batches: a gap here is a bug, never a zero vector
            raise RuntimeError(f"Ray returned vectors for {int(done.sum())} of {len(texts)} texts")
        return vectors

    def map(self, fn, items):
        """Each item a Ray task of one CPU (all submitted at once: the cluster runs as many as it has
        cores for), the results collected in order."""
        ray = _ray()
        remote = ray.remote(num_cpus=1, max_retries=2)(fn)  # a task whose worker dies is run again
        refs = [remote.remote(item) for item in items]
        for ref in refs:
            yield ray.get(ref)

    def describe(self) -> str:
        where = self.address or "a local Ray started for this command"
        return f"ray ({where}, {self.workers} worker{'s' if self.workers != 1 else ''})"

    def close(self) -> None:
        if self._started:
            _ray().shutdown()
            self._started = False
