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
import queue
import threading
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from lab.config import EmbedConfig
from lab.embed.base import Embedder, MissingExtra, set_model_threads
from lab.embed.embedding_cache import EmbeddingCache
from lab.embed.registry import make_embedder
from lab.engine.address import HINT, HeadWatch, RayAddress, check_address
from lab.errors import LabError, ValidationError
from lab.progress import progress as progress_bar
from lab.engine.output import EngineLog
from lab.workspace import Workspace, install, set_library_env

BATCH = 128  # texts per model call on a worker: big enough to keep a core busy, small enough to spread
LOCAL_OBJECT_STORE = 200 * 1024**2  # a small /dev/shm would make Ray spill to disk: set it explicitly
ASK_TIMEOUT_S = 5.0  # Ray's GCS answers its first call in milliseconds
RETRIES = 2  # runs of a task whose worker died, after the first
POLL_S = 1.0  # how often a driver waiting on a cluster asks whether its head still listens


def engine_log_path(workspace: Workspace) -> Path:
    """Where Ray's own output of a command goes: ``logs/ray.log`` beside the evaluation root
    (``.lab/logs/ray.log`` by default), appended to by each command."""
    return Path(workspace.eval_root).parent / "logs" / "ray.log"


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtra("--engine ray needs Ray, an optional extra: pip install -e '.[ray]' "
                           "(ray[data,tune]); or use --engine local") from None
    return ray


def _token_metadata(address: str) -> list[tuple[str, str]]:
    """The authorization header Ray's driver would send: the token Ray's own loader finds
    ($RAY_AUTH_TOKEN, $RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token) when token auth is on, else none."""
    try:
        from ray._raylet import AuthenticationTokenLoader
        from ray.exceptions import AuthenticationError
    except ImportError:  # a Ray without token authentication
        return []
    loader = AuthenticationTokenLoader.instance()
    try:
        return list(loader.get_token_for_http_header().items()) if loader.has_token() else []
    except AuthenticationError:  # token mode on, no token anywhere (Ray's message is a page of help)
        raise ValidationError("Ray token authentication is on for this driver ($RAY_AUTH_MODE=token) but no token "
                              f"was found to give the cluster at {address}: set RAY_AUTH_TOKEN (or "
                              "RAY_AUTH_TOKEN_PATH, a file) to the cluster's token, or RAY_AUTH_MODE=disabled for a "
                              "cluster without authentication", field="ray_address") from None


def _ask_cluster(address: RayAddress) -> None:
    """The first call Ray's driver makes (the GCS's cluster id; Ray Client's cluster info), made
    once with a deadline: an answer proves Ray is there and takes this driver's token, where
    ray.init would retry for tens of seconds and then name neither the token nor the port."""
    import grpc

    method = "/ray.rpc.RayletDriver/ClusterInfo" if address.client else "/ray.rpc.NodeInfoGcsService/GetClusterId"
    token = _token_metadata(address.text)
    target = f"[{address.host}]:{address.port}" if ":" in address.host else f"{address.host}:{address.port}"
    # straight to the address, as Ray's own channels go (grpc would otherwise follow $http_proxy)
    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        try:
            channel.unary_unary(method, request_serializer=None, response_deserializer=None)(
                b"", timeout=ASK_TIMEOUT_S, metadata=token)
            return
        except grpc.RpcError as exc:
            code, details = exc.code(), (exc.details() or "").splitlines()[0:1]
    if code == grpc.StatusCode.UNAUTHENTICATED:
        if not token:
            raise ValidationError(f"the Ray cluster at {address.text} requires token authentication and this driver has "
                                  "no token: set RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH, a file) to the cluster's token",
                                  field="ray_address")
        raise ValidationError(f"the Ray cluster at {address.text} refused this driver's token (from $RAY_AUTH_TOKEN, "
                              "$RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): it is not the cluster's token",
                              field="ray_address")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        other = ("Ray Client's: is it the GCS port? then drop ray:// (from a node of the cluster)" if address.client
                 else "Ray's GCS: is it the Ray Client port? then use ray://" + target)
        raise ValidationError(f"no Ray cluster at {address.text}: a gRPC server answers there but not {other}",
                              field="ray_address")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNKNOWN):
        said = f": {details[0][:120]}" if details else ""
        raise ValidationError(f"no Ray cluster at {address.text}: gRPC {code.name}{said}; {HINT}", field="ray_address")
    # any other answer (Ray Client cannot serialise an empty request's reply: NOT_FOUND) is Ray's


def _result(ray: Any, ref: Any, retries: int) -> Any:
    """A task's result; lab's own error raised in the task is raised here as itself (Ray would wrap
    it with the task's traceback), and a task lost beyond its retries is one line."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, LabError):
            raise exc.cause from None
        raise
    except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError, ray.exceptions.ObjectLostError,
            ray.exceptions.OwnerDiedError, ray.exceptions.LocalRayletDiedError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        raise LabError(f"a Ray task of this job was lost {retries + 1} times ({type(exc).__name__}: {first}); "
                       "run the command again (what was finished and reported before is kept)") from None


def _connect(ray: Any, address: str) -> None:
    """ray.init on a checked address; what it still raises becomes one line naming the address."""
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
    except Exception as exc:
        # Ray's own AuthenticationError carries a page of help after its message: the message is the point
        said = getattr(exc, "message", None) or str(exc)
        raise ValidationError(f"Ray did not connect to the cluster at {address}: {type(exc).__name__}: "
                              f"{str(said).strip().splitlines()[0][:200] if str(said).strip() else 'no reason given'}",
                              field="ray_address") from None


def _worker_model(embedder: Embedder) -> dict[str, Any]:
    """How a worker builds ``embedder``: by its id, or a server model by the name it was given (its
    file's settings are not in the id) with the environment variables the file declares."""
    spec = getattr(embedder, "spec", None)
    if spec is None:
        return {"model": embedder.model_id}
    env = {name: spec.env.env[name] for name in spec.env.declared if spec.env.env.get(name)}
    return {"model": spec.source, "expect": embedder.model_id, "env": env}


class _EmbedBatch:
    """One worker's model, loaded once by name (the registry rebuilds it from its id) and called on
    each batch of texts; ``i`` carries each text's position back to the caller."""

    def __init__(self, model: str, threads: int = 1, expect: str | None = None, env: dict | None = None) -> None:
        # a server model's key (the variables its file declares) travels with the worker's arguments
        set_library_env(env or {}, overwrite=True)
        self.embedder = make_embedder(EmbedConfig(model=model))
        if self.embedder.model_id != (expect or model):
            raise ValidationError(f"the worker built {self.embedder.model_id!r} for {expect or model!r}")
        set_model_threads(self.embedder, threads)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        vectors = self.embedder.embed([str(t) for t in batch["text"]])
        return {"i": batch["i"], "vector": np.asarray(vectors, dtype=np.float32)}


def _in_workspace(workspace: Workspace | None, fn: Callable[[Any], Any], item: Any) -> Any:
    """A unit of work on a worker, in the driver's workspace: a worker process is an edge of its
    own that resolved nothing. lab's units are handed every value they use (a portable
    ``DatasetRef``, evaluation root, embedding cache, store settings); the installed workspace is
    for code that asks an edge's question there (a user's own system class)."""
    if workspace is not None:
        install(workspace)
    return fn(item)


class RayEngine:
    name = "ray"
    embeds_ahead = True  # a save's misses go out as one job, not one per batch of rows
    in_process = False

    def __init__(self, address: str | None = None, *, workers: int | None = None, batch_size: int = BATCH,
                 auth: str | None = None, workspace: Workspace | None = None) -> None:
        # what Ray reads from the environment, set before it is imported: no usage reports (offline
        # machines), its C++ core's errors only, and the token auth mode the user's settings ask for
        # ($RAY_AUTH_TOKEN given without $RAY_AUTH_MODE: lab.cli.common.ray_auth)
        # (its C++ core's errors would be a wall of lines for one lost head: lab says it in one)
        set_library_env({"RAY_USAGE_STATS_ENABLED": "0", "RAY_BACKEND_LOG_LEVEL": "fatal",
                         **({"RAY_AUTH_MODE": auth} if auth else {})})
        ray = _ray()
        self.address, self.batch_size = address, batch_size
        self.workspace = workspace  # the driver's, shipped with each task (a worker has none of its own)
        self._started = self._head_lost = False
        self._watch: HeadWatch | None = None  # a cluster's head, watched while this driver waits on it
        if address:  # also when Ray is up in this process already: the address is named
            parsed = check_address(address)
            if parsed is not None:
                _ask_cluster(parsed)
                self._watch = HeadWatch(parsed)
        # what Ray's core prints to this process's stderr as it starts goes to a log, not between lab's lines
        self.log = EngineLog(engine_log_path(workspace or Workspace()))  # none: the defaults
        with self.log.capturing():
            if not ray.is_initialized():
                if address:
                    _connect(ray, address)
                else:
                    # "local": a new Ray of this machine's cores, whatever RAY_ADDRESS or a running one say
                    ray.init(address="local", num_cpus=os.cpu_count() or 1, include_dashboard=False,
                             object_store_memory=LOCAL_OBJECT_STORE,
                             logging_level=logging.ERROR, log_to_driver=False)
                self._started = True
            import ray.data  # noqa: F401  (its import configures its logger: quiet it after, not before)

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
            _EmbedBatch, fn_constructor_kwargs=_worker_model(embedder), batch_size=per,
            batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=self.workers), num_cpus=1)
        bar = progress_bar(total=len(texts), desc=f"embedding on Ray ({self.workers} workers)", unit="text",
                           enabled=progress)
        done = np.zeros(len(texts), dtype=bool)
        for batch in self._watched(ds.iter_batches(batch_size=None, batch_format="numpy")):
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
        remote = ray.remote(num_cpus=1, max_retries=RETRIES)(_in_workspace)  # a task whose worker dies is run again
        refs = [remote.remote(self.workspace, fn, item) for item in items]
        for ref in refs:
            while self._watch is not None and not ray.wait([ref], timeout=POLL_S)[0]:
                self._check_head()
            yield _result(ray, ref, RETRIES)

    def _check_head(self) -> None:
        gone = self._watch.gone() if self._watch is not None else None
        if gone:
            self._head_lost = True
            raise LabError(f"the Ray cluster's head went away mid-job: {gone}; the work in flight on it is lost "
                           "(what was finished and reported before is kept): run the command again once the "
                           "cluster is back")

    def _watched(self, batches: Iterator[Any]) -> Iterator[Any]:
        """``batches`` pulled on a thread of their own while this one watches the cluster's head:
        Ray Data's iterator would wait on a lost head until Ray ends the process."""
        if self._watch is None:
            yield from batches
            return
        got: queue.Queue = queue.Queue()  # unbounded: a pump left behind by an error never blocks for good

        def pump() -> None:
            try:
                for batch in batches:
                    got.put(("batch", batch))
                got.put(("end", None))
            except BaseException as exc:  # handed to the waiting thread, which raises it
                got.put(("error", exc))

        threading.Thread(target=pump, name="lab-ray-batches", daemon=True).start()
        while True:
            try:
                kind, value = got.get(timeout=POLL_S)
            except queue.Empty:
                self._check_head()
                continue
            if kind == "end":
                return
            if kind == "error":
                raise value
            yield value

    def describe(self) -> str:
        where = self.address or "a local Ray started for this command"
        return f"ray ({where}, {self.workers} worker{'s' if self.workers != 1 else ''}); its own output: {self.log.path}"

    def close(self) -> None:
        if self._started and not self._head_lost:
            _ray().shutdown()
        self._started = False
