"""`lab demo`: the main job on the embedded demo data, end to end (`lab.flow.demo`), printed step
by step: ingest, evaluate, sweep, gate, and on GO export as the champion; then where to look."""
from __future__ import annotations

import argparse

from lab.cli.common import command_tracking, command_workspace, print_hits

DEMO_STORE = ".lab/demo"


def demo_store() -> str:
    """The store `lab demo` builds without --store: $LAB_STORE, else .lab/demo."""
    from lab.workspace import current

    return str(current().store or DEMO_STORE)


def _print_done(step) -> None:
    r = step.result
    if step.name == "ingest":
        d = r.report
        print(f"    {len(d.created)} new, {len(d.duplicates)} already stored, {d.edges} new edges, "
              f"{d.embedded} texts embedded in {round(d.seconds, 3)} s")
        print(f"    sample search [{r.namespace}] {r.query!r}")
        print_hits(r.hits)
    elif step.name == "evaluate":
        m = r.result.metrics["metrics"]
        print(f"    recall@10 {m['recall@10']:.4f}  ndcg@10 {m['ndcg@10']:.4f}  mrr {m['mrr']:.4f}  -> {r.folder}")
    elif step.name == "sweep":
        print(f"    {r.configurations} configurations; best {r.objective} {r.tune:.4f} on tune, "
              f"{r.validation:.4f} on validation  -> {r.folder}")
    elif step.name == "gate":
        from lab.gate.run import report_table

        print("    " + report_table(r.report).replace("\n", "\n    "))
    elif step.name == "export":
        from lab.flow.results import ExportedModel

        if isinstance(r, ExportedModel):
            again = ": the same bundle as before, not registered again" if r.export.reused else ""
            print(f"    GO: registered {r.export.uri} (version {r.export.version}{again})")
            print(f"    bundle: {r.export.bundle}")
        else:
            print("    NO-GO: export refused; failed checks:")
            for line in r.failed:
                print(f"      - {line}")


def cmd_demo(args: argparse.Namespace) -> int:
    from lab.flow.demo import STEPS, run_demo
    from lab.flow.results import ExportedModel
    from lab.track import env_line, load_line, ui_command

    done = {}
    for step in run_demo(command_workspace(tracking_uri=args.tracking_uri), args.store, args.data, args.out):
        if not step.done:
            print(f"{step.number}/{STEPS} {step.name}" + (f": {step.title}" if step.title else ""), flush=True)
            continue
        _print_done(step)
        done[step.name] = step.result
    evaluated, swept, report, exported = done["evaluate"], done["sweep"], done["gate"].report, done["export"]
    m = evaluated.result.metrics["metrics"]
    print(f"\nverdict: {report.verdict}   demo recall@10 {m['recall@10']:.4f} (lab preset), "
          f"sweep best {swept.all:.4f} ({swept.objective}, all questions)")
    print(f"look at: {evaluated.folder} (evaluation), {swept.folder} (sweep: results, best.yaml, plots), "
          f"{report.folder} (gate report)")
    print(f"runs:    {ui_command(command_tracking(args))}   (eval run {evaluated.run_id})")
    if isinstance(exported, ExportedModel):
        print(f"serve:   .venv/bin/lab serve --demo   (the demo champion over a store seeded with the demo data)\n"
              f"load:    {env_line(command_tracking(args))}   # then, from any folder:\n"
              f"         {load_line(exported.export.uri)}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    from lab.workspace import current

    p = sub.add_parser("demo", help="the main job on the demo data: ingest, evaluate, sweep, gate, export on GO")
    p.add_argument("--store", default=demo_store(), help=f"store folder (env LAB_STORE; default {DEMO_STORE})")
    p.add_argument("--data", default=str(current().project / "datasets" / "demo"), help="memories file or folder (default: datasets/demo)")
    p.add_argument("--out", default="runs", help="folder for run, sweep and gate folders (default runs/)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: env, else .lab/mlflow)")
    p.set_defaults(func=cmd_demo)
