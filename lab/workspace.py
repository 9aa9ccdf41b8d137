"""Where lab keeps and finds things: one settings object, resolved at an edge and passed down.

An edge (the CLI, the server, a notebook's setup cell, a DVC stage, a benchmark) resolves a
``Workspace`` once from its flags, the environment and the defaults, and installs it for the
process (``install``). The shells read it (``current()``, only in `lab.cli`) and hand it, or the
values it holds, down: the flow (`lab.flow`) takes the workspace as an argument, the layers below
take paths and small values (``StoreSettings``, ``Tracking``, an evaluation root, a project
folder); where none is handed they use the built-in defaults (``Workspace()``), whatever the
environment says or which workspace is installed. No layer below the edges reads ``os.environ``,
installs a workspace or asks for the installed one (tests hold all three). A Ray task installs the
workspace its driver shipped with it (lab.engine.on_ray), for the third-party libraries it runs.

The installed workspace is process-wide on purpose: these are settings of the process (its
folders, its tracking store, its lock timeout), the same for every thread a server runs.

Environment variables (read by ``Workspace.resolve`` only):
``LAB_STORE``, ``LAB_EVAL_ROOT``, ``LAB_EMBED_CACHE``, ``LAB_DATASETS``, ``LAB_PROJECT``,
``MLFLOW_TRACKING_URI``, ``LAB_TRACKING_TIMEOUT``, ``LAB_WRITE_LOCK_TIMEOUT``, ``LAB_ENGINE``, ``RAY_ADDRESS``, ``LAB_STORE_CACHE``,
``LAB_STORAGE_OPTIONS``.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Iterator, Mapping, get_type_hints

from lab.errors import ValidationError
from lab.fields import check_declared, coerce, rule, setting

ENV = {"store": "LAB_STORE", "eval_root": "LAB_EVAL_ROOT", "embed_cache": "LAB_EMBED_CACHE",
       "datasets": "LAB_DATASETS", "project": "LAB_PROJECT", "tracking_uri": "MLFLOW_TRACKING_URI",
       "tracking_timeout": "LAB_TRACKING_TIMEOUT",
       "write_lock_timeout": "LAB_WRITE_LOCK_TIMEOUT", "engine": "LAB_ENGINE", "ray_address": "RAY_ADDRESS",
       "store_cache": "LAB_STORE_CACHE", "storage_options": "LAB_STORAGE_OPTIONS",
       "open_namespaces": "LAB_OPEN_NAMESPACES"}


def _default_project() -> Path:
    """The repository holding ``datasets/demo`` and ``goldens/`` when lab runs from its checkout
    (an editable install), else the working folder."""
    checkout = Path(__file__).resolve().parent.parent
    return checkout if (checkout / "goldens").is_dir() and (checkout / "datasets").is_dir() else Path.cwd()


@dataclass(frozen=True)
class Workspace:
    """The folders, tracking store and timeouts of one process."""

    project: Path = setting(default_factory=_default_project, doc="the folder with datasets/demo, goldens/, params.yaml")
    # a folder, or a URI (s3://bucket/prefix, file:///path): lab.store.location
    store: str | None = setting(None, doc="the store commands use without --store (none: each command's own default)")
    eval_root: Path = setting(Path(".lab/eval"), doc="evaluation stores and candidate tables")
    embed_cache: Path | None = setting(None, doc="one embedding cache for every store (none: each store's own)")
    datasets: Path | None = setting(None, doc="the shared datasets (none: ../shared/datasets beside the project)")
    tracking_uri: str | None = setting(None, doc="MLflow (none: SQLite under .lab/mlflow)")
    # MLflow's own client waits 120 s per request and retries 7 times (minutes on a dead server)
    tracking_timeout: float = setting(30.0, low=1, high=3_600, doc="seconds a tracking server may stay silent on "
                                      "one request before lab gives up on it (each call tried 3 times at most)")
    write_lock_timeout: float = setting(600.0, above=0, doc="seconds a writer waits for a store's lock")
    engine: str = setting("local", choices=("local", "ray"), doc="where heavy work runs: this process, or Ray (lab.engine)")
    ray_address: str | None = setting(None, doc="the Ray cluster's address (none: a local Ray started per command)")
    store_cache: Path = setting(Path(".lab/stores"), doc="working folders of stores at a URI (lock, index copies)")
    storage_options: str | None = setting(None, doc="JSON of deltalake storage options for stores at a URI "
                                                    "(none: the provider's own environment variables)")
    open_namespaces: int = setting(1024, low=1, high=10_000_000, doc="namespaces whose views and indexes a process "
                                   "keeps open, the least recently used closed first (a server's memory is bounded "
                                   "by it, not by the namespace count)")

    def __post_init__(self) -> None:
        check_declared(self)
        storage_options(self.storage_options, "the workspace")  # refused here, not at the first store opened

    @property
    def storage(self) -> dict[str, str]:
        """The storage options as a mapping (lab.store.location)."""
        return storage_options(self.storage_options, "the workspace")

    @property
    def datasets_root(self) -> Path:
        return self.datasets if self.datasets is not None else self.project.parent / "shared" / "datasets"

    @property
    def eval_embeddings(self) -> Path:
        """The embedding cache evaluation stores share."""
        return self.embed_cache if self.embed_cache is not None else self.eval_root / "embeddings"

    @classmethod
    def resolve(cls, env: Mapping[str, str] | None = None, **given: Any) -> "Workspace":
        """``given`` values (flags; None means not given), then the environment, then the defaults."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        hints = get_type_hints(cls)
        for f in fields(cls):
            if given.get(f.name) is not None:
                raw, where = given[f.name], f"the value given for {f.name}"
            elif env.get(ENV[f.name]):
                raw, where = env[ENV[f.name]], f"${ENV[f.name]}"
            else:
                continue
            value = coerce(hints[f.name], raw, where, text=True, field=f.name)
            problem = rule(cls, f.name).problem(value)
            if problem:
                raise ValidationError(f"{f.name} from {where} {problem}", field=f.name)
            if f.name == "storage_options":
                storage_options(value, where)  # refused naming where it came from
            values[f.name] = value
        return cls(**values)


def storage_options(text: str | None, where: str) -> dict[str, str]:
    """Storage options from JSON (``{"AWS_REGION": "eu-west-1"}``); refused naming where they came from."""
    import json

    if not text:
        return {}
    # the options hold keys and tokens: an error names the option and the problem, never a value
    try:
        value = json.loads(text)
    except ValueError as exc:
        where_in = f" at line {exc.lineno} column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise ValidationError(f"storage_options from {where}: not JSON{where_in} (values are not shown)",
                              field="storage_options") from None
    if not isinstance(value, dict):
        raise ValidationError(f"storage_options from {where}: expected a JSON object of names to values, got "
                              f"{_json_kind(value)}", field="storage_options")
    bad = sorted(k for k, v in value.items() if not isinstance(v, (str, int, float, bool)))
    if bad:
        kinds = ", ".join(f"{k!r} ({_json_kind(value[k])})" for k in bad[:5])
        raise ValidationError(f"storage_options from {where}: each value must be a string, number or true/false; "
                              f"not so for {kinds} (values are not shown)", field="storage_options")
    return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def _json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words (never the value itself)."""
    kinds = {dict: "an object", list: "an array", str: "a string", bool: "true/false", int: "a number", float: "a number"}
    return "null" if value is None else kinds.get(type(value), "a value")


_installed: Workspace | None = None


def install(workspace: Workspace) -> Workspace:
    """Make ``workspace`` the process's (an edge calls this once, after resolving it)."""
    global _installed
    _installed = workspace
    return workspace


def current() -> Workspace:
    """The installed workspace, else the built-in defaults (no environment read)."""
    return _installed if _installed is not None else Workspace()


def use(**changes: Any) -> Workspace:
    """Install the current workspace with ``changes``: for an edge (a test pointing the evaluation
    root at its temporary folder); library code is handed a workspace instead."""
    return install(replace(current(), **changes))


def process_environment() -> Mapping[str, str]:
    """The process's environment, from which a server model's file reads the variables it declares
    (``lab.embed.server_spec``; nothing else of it): every touch of the environment is in this module."""
    return os.environ


@contextlib.contextmanager
def env_kept(*keys: str) -> Iterator[None]:
    """The environment's ``keys`` put back as they were when the block ends: a library call inside that
    writes one (MLflow exports the tracking URI it is given, for its subprocesses) leaves none behind."""
    before = {key: os.environ.get(key) for key in keys}
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def set_library_env(values: Mapping[str, str], *, overwrite: bool = False) -> None:
    """Set switches that third-party libraries read from the environment (offline mode, telemetry
    off): written here so that every touch of the environment is in this module."""
    for key, value in values.items():
        if overwrite or key not in os.environ:
            os.environ[key] = value
