"""`lab stage NAME`: one stage of the DVC pipeline (dvc.yaml), its parameters read from params.yaml.

The stages are prepare -> index -> candidates -> sweep -> gate -> export. Each reads only what the
stage before it wrote (under ``.lab/dvc``) and writes only its own outputs, so `dvc repro` reruns
exactly the stages whose code, data or parameters changed, and a second `dvc repro` does nothing.
Each also runs by hand (`lab stage index`), which is what DVC calls. Question and memory vectors
go to a shared embedding cache outside every stage's outputs, so nothing is embedded twice.
"""
from __future__ import annotations

import argparse
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

STAGES = ("prepare", "index", "candidates", "sweep", "gate", "export")
OUT = Path(".lab/dvc")
PREPARED = OUT / "prepared"
EVAL_ROOT = OUT / "eval"  # the index stage's stores and the candidates stage's tables
GATE_ROOT = OUT / "gate-eval"  # the gate's own stores: its suites may name other datasets
METRICS = OUT / "metrics"
PLOTS = OUT / "plots"
PARAM_KEYS = {"dataset", "preset", "index", "profiles", "model"}


def load_params(path: str | Path) -> dict[str, Any]:
    """params.yaml, checked: every problem names its key."""
    from lab.config import read_yaml
    from lab.errors import ValidationError

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
    return {**data, "index": index, "profile": profile}


def _save(params: dict[str, Any]):
    from lab.eval.stores import save_config

    index = params["index"]
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


def _prepared():
    from lab.eval.tables import read_tables

    return read_tables(PREPARED)


def stage_prepare(params: dict[str, Any], args: argparse.Namespace) -> str:
    from lab.eval.goldens import load_dataset
    from lab.eval.tables import write_tables

    dataset = load_dataset(params["dataset"], args.datasets)
    write_tables(dataset, _fresh(PREPARED))
    s = dataset.summary()
    return f"{dataset.name}: {s['memories']} memories, {s['questions']} questions -> {PREPARED}"


def stage_index(params: dict[str, Any], args: argparse.Namespace) -> str:
    import time

    from lab.eval.stores import eval_store

    dataset = _prepared()
    started = time.perf_counter()
    path = eval_store(dataset, _save(params), root=EVAL_ROOT, progress=not args.quiet)
    seconds = round(time.perf_counter() - started, 2)
    _write_json(METRICS / "index.json", {"dataset": dataset.name, "memories": len(dataset.memories),
                                         "store": path.name, "build_seconds": seconds, "index": params["index"]})
    return f"store {path}"


def stage_candidates(params: dict[str, Any], args: argparse.Namespace) -> str:
    import polars as pl

    from lab.config import DEFAULT_KS
    from lab.eval.cache import candidate_table, prepared_for
    from lab.eval.report import candidate_from
    from lab.eval.runner import EvalOptions, evaluate
    from lab.eval.stores import eval_retriever

    dataset = _prepared()
    search = candidate_from(params["preset"], None).search
    retriever = eval_retriever(dataset, _save(params), root=EVAL_ROOT, progress=not args.quiet)
    cands, _ = candidate_table(retriever, dataset, search, depth=max(DEFAULT_KS), root=EVAL_ROOT)
    prepared_for(cands)  # its encodings are written beside the table now, not by a later stage
    result = evaluate(retriever, dataset, search, EvalOptions(budget=2000), cands=cands)
    m = result.metrics
    _write_json(METRICS / "baseline.json", {"dataset": dataset.name, "preset": search.name, **m["metrics"],
                                            **{f"context_{k.removeprefix('context_')}": v
                                               for k, v in (m.get("context") or {}).items()}})
    PLOTS.mkdir(parents=True, exist_ok=True)
    ks = list(DEFAULT_KS)
    pl.DataFrame({"k": ks, "recall": [m["metrics"][f"recall@{k}"] for k in ks]}).write_csv(PLOTS / "recall_curve.csv")
    pl.DataFrame(m["by_category"]).select("category", "recall@10", "ndcg@10").write_csv(PLOTS / "by_category.csv")
    return f"{cands.height} candidate rows; {search.name} recall@10 {m['metrics']['recall@10']:.4f}"


def stage_sweep(params: dict[str, Any], args: argparse.Namespace) -> str:
    import polars as pl

    from lab.tune.spec import parse_spec
    from lab.config import read_yaml
    from lab.tune.sweep import run_sweep

    source = read_yaml(Path(params["profile"]["sweep"]), "sweep file")
    # the prepared dataset and the index-time parameters, pinned (one store: the index stage's)
    chunk = _save(params).chunk
    index_dims = {"index.context_turns": [int(chunk.context_turns)], "index.time_in_text": [bool(chunk.time_in_text)]}
    spec = parse_spec({**source, "dataset": str(PREPARED), "base": params["preset"],
                       "space": {**index_dims, **{k: v for k, v in source["space"].items() if not k.startswith("index.")}}},
                      where=params["profile"]["sweep"])
    out = _fresh(OUT / "sweep")
    result = run_sweep(spec, out_root=out, progress=not args.quiet, root=EVAL_ROOT, track=not args.no_track)
    shutil.copy(result.folder / "best.yaml", out / "best.yaml")
    summary = json.loads((result.folder / "summary.json").read_text(encoding="utf-8"))
    _write_json(METRICS / "sweep.json", {k: summary[k] for k in ("sweep", "objective", "tune", "validation", "gap",
                                                                 "configs", "seconds") if k in summary})
    obj = spec.objective if f"tune/{spec.objective}" in result.table.columns else "recall@10"
    cols = [c for c in ("trial", "fusion.k", f"tune/{obj}", f"validation/{obj}") if c in result.table.columns]
    PLOTS.mkdir(parents=True, exist_ok=True)
    (result.table.filter(pl.col("error").is_null()).select(cols)
     .rename({f"tune/{obj}": "tune", f"validation/{obj}": "validation"}).write_csv(PLOTS / "sweep.csv"))
    return f"best {obj} {summary['tune']:.4f} on tune, {summary['validation']:.4f} on validation -> {out / 'best.yaml'}"


def stage_gate(params: dict[str, Any], args: argparse.Namespace) -> str:
    from lab.gate.checks import load_gate
    from lab.gate.run import run_gate

    out = _fresh(OUT / "gate")
    report = run_gate(load_gate(params["profile"]["gate"]), str(OUT / "sweep" / "best.yaml"), datasets=args.datasets,
                      out_root=out, track=not args.no_track, root=GATE_ROOT, progress=not args.quiet)
    shutil.copy(report.folder / "gate.json", out / "gate.json")
    _write_json(METRICS / "gate.json", {"verdict": report.verdict, "go": int(report.verdict == "GO"),
                                        "checks_failed": sum(not c.passed for c in report.checks),
                                        **{f"{s}.{k}": v for s, d in report.suites.items() for k, v in d["metrics"].items()}})
    return f"verdict {report.verdict} ({len(report.checks)} checks)"


def stage_export(params: dict[str, Any], args: argparse.Namespace) -> str:
    from lab.gate.checks import load_gate
    from lab.gate.run import export_gated, load_report

    from lab.errors import ValidationError

    reports = sorted((OUT / "gate").glob("*/gate.json"))
    if not reports:
        raise ValidationError(f"no gate report under {OUT / 'gate'}: run `lab stage gate` first")
    report = load_report(reports[0].parent)
    gate = load_gate(params["profile"]["gate"])
    if gate.model != params["model"]:
        gate = replace(gate, model=params["model"])
    store = json.loads((METRICS / "index.json").read_text(encoding="utf-8"))["store"]
    bundle = _fresh(OUT / "bundle")
    got = export_gated(report, str(OUT / "sweep" / "best.yaml"), gate, EVAL_ROOT / "stores" / store, bundle=bundle)
    _write_json(OUT / "export.json", {k: v for k, v in got.items() if k != "bundle"} | {"bundle": str(bundle)})
    return f"exported {params['model']} version {got.get('version')} -> {bundle}"


def cmd_stage(args: argparse.Namespace) -> int:
    from lab.workspace import current, use

    params = load_params(args.params)
    # every stage shares one embedding cache outside the stages' outputs (nothing embedded twice)
    if current().embed_cache is None:
        use(embed_cache=OUT / "embeddings")
    run = {"prepare": stage_prepare, "index": stage_index, "candidates": stage_candidates, "sweep": stage_sweep,
           "gate": stage_gate, "export": stage_export}[args.stage]
    print(f"{args.stage}: {run(params, args)}", flush=True)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="run one stage of the DVC pipeline (dvc.yaml) with params.yaml")
    p.add_argument("stage", choices=STAGES)
    p.add_argument("--params", default="params.yaml", help="the parameters file (default params.yaml)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--no-track", action="store_true", help="do not log sweep and gate runs to MLflow (export needs them)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_stage)
