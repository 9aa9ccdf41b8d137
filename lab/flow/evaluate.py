"""`evaluate`: presets or a candidate file, with `lab eval`'s one-field overrides merged in, evaluated
on a dataset; each configuration's run folder written (and logged to MLflow when asked).

A candidate file (a sweep's best.yaml) brings the index-time and assembly settings it was chosen
with; an override changes one field of them and leaves the rest as the candidate set it.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from lab import track
from lab.config import ENCODERS, SaveConfig, SearchConfig
from lab.embed.registry import check_models
from lab.engine import Engine
from lab.errors import LabWarning
from lab.eval.dataset_ref import DatasetRef
from lab.eval.report import candidate_from, config_from
from lab.eval.runner import EvalOptions, EvalResult
from lab.eval.runner import evaluate as run_evaluation
from lab.eval.candidate_cache import candidate_table
from lab.eval.dataset import EvalDataset
from lab.eval.errata import Errata, apply_errata, score_errata
from lab.eval.regressions import run_regressions
from lab.eval.runs import write_run_folder
from lab.eval.stores import eval_retriever, save_config
from lab.flow.eval_units import EvalUnit, group_configs, run_eval_units
from lab.retriever import Retriever
from lab.track.connect import Tracking
from lab.workspace import Workspace


@dataclass(frozen=True)
class EvalCandidate:
    """What is evaluated: preset names, else a candidate file (a SearchConfig, optionally with
    save and assemble sections)."""
    presets: tuple[str, ...] = ()
    file: str | Path | None = None


@dataclass(frozen=True)
class Overrides:
    """One field each over the candidate's own settings (None, False or empty: the candidate's)."""
    context_turns: int | None = None  # index time
    time_in_text: bool = False  # index time
    model: str | None = None  # index time: the store's embedding model
    encoders: tuple[str, ...] = ()  # index time: extra encoders, each also ranked by every configuration
    counter: str | None = None  # assembly: the token counter
    budget: int | None = None  # assembly: the token budget (0: no context metrics)
    query_model: str | None = None  # encode the questions with this model instead


@dataclass(frozen=True)
class EvalPlan:
    """What an evaluation runs: the search configurations over one store, and the options."""
    configs: tuple[SearchConfig, ...]
    save: SaveConfig
    options: EvalOptions
    query_model: str | None = None  # the model encoding the questions (None: the store's)


@dataclass(frozen=True)
class Evaluated:
    """One configuration evaluated: its result, its run folder and its MLflow run (None: not tracked)."""
    dataset: str
    config: SearchConfig
    result: EvalResult
    folder: Path
    run_id: str | None


def plan(candidate: EvalCandidate, overrides: Overrides, options: EvalOptions) -> EvalPlan:
    """The configurations, the store's save settings and the options, overrides merged in; every
    input checked before any dataset is loaded and indexed (the long part)."""
    save = save_config(overrides.context_turns, overrides.time_in_text)
    query_model = overrides.query_model
    if candidate.presets:
        configs = [config_from(p, None) for p in candidate.presets]
    else:
        chosen = candidate_from(None, candidate.file)
        configs = [chosen.search]
        if chosen.save is not None:
            chunk = chosen.save.chunk
            if overrides.context_turns is not None:
                chunk = replace(chunk, context_turns=overrides.context_turns)
            if overrides.time_in_text:
                chunk = replace(chunk, time_in_text=True)
            save = replace(chosen.save, chunk=chunk)
        if chosen.assemble is not None:
            counter = overrides.counter or chosen.assemble.counter
            budget = chosen.assemble.budget if overrides.budget is None else overrides.budget
            options = replace(options, assemble=replace(chosen.assemble, counter=counter), budget=budget or None)
        query_model = query_model or chosen.query_model  # the candidate's own (a query adapter), unless overridden
    if overrides.model:
        save = replace(save, embed=replace(save.embed, model=overrides.model))
    if overrides.encoders:  # carried by the store, ranked by every configuration evaluated
        save = replace(save, index=replace(save.index, models=tuple(overrides.encoders)))
        lists = tuple(ENCODERS[m] for m in overrides.encoders)
        configs = [replace(c, encoders=tuple(dict.fromkeys((*c.encoders, *lists)))) for c in configs]
    check_models(save.embed, query_model)
    return EvalPlan(tuple(configs), save, options, query_model)


def evaluate(candidate: EvalCandidate, overrides: Overrides, data: DatasetRef, options: EvalOptions,
             workspace: Workspace, *, out: str | Path = "runs", tracked: bool = True, progress: bool = False,
             embedder: Any = None, engine: Engine | None = None, errata: Errata | None = None) -> Iterator[Evaluated]:
    """Evaluate each configuration of ``candidate`` (``overrides`` merged in) on ``data``, yielding
    each as its run folder is written (and its MLflow run logged in the workspace's tracking store,
    when ``tracked``). Its stores and vectors are the workspace's evaluation root and embedding
    cache; ``embedder``: an embedder already loaded (the demo's), else the store's own; ``engine``:
    where a store built for it embeds its texts (None: in this process); ``errata``: an overlay
    whose corrected labels are scored beside the official ones (lab.eval.errata)."""
    chosen = plan(candidate, overrides, options)
    data = data.at(workspace.datasets_root, workspace.project)  # named no root: the workspace's
    dataset = data.load()
    # an overlay that does not fit the data is refused before the store is built (the long part)
    corrected = apply_errata(dataset, errata) if errata is not None else None
    retriever = eval_retriever(dataset, chosen.save, root=workspace.eval_root, embedder=embedder, progress=progress,
                               query_model=chosen.query_model, embeddings=workspace.eval_embeddings,
                               engine=engine)
    for result in _results(chosen, data, dataset, retriever, workspace, chosen.query_model, engine):
        if corrected is not None:
            result = score_errata(result, retriever, *corrected, errata, root=workspace.eval_root)
        engine_log = engine.log.text() if getattr(engine, "log", None) is not None else ""
        folder = write_run_folder(result, retriever, dataset, out, data.options, engine_log)
        run_id = None
        if tracked:
            run_id = track.log_eval(result, folder, dataset=dataset, store_version=str(retriever.version),
                                    uri=Tracking.of(workspace))
        yield Evaluated(dataset.name, result.config, result, folder, run_id)


def _results(chosen: EvalPlan, data: DatasetRef, dataset: EvalDataset, retriever: Retriever, workspace: Workspace,
             query_model: str | None, engine: Engine | None) -> Iterator[EvalResult]:
    """Each configuration's result in the plan's order: here, one after another; on a Ray engine,
    configurations sharing candidate lists as one task each (lab.flow.eval_units)."""
    groups = group_configs(chosen.configs, max(chosen.options.ks))
    if engine is None or engine.in_process or len(groups) < 2:
        for config in chosen.configs:
            cands, _ = candidate_table(retriever, dataset, config, depth=max(chosen.options.ks),
                                       root=workspace.eval_root)
            yield run_evaluation(retriever, dataset, config, chosen.options, cands=cands, root=workspace.eval_root)
        return
    # the questions embedded once here, into the cache every task reads, not once per task
    retriever.embed_queries(dataset.questions["question"].to_list())
    if retriever.cache is not None:
        retriever.cache.flush()
    units = [EvalUnit(data.portable(), chosen.save, tuple(chosen.configs[i] for i in members), chosen.options,
                      workspace.eval_root.resolve(), workspace.eval_embeddings.resolve(), query_model)
             for members in groups]
    order = [i for members in groups for i in members]
    done: dict[int, EvalResult] = {}
    wanted = 0
    for position, result in zip(order, run_eval_units(units, engine)):
        # said on the worker, where no one reads it: said again here, as a local evaluation says it
        for line in result.metrics.get("warnings", []) + result.metrics.get("small_n", []):
            warnings.warn(LabWarning(f"{dataset.name} / {result.config.name}: {line}"), stacklevel=2)
        done[position] = result
        while wanted in done:  # the plan's order, as soon as each is ready
            yield done.pop(wanted)
            wanted += 1


def check_regressions(path: str | Path, base: EvalOptions, workspace: Workspace, *, out: str | Path, tracked: bool,
                      progress: bool) -> Iterator[tuple[Any, str | None]]:
    """`lab eval --check`: each condition of a regressions file evaluated in ``workspace`` (its run
    folder written), and with ``tracked`` logged to MLflow tagged with its name and status; yields
    (the condition's ``Outcome``, its MLflow run id or None) as each is judged."""
    for outcome in run_regressions(path, base=base, datasets=workspace.datasets_root, out_root=out, progress=progress,
                                   root=workspace.eval_root, embeddings=workspace.embed_cache, project=workspace.project):
        run_id = None
        if tracked:
            run_id = track.log_eval(outcome.result, outcome.run, dataset=outcome.dataset,
                                    store_version=outcome.store_version, uri=Tracking.of(workspace),
                                    extra_tags={"regression": outcome.name, "regression_status": outcome.status})
        yield outcome, run_id
