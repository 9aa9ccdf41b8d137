"""The DVC pipeline's stages (dvc.yaml): prepare -> index -> candidates -> sweep -> gate -> export.

Each reads only what the stage before it wrote (under the `Layout`'s folder, ``.lab/dvc``) and
writes only its own outputs, so `dvc repro` reruns exactly the stages whose code, data or
parameters changed, and a second `dvc repro` does nothing. Question and memory vectors go to one
embedding cache outside every stage's outputs (`Layout.embedding_cache`), so nothing is embedded
twice. Each stage runs in the workspace its options carry, and returns what it made as a small
typed value (`lab.flow.results`); the shell words it. `gate_candidate` and `export_champion` are
the gate and export steps `lab demo` shares with these stages.
"""
from __future__ import annotations

import json
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import polars as pl

from lab.config import DEFAULT_KS, AssembleConfig, read_yaml
from lab.errors import ValidationError
from lab.eval.candidate_cache import open_candidates, prepared_for
from lab.eval.goldens import load_dataset
from lab.eval.report import candidate_from
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_store, eval_store_path, is_built
from lab.eval.tables import read_tables, write_tables
from lab.flow import STAGES
from lab.flow.layout import Layout, StageOptions, fresh, svg, write_json, write_metrics
from lab.flow.params import StageParams
from lab.flow.results import CandidatesMade, ExportedModel, Gated, Indexed, Prepared, StageResult, Swept
from lab.gate.checks import GateConfig, load_gate
from lab.gate.run import GateReport, JudgeOptions, export_gated, load_report, run_gate
from lab.track.connect import Tracking
from lab.tune.spec import parse_spec
from lab.tune.sweep import SweepResult, run_sweep
from lab.workspace import Workspace

if TYPE_CHECKING:
    from lab.track.connect import Where


def _portable(value: Any, workspace: Workspace) -> Any:
    """A path under the project as a relative one, under the datasets root as $LAB_DATASETS/...;
    anything else unchanged."""
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    path = Path(value)
    for root, prefix in ((workspace.project, ""), (workspace.datasets_root, "$LAB_DATASETS/")):
        try:
            return prefix + str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            continue
    return value


def index_store(params: StageParams, layout: Layout) -> Path:
    """The index stage's store: named by the prepared data and the index-time parameters, so a
    later stage finds it from the layout and the parameters alone."""
    return eval_store_path(read_tables(layout.prepared), params.save_config(), root=layout.eval_root)


def stage_prepare(params: StageParams, layout: Layout, opts: StageOptions) -> Prepared:
    dataset = load_dataset(params.dataset, opts.workspace.datasets_root, project=opts.workspace.project)
    # the load report names its files relative to the project (or $LAB_DATASETS): the prepared
    # folder, and so dvc.lock's record of it, is the same in every checkout
    dataset = replace(dataset, report={k: _portable(v, opts.workspace) for k, v in dataset.report.items()})
    write_tables(dataset, fresh(layout.prepared))
    s = dataset.summary()
    return Prepared(dataset.name, s["memories"], s["questions"], layout.prepared)


def stage_index(params: StageParams, layout: Layout, opts: StageOptions) -> Indexed:
    dataset = read_tables(layout.prepared)
    started = time.perf_counter()
    path = eval_store(dataset, params.save_config(), root=layout.eval_root, progress=opts.progress,
                      embeddings=layout.embedding_cache(opts.workspace))
    seconds = round(time.perf_counter() - started, 2)
    write_metrics(layout, "index", {"dataset": dataset.name, "memories": len(dataset.memories),
                                    "store": path.name, "build_seconds": seconds, "index": params.index},
                  ("memories",))  # build_seconds only in the details: a timing is not a tracked result
    return Indexed(path)


def stage_candidates(params: StageParams, layout: Layout, opts: StageOptions) -> CandidatesMade:
    dataset = read_tables(layout.prepared)
    search = candidate_from(params.preset, None).search
    opened = open_candidates(dataset, params.save_config(), [search], root=layout.eval_root, depth=max(DEFAULT_KS),
                             embeddings=layout.embedding_cache(opts.workspace), progress=opts.progress)
    retriever, cands = opened.retriever, opened.tables[0]
    prepared_for(cands)  # its encodings are written beside the table now, not by a later stage
    m = evaluate(retriever, dataset, search, EvalOptions(budget=AssembleConfig().budget), cands=cands).metrics
    write_metrics(layout, "baseline", {"dataset": dataset.name, "preset": search.name, **m["metrics"],
                                       **{f"context_{k.removeprefix('context_')}": v
                                          for k, v in (m.get("context") or {}).items()}},
                  ("recall@5", "recall@10", "ndcg@10", "mrr", "context_recall", "context_tokens"))
    _baseline_plots(layout, f"{search.name} on {dataset.name}", search.name, m)
    return CandidatesMade(cands.height, search.name, m["metrics"]["recall@10"])


def _baseline_plots(layout: Layout, what: str, preset: str, m: dict[str, Any]) -> None:
    """The baseline's recall curve and its recall@10 by question category, as CSV data and SVG."""
    layout.plots.mkdir(parents=True, exist_ok=True)
    ks = list(DEFAULT_KS)
    pl.DataFrame({"k": ks, "recall": [m["metrics"][f"recall@{k}"] for k in ks]}).write_csv(
        layout.plots / "recall_curve.csv")
    pl.DataFrame(m["by_category"]).select("category", "recall@10", "ndcg@10").write_csv(
        layout.plots / "by_category.csv")
    by_cat = sorted(m["by_category"], key=lambda r: r["recall@10"])
    svg(layout.plots / "recall_curve.svg", f"recall@k of {what}",
        lambda ax: (ax.plot(ks, [m["metrics"][f"recall@{k}"] for k in ks], marker="o"),
                    ax.set_xlabel("k"), ax.set_ylabel("recall@k"), ax.set_ylim(0, 1), ax.grid(alpha=0.3)))
    svg(layout.plots / "by_category.svg", f"recall@10 of {preset} by question category",
        lambda ax: (ax.barh([r["category"] for r in by_cat], [r["recall@10"] for r in by_cat]),
                    ax.set_xlabel("recall@10"), ax.set_xlim(0, 1), ax.grid(axis="x", alpha=0.3)))


def stage_sweep(params: StageParams, layout: Layout, opts: StageOptions) -> Swept:
    source = read_yaml(Path(params.sweep), "sweep file")
    # the prepared dataset and the index-time parameters, pinned (one store: the index stage's)
    chunk = params.save_config().chunk
    index_dims = {"index.context_turns": [int(chunk.context_turns)], "index.time_in_text": [bool(chunk.time_in_text)]}
    spec = parse_spec({**source, "dataset": str(layout.prepared), "base": params.preset,
                       "space": {**index_dims, **{k: v for k, v in source["space"].items() if not k.startswith("index.")}}},
                      where=params.sweep)
    out = fresh(layout.sweep)
    result = run_sweep(spec, datasets=opts.workspace.datasets_root, project=opts.workspace.project, out_root=out,
                       progress=opts.progress,
                       root=layout.eval_root, track=opts.track,
                       tracking_uri=Tracking.of(opts.workspace), embeddings=layout.embedding_cache(opts.workspace))
    shutil.copy(result.folder / "best.yaml", layout.best)
    summary = json.loads((result.folder / "summary.json").read_text(encoding="utf-8"))
    write_metrics(layout, "sweep", {k: summary[k] for k in ("sweep", "objective", "tune", "validation",
                                                            "gap", "configs", "seconds") if k in summary},
                  ("tune", "validation", "gap", "configs"))
    _sweep_plots(layout, result)
    return Swept.of(result, layout.best)


def _sweep_plots(layout: Layout, result: SweepResult) -> None:
    """Each configuration's objective on tune and validation by RRF k, as CSV data and SVG."""
    spec = result.spec
    obj = spec.objective if f"tune/{spec.objective}" in result.table.columns else "recall@10"
    cols = [c for c in ("trial", "fusion.k", f"tune/{obj}", f"validation/{obj}") if c in result.table.columns]
    layout.plots.mkdir(parents=True, exist_ok=True)
    points = result.table.filter(pl.col("error").is_null())
    points.select(cols).rename({f"tune/{obj}": "tune", f"validation/{obj}": "validation"}).write_csv(
        layout.plots / "sweep.csv")
    if "fusion.k" in points.columns:
        svg(layout.plots / "sweep.svg", f"the sweep's {obj} by RRF k (each dot a configuration)",
            lambda ax: (ax.scatter(points["fusion.k"], points[f"tune/{obj}"], s=14, label="tune", alpha=0.7),
                        ax.scatter(points["fusion.k"], points[f"validation/{obj}"], s=14, label="validation",
                                   alpha=0.7, marker="x"),
                        ax.set_xlabel("RRF k"), ax.set_ylabel(obj), ax.legend(), ax.grid(alpha=0.3)))


def judging_in(workspace: Workspace, *, root: Path | None = None, embeddings: Path | None = None,
               progress: bool = False, embedder: Any = None) -> JudgeOptions:
    """How the gate evaluates in ``workspace``: on its datasets root, its stores under ``root`` and
    its vectors in ``embeddings`` (each defaulting to the workspace's evaluation root and cache)."""
    return JudgeOptions(datasets=workspace.datasets_root, project=workspace.project, root=root or workspace.eval_root,
                        embedder=embedder,
                        progress=progress, embeddings=embeddings or workspace.eval_embeddings)


def gate_candidate(gate_file: str | Path, candidate: str | Path, judging: JudgeOptions, *, out_root: str | Path,
                   uri: Where = None, track: bool = True, export: bool = False,
                   model: str | None = None) -> GateReport:
    """Judge ``candidate`` (a preset name or a candidate file) against the gate file; on ``export``
    and GO, export it as the champion (of ``model`` when given, else of the gate file's model).
    The one way every face runs the gate."""
    gate = load_gate(gate_file)
    if model and model != gate.model:
        gate = replace(gate, model=model)
    return run_gate(gate, str(candidate), judging=judging, out_root=out_root, track=track, uri=uri, export=export)


def export_champion(report: GateReport, candidate: Path, gate: GateConfig, store: Path, bundle: Path,
                    uri: Where = None) -> ExportedModel:
    """Export a GO report's candidate: its bundle into ``bundle`` (with a copy of ``store``, the
    store it is served over) and its model registered as ``gate.model``'s champion; refused,
    naming each failed check, on NO-GO."""
    got = export_gated(report, str(candidate), gate, store, bundle=bundle, uri=uri)
    return ExportedModel(gate.model, got, bundle)


def stage_gate(params: StageParams, layout: Layout, opts: StageOptions) -> Gated:
    out = fresh(layout.gate)
    judging = judging_in(opts.workspace, root=layout.gate_root, embeddings=layout.embedding_cache(opts.workspace),
                         progress=opts.progress)
    report = gate_candidate(params.gate, layout.best, judging, out_root=out, uri=Tracking.of(opts.workspace),
                            track=opts.track, model=params.registered_model)
    shutil.copy(report.folder / "gate.json", out / "gate.json")
    write_json(layout.metrics / "gate.json", {"verdict": report.verdict, "go": int(report.verdict == "GO"),
                                              "checks_failed": sum(not c.passed for c in report.checks),
                                              **{f"{s}.{k}": v for s, d in report.suites.items()
                                                 for k, v in d.metrics.items()}})
    return Gated(report)


def stage_export(params: StageParams, layout: Layout, opts: StageOptions) -> ExportedModel:
    reports = sorted(layout.gate.glob("*/gate.json"))
    if not reports:
        raise ValidationError(f"no gate report under {layout.gate}: run `lab stage gate` first")
    store = index_store(params, layout)
    if not is_built(store):
        raise ValidationError(f"the index stage's store {store} is not built: run `lab stage index` first")
    gate = replace(load_gate(params.gate), model=params.registered_model)
    done = export_champion(load_report(reports[0].parent), layout.best, gate, store, fresh(layout.bundle),
                           Tracking.of(opts.workspace))
    write_json(layout.out / "export.json", done.export.as_dict() | {"bundle": str(done.bundle)})
    return done


RUN: dict[str, Callable[[StageParams, Layout, StageOptions], StageResult]] = {
    "prepare": stage_prepare, "index": stage_index, "candidates": stage_candidates, "sweep": stage_sweep,
    "gate": stage_gate, "export": stage_export,
}


def run_stage(name: str, params: StageParams, opts: StageOptions, layout: Layout = Layout()) -> StageResult:
    """Run one stage in ``opts.workspace``; returns what it made."""
    if name not in RUN:
        raise ValidationError(f"unknown stage {name!r}; known: {list(STAGES)}")
    return RUN[name](params, layout, opts)
