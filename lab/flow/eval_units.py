"""`lab eval --preset a b c` on Ray: the configurations that share candidate lists (the same
candidate-time settings, `lab.eval.candidate_cache.candidate_config`) form one unit of work, and each unit
runs as a Ray task over the evaluation store the driver built. A unit searches its lists once and
fuses and scores each of its configurations on them; the results come back to the driver, which
writes every run folder and MLflow run, so the files are the same whichever engine ran them.

Why units and not one task per configuration: configurations that share lists would each search
them again (a task's in-process table memo is its own), and searching is most of an evaluation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from lab.config import SaveConfig, SearchConfig
from lab.engine import Engine
from lab.eval.candidate_cache import candidate_config, open_candidates
from lab.eval.dataset_ref import DatasetRef
from lab.eval.runner import EvalOptions, EvalResult, evaluate


@dataclass(frozen=True)
class EvalUnit:
    """Configurations sharing candidate lists, and everything a worker needs to evaluate them."""
    data: DatasetRef  # portable: its root resolved on the driver
    save: SaveConfig
    configs: tuple[SearchConfig, ...]
    options: EvalOptions
    eval_root: Path  # the driver's evaluation root: the store is built there already
    embeddings: Path | None  # the driver's embedding cache (question vectors are in it)
    query_model: str | None


def group_configs(configs: tuple[SearchConfig, ...], depth: int) -> list[tuple[int, ...]]:
    """Positions of ``configs`` grouped by their candidate lists, groups in order of first use."""
    groups: dict[str, list[int]] = {}
    for i, config in enumerate(configs):
        key = json.dumps(candidate_config(config, depth), sort_keys=True, default=str)
        groups.setdefault(key, []).append(i)
    return [tuple(members) for members in groups.values()]


def run_eval_unit(unit: EvalUnit) -> list[EvalResult]:
    """Each configuration of ``unit`` evaluated over the existing store (on a worker, or here)."""
    dataset = unit.data.load()
    opened = open_candidates(dataset, unit.save, unit.configs, root=unit.eval_root, depth=max(unit.options.ks),
                             embeddings=unit.embeddings, query_model=unit.query_model)
    return [evaluate(opened.retriever, dataset, config, unit.options, cands=cands, root=unit.eval_root)
            for config, cands in zip(unit.configs, opened.tables)]


def run_eval_units(units: list[EvalUnit], engine: Engine) -> Iterator[EvalResult]:
    """Every configuration's result, unit by unit in the units' order, as the engine finishes them."""
    for results in engine.map(run_eval_unit, units):
        yield from results
