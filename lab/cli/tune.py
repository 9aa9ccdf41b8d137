"""`lab sweep | runs`: parse the options, call lab.tune / lab.track, print the outcome."""
from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from lab.cli.common import print_json


def cmd_sweep(args: argparse.Namespace) -> int:
    from lab.track import ui_command
    from lab.tune.spec import load_spec
    from lab.tune.sweep import run_sweep

    spec = load_spec(args.spec)
    say = (lambda msg: None) if args.quiet or args.json else (lambda msg: print(f"  {msg}", flush=True))
    result = run_sweep(spec, datasets=args.datasets, out_root=args.out, progress=not args.quiet and not args.json,
                       track=not args.no_track, tracking_uri=args.tracking_uri, on_stage=say)
    summary = json.loads((result.folder / "summary.json").read_text(encoding="utf-8"))
    if args.json:
        print_json({"folder": str(result.folder), **summary})
        return 130 if result.interrupted else 0
    obj = spec.objective
    info = result.info
    print(f"sweep {spec.name}: {info['scored']} configurations on {spec.dataset} ({spec.strategy}), "
          f"{info['questions']} questions, {info['validation_questions']} held out by {info['split_by']}"
          + ("  [interrupted: results so far]" if result.interrupted else ""))
    if info.get("configs_per_second"):
        print(f"  fusion scoring: {info['configs_per_second']:.0f} configurations/s; whole sweep {info['seconds']:.1f} s")
    best = result.best
    gap = summary.get("gap")
    print(f"  best on tune: {obj} {best.get('tune/' + obj, float('nan')):.4f}   validation "
          f"{best.get('validation/' + obj, float('nan')):.4f}" + (f"   gap {gap:+.4f}" if gap is not None else ""))
    point = {k: v for k, v in best.items() if "/" not in k and k not in ("trial", "feasible", "error")}
    print(f"  parameters: {json.dumps(point)}")
    if result.pareto.height:
        front = ", ".join(f"{r['all/context_tokens']:.0f} tok -> {r['all/context_recall']:.3f}"
                          for r in result.pareto.iter_rows(named=True))
        print(f"  Pareto front (tokens -> context recall): {front}")
    print(f"  -> {result.folder} (results.parquet, best.yaml, plots)")
    if info.get("mlflow_run_id"):
        print(f"  MLflow run {info['mlflow_run_id']}; view: {ui_command(args.tracking_uri)}")
    return 130 if result.interrupted else 0


def cmd_runs(args: argparse.Namespace) -> int:
    from lab.track import recent_runs, ui_command

    runs = recent_runs(args.n, args.tracking_uri, kind=args.kind)
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print(f"no runs yet in {ui_command(args.tracking_uri).split()[-1]}")
        return 0
    print(f"{'started (UTC)':<17} {'kind':<12} {'status':<9} {'verdict':<7} {'name':<40} run id")
    for r in runs:
        when = datetime.fromtimestamp(r["start_time"] / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M")
        m = r["metrics"]
        head = next((f"{k} {m[k]:.4f}" for k in ("recall_at_10", "tune.recall_at_10", "all.recall_at_10") if k in m), "")
        print(f"{when:<17} {r['kind'] or '':<12} {r['status']:<9} {r['verdict'] or '':<7} {r['name'][:40]:<40} "
              f"{r['run_id']}  {head}")
    print(f"view them: {ui_command(args.tracking_uri)}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sweep", help="sweep configurations from a sweep file (grid, random, tpe); logs to MLflow")
    p.add_argument("spec", help="the sweep .yaml (see goldens/sweeps/)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--out", default="runs/sweeps", help="folder for sweep folders (default runs/sweeps)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: env, else .lab/mlflow)")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("runs", help="list recent MLflow runs (eval, sweep, gate)")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--kind", choices=["eval", "sweep", "sweep-trial", "gate"])
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)


def cmd_gate(args: argparse.Namespace) -> int:
    from lab.gate.checks import load_gate
    from lab.gate.run import report_table, run_gate

    gate = load_gate(args.config)
    report = run_gate(gate, args.candidate, datasets=args.datasets, out_root=args.out, track=not args.no_track,
                      uri=args.tracking_uri, export=args.export, store=args.store, progress=not args.quiet)
    if args.json:
        print_json(report.as_dict())
    else:
        print(report_table(report))
        print(f"report: {report.folder / 'gate.json'}" + (f"   MLflow run {report.run_id}" if report.run_id else ""))
        if report.export:
            print(f"exported: {report.export['uri']} (version {report.export['version']}), bundle {report.export['bundle']}")
        elif report.refused:
            print("export refused: NO-GO; failed checks:")
            for line in report.refused:
                print(f"  - {line}")
    return 0 if report.verdict == "GO" else 1


def add_gate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="GO/NO-GO of a candidate against the gold-standard gate; exit 0 GO, 1 NO-GO, 2 error")
    p.add_argument("--config", default="goldens/gate.yaml", help="the gate file (default goldens/gate.yaml)")
    p.add_argument("--candidate", default="lab", help="a preset name or a SearchConfig file (e.g. a sweep's best.yaml)")
    p.add_argument("--export", action="store_true", help="on GO: register the model as @champion and write the bundle")
    p.add_argument("--store", default=None, help="export: the store the served module reads (default: the first suite's)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--out", default="runs/gate", help="folder for gate reports (default runs/gate)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--no-track", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)
