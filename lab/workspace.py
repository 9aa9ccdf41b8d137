"""Where lab keeps and finds things: one settings object, resolved at an edge and passed down.

An edge (the CLI, the server, a notebook's setup cell, a DVC stage, a benchmark) resolves a
``Workspace`` once from its flags, the environment and the defaults, and installs it for the
process (``install``). Everything below the edges asks ``current()``: no layer below reads
``os.environ`` (a test holds that). Without an installed workspace, library code runs on the
built-in defaults, whatever the environment says.

The installed workspace is process-wide on purpose: these are settings of the process (its
folders, its tracking store, its lock timeout), the same for every thread a server runs.

Environment variables (read by ``Workspace.resolve`` only):
``LAB_STORE``, ``LAB_EVAL_ROOT``, ``LAB_EMBED_CACHE``, ``LAB_DATASETS``, ``LAB_PROJECT``,
``MLFLOW_TRACKING_URI``, ``LAB_WRITE_LOCK_TIMEOUT``.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from lab.errors import ValidationError

ENV = {"store": "LAB_STORE", "eval_root": "LAB_EVAL_ROOT", "embed_cache": "LAB_EMBED_CACHE",
       "datasets": "LAB_DATASETS", "project": "LAB_PROJECT", "tracking_uri": "MLFLOW_TRACKING_URI",
       "write_lock_timeout": "LAB_WRITE_LOCK_TIMEOUT"}


def _default_project() -> Path:
    """The repository holding ``datasets/demo`` and ``goldens/`` when lab runs from its checkout
    (an editable install), else the working folder."""
    checkout = Path(__file__).resolve().parent.parent
    return checkout if (checkout / "goldens").is_dir() and (checkout / "datasets").is_dir() else Path.cwd()


@dataclass(frozen=True)
class Workspace:
    """The folders, tracking store and timeouts of one process."""

    project: Path = field(default_factory=_default_project)  # datasets/demo, goldens/, params.yaml
    store: Path | None = None  # the store commands use without --store (None: each command's own default)
    eval_root: Path = Path(".lab/eval")  # evaluation stores, candidate tables
    embed_cache: Path | None = None  # one embedding cache for every store (None: each store's own / eval_root's)
    datasets: Path | None = None  # the shared datasets (None: ../shared/datasets beside the project)
    tracking_uri: str | None = None  # MLflow (None: SQLite under .lab/mlflow)
    write_lock_timeout: float = 600.0  # seconds a writer waits for a store's lock

    def __post_init__(self) -> None:
        t = self.write_lock_timeout
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise ValidationError(f"write_lock_timeout must be a finite number of seconds > 0, got {t!r}")

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
        for f in fields(cls):
            if given.get(f.name) is not None:
                raw, where = given[f.name], f"the value given for {f.name}"
            elif env.get(ENV[f.name]):
                raw, where = env[ENV[f.name]], f"${ENV[f.name]}"
            else:
                continue
            values[f.name] = _coerce(f.name, raw, where)
        return cls(**values)


def _coerce(name: str, raw: Any, where: str) -> Any:
    if name == "tracking_uri":
        return str(raw)
    if name == "write_lock_timeout":
        try:
            value = float(raw)
        except (TypeError, ValueError):
            raise ValidationError(f"{where}: {raw!r} is not a number of seconds") from None
        if not math.isfinite(value) or value <= 0:
            raise ValidationError(f"{where}: the write lock timeout must be a finite number of seconds > 0, "
                                  f"got {raw!r}")
        return value
    return Path(raw)


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
    """Install the current workspace with ``changes`` (a DVC stage pointing the embedding cache
    at its own folder, a test at its temporary one)."""
    return install(replace(current(), **changes))


def set_library_env(values: Mapping[str, str], *, overwrite: bool = False) -> None:
    """Set switches that third-party libraries read from the environment (offline mode, telemetry
    off): written here so that every touch of the environment is in this module."""
    for key, value in values.items():
        if overwrite or key not in os.environ:
            os.environ[key] = value
