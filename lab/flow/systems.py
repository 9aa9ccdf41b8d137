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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from lab.adapters.base import AdapterError
from lab.adapters.harness import SystemResult, evaluate_system
from lab.adapters.registry import open_system
from lab.config import SaveConfig, SearchConfig
from lab.engine import Engine
from lab.errors import LabError
from lab.eval.goldens import load_dataset


@dataclass(frozen=True)
class SystemUnit:
    """One system on one dataset: everything a worker needs, nothing it must find on the driver."""
    target: str  # a built-in name, an adapter file or module:Class
    dataset: str
    datasets_root: str | None
    split: str
    observations: bool
    summaries: bool
    scratch: Path  # the system's own folder
    preset: SearchConfig  # lab's configuration, when the system is lab
    save: SaveConfig
    query_model: str
    settings: Mapping[str, Any] | None
    ks: tuple[int, ...]
    env: Mapping[str, str]  # the environment adapter files read, taken at the edge
    progress: bool = False
    import_from: str | None = None  # a folder module:Class targets import from too (the caller's working folder)


@dataclass(frozen=True)
class SystemOutcome:
    unit: SystemUnit
    result: SystemResult | None
    error: LabError | None  # an adapter's or lab's refusal: reported, the other systems go on
    log: str = ""  # what the system printed, warned and logged while it ran (its run folder's system.log)


def _lab(preset: SearchConfig, save: SaveConfig, query_model: str, folder: Path):
    from lab.adapters.lab_system import LabSystem  # heavy: the whole pipeline, for the one lab unit

    return LabSystem(folder, preset, save, query_model=query_model)


def run_unit(unit: SystemUnit) -> SystemOutcome:
    """Evaluate one system (in this process or on a worker); its refusals are returned, not raised."""
    if unit.import_from and unit.import_from not in sys.path:
        sys.path.insert(0, unit.import_from)  # `--system mymod:MySystem` finds mymod.py where it was typed
    dataset = load_dataset(unit.dataset, unit.datasets_root, split=unit.split, observations=unit.observations,
                           summaries=unit.summaries)
    factory = functools.partial(_lab, unit.preset, unit.save, unit.query_model)
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
