"""`lab eval --system ...`: each memory system, one independent unit of work (its own scratch
folder, its own ingest and questions), run on the engine: one after another locally, as Ray tasks
on Ray. The units come back to the driver, which writes every run folder and MLflow run, so the
files are the same whichever engine ran them."""
from __future__ import annotations

import contextlib
import functools
import io
import logging
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping

from lab import track
from lab.adapters.base import AdapterError
from lab.adapters.harness import SystemResult, evaluate_system, write_system_run
from lab.adapters.registry import open_system
from lab.config import DEFAULT_KS, SaveConfig, SearchConfig, to_dict
from lab.engine import Engine
from lab.engine.local import LocalEngine
from lab.errors import LabError
from lab.eval.dataset import EvalDataset
from lab.eval.dataset_ref import DatasetRef
from lab.eval.stores import index_suffix
from lab.store.settings import StoreSettings
from lab.track.connect import Tracking
from lab.workspace import Workspace


@dataclass(frozen=True)
class SystemUnit:
    """One system on one dataset: everything a worker needs, nothing it must find on the driver."""
    target: str  # a built-in name, an adapter file or module:Class
    data: DatasetRef  # portable: its root resolved on the driver
    scratch: Path  # the system's own folder
    preset: SearchConfig  # lab's configuration, when the system is lab
    save: SaveConfig
    query_model: str
    settings: Mapping[str, Any] | None
    ks: tuple[int, ...]
    env: Mapping[str, str]  # the environment adapter files read, taken at the edge
    progress: bool = False
    import_from: str | None = None  # a folder module:Class targets import from too (the caller's working folder)
    stores: StoreSettings | None = None  # lab's store opened with the workspace's settings (its embedding cache)


@dataclass(frozen=True)
class SystemOutcome:
    unit: SystemUnit
    result: SystemResult | None
    error: LabError | None  # an adapter's or lab's refusal: reported, the other systems go on
    log: str = ""  # what the system printed, warned and logged while it ran (its run folder's system.log)


def _lab(preset: SearchConfig, save: SaveConfig, query_model: str, stores: StoreSettings | None, folder: Path):
    from lab.adapters.lab_system import LabSystem  # heavy: the whole pipeline, for the one lab unit

    return LabSystem(folder, preset, save, query_model=query_model, stores=stores)


def run_unit(unit: SystemUnit) -> SystemOutcome:
    """Evaluate one system (in this process or on a worker); its refusals are returned, not raised."""
    if unit.import_from and unit.import_from not in sys.path:
        sys.path.insert(0, unit.import_from)  # `--system mymod:MySystem` finds mymod.py where it was typed
    dataset = unit.data.load()
    factory = functools.partial(_lab, unit.preset, unit.save, unit.query_model, unit.stores)
    log = io.StringIO()
    try:
        with _captured(log), open_system(unit.target, unit.scratch, lab_factory=factory,
                                         settings=dict(unit.settings or {}) or None, env=unit.env) as system:
            result = evaluate_system(system, dataset, ks=unit.ks, progress=unit.progress)
        return SystemOutcome(unit, result, None, _bounded(log.getvalue()))
    except (AdapterError, LabError) as exc:
        return SystemOutcome(unit, None, exc, _bounded(log.getvalue()))


LOG_LIMIT = 2_000_000  # characters of a system's own output kept (the end is what explains a failure)


def _bounded(text: str) -> str:
    return text if len(text) <= LOG_LIMIT else f"[{len(text) - LOG_LIMIT} characters cut]\n" + text[-LOG_LIMIT:]


@contextlib.contextmanager
def _captured(log: io.StringIO) -> Iterator[None]:
    """Third-party output into ``log``, not between lab's lines: prints (MemPalace files every drawer
    aloud), warnings (torch, pandas) and log records. lab's own progress goes to stderr, untouched."""
    handler = logging.StreamHandler(log)
    handler.setLevel(logging.INFO)  # a library's debug chatter (bm25s builds every index aloud) is not kept
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    saved_level = root.level
    root.addHandler(handler)
    root.setLevel(min(saved_level, logging.WARNING) if saved_level else logging.WARNING)

    def to_log(message, category, filename, lineno, file=None, line=None):
        log.write(warnings.formatwarning(message, category, filename, lineno, line))

    try:
        with contextlib.redirect_stdout(log), warnings.catch_warnings():
            warnings.showwarning = to_log
            yield
    finally:
        root.removeHandler(handler)
        root.setLevel(saved_level)


def run_units(units: list[SystemUnit], engine: Engine) -> Iterator[SystemOutcome]:
    """Each unit's outcome, in the units' order, as the engine finishes them."""
    yield from engine.map(run_unit, units)


@dataclass(frozen=True)
class Systems:
    """What `evaluate_systems` measures: the systems, lab's own settings when one is lab, the cutoffs."""
    targets: tuple[str, ...]
    preset: SearchConfig  # lab's configuration
    save: SaveConfig  # lab's index-time settings
    query_model: str = "auto"
    settings: Mapping[str, Any] | None = None  # a built-in system's knobs
    ks: tuple[int, ...] = DEFAULT_KS
    env: Mapping[str, str] = field(default_factory=dict)  # the environment adapter files read, taken at the edge
    import_from: str | None = None  # where module:Class targets import from (the caller's working folder)


@dataclass(frozen=True)
class SystemDone:
    """One system's outcome and, when it succeeded, its run folder and MLflow run (None: not tracked)."""
    outcome: SystemOutcome
    folder: Path | None = None
    run_id: str | None = None


def evaluate_systems(systems: Systems, data: DatasetRef, workspace: Workspace, *, out: str | Path = "runs",
                     tracked: bool = True, progress: bool = False,
                     engine: Engine | None = None) -> tuple[EvalDataset, Iterator[SystemDone]]:
    """The dataset ``data`` names (no root: the workspace's), and each system evaluated on it as a
    unit of work on ``engine`` (each in a scratch folder of the workspace's evaluation root), its
    run folder written under ``out`` (and logged to the workspace's tracking store, when
    ``tracked``) as it comes back; a system's refusal comes back as its outcome's error."""
    data = data.at(workspace.datasets_root, workspace.project)
    dataset, engine = data.load(), engine or LocalEngine()
    units = [SystemUnit(target, data.portable(), workspace.eval_root / "systems" / f"{dataset.name}-{_name(target)}",
                        systems.preset, systems.save, systems.query_model, systems.settings, systems.ks,
                        systems.env, progress=progress and engine.in_process, import_from=systems.import_from,
                        stores=StoreSettings.of(workspace))
             for target in systems.targets]
    return dataset, (_written(outcome, dataset, Path(out), workspace, tracked) for outcome in run_units(units, engine))


def _name(target: str) -> str:
    """A system's scratch folder name: an adapter file's stem, a module:Class with a dash."""
    return Path(target).stem if target.endswith((".yaml", ".yml")) else target.replace(":", "-")


def _written(outcome: SystemOutcome, dataset: EvalDataset, out: Path, workspace: Workspace,
             tracked: bool) -> SystemDone:
    """Write one system's run folder (and MLflow run) on the driver, whichever engine ran it."""
    if outcome.error is not None:
        return SystemDone(outcome)
    index = None
    if outcome.unit.target == "lab":  # lab's own index-time settings name its run, as a preset run's do
        chunk = outcome.unit.save.chunk
        index = (to_dict(chunk), index_suffix(chunk))
    folder = write_system_run(outcome.result, dataset, out, *(index or (None, "")), log=outcome.log)
    run_id = track.log_system(outcome.result, folder, dataset=dataset, uri=Tracking.of(workspace)) if tracked else None
    return SystemDone(outcome, folder, run_id)
