"""`lab stage NAME`: one stage of the DVC pipeline (dvc.yaml, `lab.flow.stages`), its parameters
read from params.yaml; DVC calls this, and it runs by hand too (`lab stage index`)."""
from __future__ import annotations

import argparse

from lab.cli.common import command_workspace
from lab.flow import STAGES


def describe(result) -> str:
    """One line saying what a stage made."""
    from lab.flow import results as s

    match result:
        case s.Prepared():
            return f"{result.dataset}: {result.memories} memories, {result.questions} questions -> {result.folder}"
        case s.Indexed():
            return f"store {result.store}"
        case s.CandidatesMade():
            return f"{result.rows} candidate rows; {result.preset} recall@10 {result.recall_at_10:.4f}"
        case s.Swept():
            return (f"best {result.objective} {result.tune:.4f} on tune, {result.validation:.4f} on validation "
                    f"-> {result.best}")
        case s.Gated():
            return f"verdict {result.report.verdict} ({len(result.report.checks)} checks)"
        case s.ExportedModel():
            again = " (the same bundle as before: not registered again)" if result.export.reused else ""
            return f"exported {result.model} version {result.export.version}{again} -> {result.bundle}"
    raise TypeError(f"no wording for a stage result of type {type(result).__name__}")


def cmd_stage(args: argparse.Namespace) -> int:
    from lab.flow.layout import StageOptions
    from lab.flow.params import load_params
    from lab.flow.stages import run_stage

    opts = StageOptions(command_workspace(datasets=args.datasets), track=not args.no_track, progress=not args.quiet)
    print(f"{args.stage}: {describe(run_stage(args.stage, load_params(args.params), opts))}", flush=True)
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("stage", help="run one stage of the DVC pipeline (dvc.yaml) with params.yaml")
    p.add_argument("stage", choices=STAGES)
    p.add_argument("--params", default="params.yaml", help="the parameters file (default params.yaml)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--no-track", action="store_true", help="do not log sweep and gate runs to MLflow (export needs them)")
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=cmd_stage)
