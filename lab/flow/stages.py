"""The DVC pipeline's stages (dvc.yaml): prepare -> index -> candidates -> sweep -> gate -> export.

Each reads only what the stage before it wrote (under the `Layout`'s folder, ``.lab/dvc``) and
writes only its own outputs, so `dvc repro` reruns exactly the stages whose code, data or
parameters changed, and a second `dvc repro` does nothing. Question and memory vectors go to a
shared embedding cache outside every stage's outputs (the workspace's), so nothing is embedded
twice. Each stage returns what it made as a small typed value (`StageResult`); the shell words it.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.config import DEFAULT_KS, SaveConfig, read_yaml
from lab.errors import ValidationError
from lab.eval.cache import candidate_table, prepared_for
from lab.eval.goldens import load_dataset
from lab.eval.report import candidate_from
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_retriever
from lab.eval.stores import eval_store
from lab.eval.stores import save_config
from lab.eval.tables import read_tables
from lab.eval.tables import write_tables
from lab.flow import STAGES
from lab.gate.checks import load_gate
from lab.gate.run import Exported, GateReport, export_gated, load_report, run_gate
from lab.tune.spec import parse_spec
from lab.tune.sweep import run_sweep
from lab.workspace import current, use

PARAM_KEYS = {"dataset", "preset", "index", "profiles", "model"}


@dataclass(frozen=True)
class Prepared:
    dataset: str
    memories: int
    questions: int
    folder: Path


@dataclass(frozen=True)
class Indexed:
    store: Path


@dataclass(frozen=True)
class CandidatesMade:
    rows: int
    preset: str
    recall_at_10: float


@dataclass(frozen=True)
class Swept:
    objective: str
    tune: float
    validation: float
    best: Path  # the candidate file


@dataclass(frozen=True)
class Gated:
    report: GateReport


@dataclass(frozen=True)
class ExportedModel:
    model: str
    export: Exported
    bundle: Path


StageResult = Prepared | Indexed | CandidatesMade | Swept | Gated | ExportedModel


@dataclass(frozen=True)
class Layout:
    """Where the stages read and write (dvc.yaml names the same paths)."""
    out: Path = Path(".lab/dvc")

    @property
    def prepared(self) -> Path:
        return self.out / "prepared"

    @property
    def eval_root(self) -> Path:  # the index stage's stores and the candidates stage's tables
        return self.out / "eval"

    @property
    def gate_root(self) -> Path:  # the gate's own stores: its suites may name other datasets
        return self.out / "gate-eval"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics"

    @property
    def plots(self) -> Path:
        return self.out / "plots"

    @property
    def embeddings(self) -> Path:
        return self.out / "embeddings"


@dataclass(frozen=True)
class StageOptions:
    datasets: str | Path | None = None  # the datasets root (None: the workspace's)
    track: bool = True  # log sweep and gate runs to MLflow (export needs them)
    progress: bool = True


@dataclass(frozen=True)
class StageParams:
    """params.yaml, checked: the dataset, the baseline preset, the index-time levers, the model
    family, and the dataset's profile (its sweep and gate files)."""
    dataset: str
    preset: str
    index: Mapping[str, Any]  # context_turns, time_in_text, views (each optional)
    model: str
    sweep: str  # the profile's sweep file
    gate: str  # the profile's gate file


def load_params(path: str | Path) -> StageParams:
    """params.yaml, checked: every problem names its key."""
    p = Path(path)
    data = read_yaml(p, "params file")
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: expected a mapping")
    unknown = sorted(set(data) - PARAM_KEYS)
    if unknown:
        raise ValidationError(f"{p}: unknown key(s) {unknown}; allowed: {sorted(PARAM_KEYS)}")
    for key in ("dataset", "preset", "profiles", "model"):
        if key not in data:
            raise ValidationError(f"{p}: '{key}' is required")
    profiles = data["profiles"]
    if not isinstance(profiles, dict) or data["dataset"] not in profiles:
        raise ValidationError(f"{p}: profiles has no entry for dataset {data['dataset']!r}; "
                              f"known: {sorted(profiles) if isinstance(profiles, dict) else []}")
    profile = profiles[data["dataset"]]
    for key in ("sweep", "gate"):
        if not isinstance(profile, dict) or not profile.get(key):
            raise ValidationError(f"{p}: profiles.{data['dataset']}.{key} is required (a file path)")
    index = data.get("index") or {}
    if not isinstance(index, dict) or set(index) - {"context_turns", "time_in_text", "views"}:
        raise ValidationError(f"{p}: index takes context_turns, time_in_text and views only, got {index!r}")
    return StageParams(data["dataset"], data["preset"], index, data["model"], profile["sweep"], profile["gate"])


def _save(params: StageParams) -> SaveConfig:
    index = params.index
    return save_config(index.get("context_turns"), bool(index.get("time_in_text", False)), index.get("views"))


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def _fresh(folder: Path) -> Path:
    """An output folder emptied first: a stage's outputs are exactly what this run wrote."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def _prepared(layout: Layout):
    return read_tables(layout.prepared)


def _portable(value: Any, datasets: str | Path | None) -> Any:
    """A path under the project as a relative one, under the datasets root as $LAB_DATASETS/...;
    anything else unchanged."""
    if not isinstance(value, str) or not value.startswith("/"):
        return value
    path = Path(value)
    roots = ((current().project, ""), (Path(datasets) if datasets else current().datasets_root, "$LAB_DATASETS/"))
    for root, prefix in roots:
        try:
            return prefix + str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            continue
    return value


def stage_prepare(params: StageParams, layout: Layout, opts: StageOptions) -> Prepared:
    dataset = load_dataset(params.dataset, opts.datasets)
    # the load report names its files relative to the project (or $LAB_DATASETS): the prepared
    # folder, and so dvc.lock's record of it, is the same in every checkout
    dataset = replace(dataset, report={k: _portable(v, opts.datasets) for k, v in dataset.report.items()})
    write_tables(dataset, _fresh(layout.prepared))
    s = dataset.summary()
    return Prepared(dataset.name, s["memories"], s["questions"], layout.prepared)


def stage_index(params: StageParams, layout: Layout, opts: StageOptions) -> Indexed:
    import time


    dataset = _prepared(layout)
    started = time.perf_counter()
    path = eval_store(dataset, _save(params), root=layout.eval_root, progress=opts.progress)
    seconds = round(time.perf_counter() - started, 2)
    _write_metrics(layout, "index", {"dataset": dataset.name, "memories": len(dataset.memories),
                                     "store": path.name, "build_seconds": seconds, "index": params.index},
                   ("memories", "build_seconds"))
    return Indexed(path)


def stage_candidates(params: StageParams, layout: Layout, opts: StageOptions) -> CandidatesMade:
    import polars as pl


    dataset = _prepared(layout)
    search = candidate_from(params.preset, None).search
    retriever = eval_retriever(dataset, _save(params), root=layout.eval_root, progress=opts.progress)
    cands, _ = candidate_table(retriever, dataset, search, depth=max(DEFAULT_KS), root=layout.eval_root)
    prepared_for(cands)  # its encodings are written beside the table now, not by a later stage
    result = evaluate(retriever, dataset, search, EvalOptions(budget=2000), cands=cands)
    m = result.metrics
    _write_metrics(layout, "baseline", {"dataset": dataset.name, "preset": search.name, **m["metrics"],
                                        **{f"context_{k.removeprefix('context_')}": v
                                           for k, v in (m.get("context") or {}).items()}},
                   ("recall@5", "recall@10", "ndcg@10", "mrr", "context_recall", "context_tokens"))
    layout.plots.mkdir(parents=True, exist_ok=True)
    ks = list(DEFAULT_KS)
    pl.DataFrame({"k": ks, "recall": [m["metrics"][f"recall@{k}"] for k in ks]}).write_csv(
        layout.plots / "recall_curve.csv")
    pl.DataFrame(m["by_category"]).select("category", "recall@10", "ndcg@10").write_csv(
        layout.plots / "by_category.csv")
    by_cat = sorted(m["by_category"], key=lambda r: r["recall@10"])
    _svg(layout.plots / "recall_curve.svg", f"recall@k of {search.name} on {dataset.name}",
         lambda ax: (ax.plot(ks, [m["metrics"][f"recall@{k}"] for k in ks], marker="o"),
                     ax.set_xlabel("k"), ax.set_ylabel("recall@k"), ax.set_ylim(0, 1), ax.grid(alpha=0.3)))
    _svg(layout.plots / "by_category.svg", f"recall@10 of {search.name} by question category",
         lambda ax: (ax.barh([r["category"] for r in by_cat], [r["recall@10"] for r in by_cat]),
                     ax.set_xlabel("recall@10"), ax.set_xlim(0, 1), ax.grid(axis="x", alpha=0.3)))
    return CandidatesMade(cands.height, search.name, m["metrics"]["recall@10"])


def _write_metrics(layout: Layout, name: str, details: dict[str, Any], headline: tuple[str, ...]) -> None:
    """A stage's few headline numbers in ``metrics/NAME.json`` (what `dvc metrics show` tabulates:
    one short row per stage, not every key of every stage) and everything in ``metrics/details/``."""
    _write_json(layout.metrics / "details" / f"{name}.json", details)
    _write_json(layout.metrics / f"{name}.json", {k: details[k] for k in headline if k in details})


def _svg(path: Path, title: str, draw: Callable[[Any], Any]) -> None:
    """One plot as an SVG file: `dvc plots show` embeds it as an image, so its page needs no
    script from a CDN (a vega plot's does) and reads offline."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    draw(ax)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})  # no timestamp: the same data, the same file
    plt.close(fig)


def stage_sweep(params: StageParams, layout: Layout, opts: StageOptions) -> Swept:
    import polars as pl


    source = read_yaml(Path(params.sweep), "sweep file")
    # the prepared dataset and the index-time parameters, pinned (one store: the index stage's)
    chunk = _save(params).chunk
    index_dims = {"index.context_turns": [int(chunk.context_turns)], "index.time_in_text": [bool(chunk.time_in_text)]}
    spec = parse_spec({**source, "dataset": str(layout.prepared), "base": params.preset,
                       "space": {**index_dims, **{k: v for k, v in source["space"].items() if not k.startswith("index.")}}},
                      where=params.sweep)
    out = _fresh(layout.out / "sweep")
    result = run_sweep(spec, out_root=out, progress=opts.progress, root=layout.eval_root, track=opts.track)
    shutil.copy(result.folder / "best.yaml", out / "best.yaml")
    summary = json.loads((result.folder / "summary.json").read_text(encoding="utf-8"))
    _write_metrics(layout, "sweep", {k: summary[k] for k in ("sweep", "objective", "tune", "validation",
                                                             "gap", "configs", "seconds") if k in summary},
                   ("tune", "validation", "gap", "configs"))
    obj = spec.objective if f"tune/{spec.objective}" in result.table.columns else "recall@10"
    cols = [c for c in ("trial", "fusion.k", f"tune/{obj}", f"validation/{obj}") if c in result.table.columns]
    layout.plots.mkdir(parents=True, exist_ok=True)
    (result.table.filter(pl.col("error").is_null()).select(cols)
     .rename({f"tune/{obj}": "tune", f"validation/{obj}": "validation"}).write_csv(layout.plots / "sweep.csv"))
    points = result.table.filter(pl.col("error").is_null())
    if "fusion.k" in points.columns:
        _svg(layout.plots / "sweep.svg", f"the sweep's {obj} by RRF k (each dot a configuration)",
             lambda ax: (ax.scatter(points["fusion.k"], points[f"tune/{obj}"], s=14, label="tune", alpha=0.7),
                         ax.scatter(points["fusion.k"], points[f"validation/{obj}"], s=14, label="validation",
                                    alpha=0.7, marker="x"),
                         ax.set_xlabel("RRF k"), ax.set_ylabel(obj), ax.legend(), ax.grid(alpha=0.3)))
    return Swept(obj, summary["tune"], summary["validation"], out / "best.yaml")


def gate_candidate(gate_file: str | Path, candidate: str | Path, *, out_root: str | Path, track: bool = True,
                   export: bool = False, datasets: str | Path | None = None, root: Path | None = None,
                   uri: str | None = None, progress: bool = False, embedder=None,
                   model: str | None = None) -> GateReport:
    """Judge ``candidate`` (a preset name or a candidate file) against the gate file; on ``export``
    and GO, export it as the champion (of ``model`` when given, else of the gate file's model).
    The one way every face runs the gate."""
    gate = load_gate(gate_file)
    if model and model != gate.model:
        gate = replace(gate, model=model)
    return run_gate(gate, str(candidate), datasets=datasets, out_root=out_root, track=track,
                    root=root, progress=progress, export=export, uri=uri, embedder=embedder)


def pipeline_model(params: StageParams) -> str:
    """The registered model of the DVC pipeline on this dataset: one champion per dataset, apart
    from `lab demo`'s and the user's own."""
    return f"{params.model}-{params.dataset}"


def stage_gate(params: StageParams, layout: Layout, opts: StageOptions) -> Gated:
    out = _fresh(layout.out / "gate")
    report = gate_candidate(params.gate, layout.out / "sweep" / "best.yaml", out_root=out,
                            track=opts.track, datasets=opts.datasets, root=layout.gate_root, progress=opts.progress,
                            model=pipeline_model(params))
    shutil.copy(report.folder / "gate.json", out / "gate.json")
    _write_json(layout.metrics / "gate.json", {"verdict": report.verdict, "go": int(report.verdict == "GO"),
                                               "checks_failed": sum(not c.passed for c in report.checks),
                                               **{f"{s}.{k}": v for s, d in report.suites.items()
                                                  for k, v in d.metrics.items()}})
    return Gated(report)


def stage_export(params: StageParams, layout: Layout, opts: StageOptions) -> ExportedModel:
    reports = sorted((layout.out / "gate").glob("*/gate.json"))
    if not reports:
        raise ValidationError(f"no gate report under {layout.out / 'gate'}: run `lab stage gate` first")
    report = load_report(reports[0].parent)
    gate = replace(load_gate(params.gate), model=pipeline_model(params))
    store = json.loads((layout.metrics / "details" / "index.json").read_text(encoding="utf-8"))["store"]
    bundle = _fresh(layout.out / "bundle")
    got = export_gated(report, str(layout.out / "sweep" / "best.yaml"), gate, layout.eval_root / "stores" / store,
                       bundle=bundle)
    _write_json(layout.out / "export.json", got.as_dict() | {"bundle": str(bundle)})
    return ExportedModel(gate.model, got, bundle)


RUN: dict[str, Callable[[StageParams, Layout, StageOptions], StageResult]] = {
    "prepare": stage_prepare, "index": stage_index, "candidates": stage_candidates, "sweep": stage_sweep,
    "gate": stage_gate, "export": stage_export,
}


def run_stage(name: str, params: StageParams, layout: Layout = Layout(),
              opts: StageOptions = StageOptions()) -> StageResult:
    """Run one stage; returns what it made."""
    if name not in RUN:
        raise ValidationError(f"unknown stage {name!r}; known: {list(STAGES)}")
    # every stage shares one embedding cache outside the stages' outputs (nothing embedded twice)
    if current().embed_cache is None:
        use(embed_cache=layout.embeddings)
    return RUN[name](params, layout, opts)
