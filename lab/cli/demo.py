"""`lab demo`: the main job on the embedded demo data, end to end.

Ingest the demo memories into a store, evaluate the `lab` preset on the demo goldens, run a small
sweep, put the sweep's best configuration through the gate, and on GO export it as the champion;
then say where everything is. Every step is an MLflow run in the local tracking store.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import print_hits



def cmd_demo(args: argparse.Namespace) -> int:
    from lab import track
    from lab.cli.store import DEMO_QUERIES
    from lab.eval.goldens import load_dataset
    from lab.eval.runner import EvalOptions
    from lab.eval.runs import evaluate_to_folder
    from lab.eval.stores import eval_retriever
    from lab.gate.checks import load_gate
    from lab.gate.run import report_table, run_gate
    from lab.pipeline import Pipeline
    from lab.retriever import Retriever
    from lab.search.presets import preset
    from lab.tune.spec import load_spec
    from lab.tune.sweep import run_sweep
    from lab.workspace import current

    project = current().project
    demo_sweep, demo_gate = project / "goldens" / "sweeps" / "demo.yaml", project / "goldens" / "gate-demo.yaml"
    uri = args.tracking_uri
    store = Path(args.store)
    print(f"1/5 ingest: {'reusing' if (store / 'lab-store.json').exists() else 'creating'} store at {store}", flush=True)
    with Pipeline.open(store, create=True) as pipe:
        data = pipe.ingest(args.data, progress=True).to_dict()
        print(f"    {data['created']} new, {data['duplicates']} already stored, {data['edges']} new edges, "
              f"{data['embedded']} texts embedded in {data['seconds']} s")
        embedder = pipe.embedder
    with Retriever.open(store, embedder=embedder) as retriever:
        namespace, query = DEMO_QUERIES[0]
        print(f"    sample search [{namespace}] {query!r}")
        print_hits(retriever.search(query, namespace, k=3))

    print("2/5 evaluate: the lab preset on the demo goldens", flush=True)
    dataset = load_dataset("demo")
    retriever = eval_retriever(dataset, embedder=embedder, progress=True)
    result, folder = evaluate_to_folder(retriever, dataset, preset("lab"), EvalOptions(), Path(args.out))
    m = result.metrics["metrics"]
    run_id = track.log_eval(result, folder, dataset=dataset, store_version=str(retriever.version), uri=uri)
    print(f"    recall@10 {m['recall@10']:.4f}  ndcg@10 {m['ndcg@10']:.4f}  mrr {m['mrr']:.4f}  -> {folder}")

    print(f"3/5 sweep: {demo_sweep.relative_to(project)}", flush=True)
    sweep = run_sweep(load_spec(demo_sweep), out_root=Path(args.out) / "sweeps", progress=True, embedder=embedder,
                      tracking_uri=uri)
    obj = sweep.spec.objective
    print(f"    {sweep.info['scored']} configurations; best {obj} {sweep.best[f'tune/{obj}']:.4f} on tune, "
          f"{sweep.best[f'validation/{obj}']:.4f} on validation  -> {sweep.folder}")

    print("4/5 gate: the sweep's best configuration", flush=True)
    report = run_gate(load_gate(demo_gate), str(sweep.folder / "best.yaml"), out_root=Path(args.out) / "gate",
                      uri=uri, export=True, embedder=embedder)
    print("    " + report_table(report).replace("\n", "\n    "))

    print("5/5 export", flush=True)
    if report.export:
        print(f"    GO: registered {report.export['uri']} (version {report.export['version']})")
        print(f"    bundle: {report.export['bundle']}")
    else:
        print("    NO-GO: export refused; failed checks:")
        for line in report.refused:
            print(f"      - {line}")
    print(f"\nverdict: {report.verdict}   demo recall@10 {m['recall@10']:.4f} (lab preset), "
          f"sweep best {sweep.best[f'all/{obj}']:.4f} ({obj}, all questions)")
    print(f"look at: {folder} (evaluation), {sweep.folder} (sweep: results, best.yaml, plots), "
          f"{report.folder} (gate report)")
    print(f"runs:    {track.ui_command(uri)}   (eval run {run_id})")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from lab.cli.store import demo_data
    from lab.workspace import current

    p = sub.add_parser("demo", help="the main job on the demo data: ingest, evaluate, sweep, gate, export on GO")
    p.add_argument("--store", default=str(current().store or ".lab/demo"),
                   help="store folder (env LAB_STORE; default .lab/demo)")
    p.add_argument("--data", default=str(demo_data()), help="memories file or folder (default: datasets/demo)")
    p.add_argument("--out", default="runs", help="folder for run, sweep and gate folders (default runs/)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: env, else .lab/mlflow)")
    p.set_defaults(func=cmd_demo)
