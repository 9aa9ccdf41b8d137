"""A sweep's index-time points on Ray: each evaluation store the points need is built, and searched
for their candidate tables, by one Ray task; the driver then reads the stores and tables from the
shared evaluation root as if it had built them itself (its cache keys are the same), and scores
every query-time configuration on its vectorised batch scorer.

Why tasks asked for by the sweep's own ask/tell loop rather than Ray Tune trials: the costly unit
is an index-time point (embed, index, search every question: minutes), while a query-time point
costs well under a millisecond in a batch; a Tune trial per configuration would spend far more on
scheduling than on scoring, and Tune's searchers would replace the strategies (grid, random, TPE
with their seeds) whose choices the sweep records. So the strategy still asks for points, and what
those points need built goes out as tasks, one per store (points differing only in search depth
share a store: one task builds it once, then searches each depth).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from lab.config import DEFAULT_KS, EmbedConfig, SaveConfig, SearchConfig, to_dict
from lab.engine import Engine
from lab.eval.dataset_ref import DatasetRef


@dataclass(frozen=True)
class IndexPointUnit:
    """One evaluation store of a sweep and the candidate tables to search on it."""
    data: DatasetRef  # portable: its root resolved on the driver
    save: SaveConfig
    configs: tuple[SearchConfig, ...]  # one per index-time group on this store (search depth)
    root: Path  # the driver's evaluation root
    embeddings: Path  # the driver's embedding cache
    model: str | None  # the driver's embedder, rebuilt by id on the worker (None: the store's own)


def build_index_point(unit: IndexPointUnit) -> str:
    """Build ``unit``'s store and candidate tables into the shared root (on a worker); returns the
    store's folder name."""
    from lab.embed.registry import make_embedder  # heavy: the model backends
    from lab.eval.candidate_cache import open_candidates  # heavy: numba

    embedder = make_embedder(EmbedConfig(model=unit.model)) if unit.model else None
    opened = open_candidates(unit.data.load(), unit.save, unit.configs, root=unit.root, depth=max(DEFAULT_KS),
                             embeddings=unit.embeddings, embedder=embedder)
    return Path(opened.retriever.store.root).name


def index_point_units(points: Iterable[dict[str, Any]], base: SearchConfig, make_save, make_search, *,
                      data: DatasetRef, root: Path, embeddings: Path,
                      model: str | None, skip: set[str]) -> list[IndexPointUnit]:
    """The units ``points`` need, one per distinct save configuration, leaving out the index-time
    keys in ``skip`` (groups the driver has already); ``make_save``/``make_search`` map a point to
    its configurations (lab.tune.params)."""
    stores: dict[str, tuple[SaveConfig, dict[str, SearchConfig]]] = {}
    for point in points:
        save, config = make_save(point), make_search(base, point)
        if group_key(save, config) in skip:
            continue
        entry = stores.setdefault(json.dumps(to_dict(save), sort_keys=True), (save, {}))
        entry[1].setdefault(group_key(save, config), config)  # the first point's, as the driver's group
    return [IndexPointUnit(data, save, tuple(configs.values()), root, embeddings, model)
            for save, configs in stores.values()]


def group_key(save: SaveConfig, config: SearchConfig) -> str:
    """An index-time point's identity: its save settings and its search depth."""
    return json.dumps([to_dict(save), config.depth], sort_keys=True)


def build_index_points(units: list[IndexPointUnit], engine: Engine) -> list[str]:
    """Every unit built on ``engine`` (all at once on Ray: as many as it has workers)."""
    return list(engine.map(build_index_point, units))
