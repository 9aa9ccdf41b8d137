"""`lab eval | compare`: parse the options, call lab.eval, print the outcome."""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace

from lab.cli.common import check_tracking, command_engine, command_workspace, engine_args, print_json
from lab.config import COMPARISON_FAMILY as DEFAULT_FAMILY
from lab.config import CORRECTIONS as CORRECTION_CHOICES
from lab.config import DEFAULT_KS, AssembleConfig

DEFAULT_BUDGET = AssembleConfig().budget  # declared once, with the setting (lab.config)


def _options(args: argparse.Namespace):
    from lab.config import AssembleConfig
    from lab.eval.runner import EvalOptions

    budget = (DEFAULT_BUDGET if args.budget is None else args.budget) or None
    abstention = None
    if getattr(args, "abstention", False):
        from lab.eval.abstention import AbstentionOptions

        abstention = AbstentionOptions(max_cost=args.abstention_cost)
    return EvalOptions(ks=tuple(args.k), respect_top_k=args.respect_top_k, credit_derived=args.credit_derived,
                       budget=budget, assemble=replace(AssembleConfig(), counter=args.counter or "estimate"),
                       ragas=args.ragas, abstention=abstention)


def _check_before_loading(args: argparse.Namespace) -> None:
    """Refuse the counts that can be refused before a dataset is loaded and indexed (seconds, or
    minutes for a large one), as `lab search` does; a config file is read and checked before it too."""
    from lab.errors import ValidationError

    bad = [k for k in args.k if k < 1]
    if bad:
        raise ValidationError(f"--k: every cutoff must be >= 1, got {bad[0]}")
    if args.budget is not None and args.budget < 0:
        raise ValidationError(f"--budget must be >= 0 (0: no context metrics), got {args.budget}")
    if getattr(args, "abstention", False):
        if not 0 <= args.abstention_cost < 1:
            raise ValidationError(f"--abstention-cost must be in [0, 1), got {args.abstention_cost}",
                                  field="abstention_cost")
        if 10 not in args.k:
            raise ValidationError(f"--abstention costs recall@10: --k must include 10, got {args.k}", field="k")
        if args.system:
            raise ValidationError("--abstention measures lab's own evidence (the best candidate's cosine); "
                                  "a --system run has none: evaluate a --preset or --config instead")
    if getattr(args, "errata", None) and (args.system or args.check):
        raise ValidationError("--errata scores lab's presets or a --config on the corrected labels; with "
                              f"{'--system' if args.system else '--check'} it has nothing to score", field="errata")
    if args.system and len(args.system) > 1 and args.family:
        _check_family(args.family, args.k)


def _check_family(family: list[str], ks: list[int]) -> None:
    """A systems table's family must be metrics the runs will have: refused before any system runs."""
    from lab.errors import ValidationError

    known = ("recall", "hit", "precision", "ndcg")
    for metric in family:
        name, _, k = metric.partition("@")
        if metric == "mrr" or (name in known and k.isdigit() and int(k) in ks):
            continue
        raise ValidationError(f"--family metric {metric!r} is not one these runs report (cutoffs {sorted(ks)}; "
                              f"metrics mrr or {'|'.join(known)}@K): pass --family or --k to match", field="family")


def cmd_eval(args: argparse.Namespace) -> int:
    _check_before_loading(args)  # before the heavy imports, too
    check_tracking(args)
    from lab.errors import ValidationError

    if args.check:
        from lab.flow.evaluate import check_regressions

        failed = 0
        for outcome, run_id in check_regressions(args.check, _options(args), command_workspace(args.datasets, args.tracking_uri),
                                                 out=args.out, tracked=not args.no_track, progress=not args.quiet):
            failed += outcome.status == "FAIL"
            tracked = f"  (mlflow run {run_id})" if run_id else ""
            print(f"{outcome.status:<6} {outcome.name}: " + "; ".join(outcome.notes) + tracked, flush=True)
        return 1 if failed else 0
    if not args.dataset:
        raise ValidationError("--dataset is required (locomo, scifact, demo, a golden .yaml or a BEIR folder)")
    if args.system:
        return eval_systems(args)
    from lab.flow.evaluate import EvalCandidate, Overrides, evaluate

    options = _options(args)
    candidate = EvalCandidate(tuple(args.preset or ()), None if args.preset else args.config)
    overrides = Overrides(args.context_turns, args.time_in_text, args.model, tuple(args.encoders or ()),
                          args.counter, args.budget, args.query_model)
    errata = None
    if args.errata:
        from lab.eval.errata import load_errata

        errata = load_errata(args.errata)  # its format checked before the dataset is loaded
    workspace = command_workspace(args.datasets, args.tracking_uri)
    with command_engine(args, workspace=workspace) as engine:
        for done in evaluate(candidate, overrides, _dataset_ref(args), options, workspace, out=args.out,
                             tracked=not args.no_track, progress=not args.quiet, engine=engine, errata=errata):
            metrics = done.result.metrics
            if args.json:
                print_json({"run": str(done.folder), "mlflow_run_id": done.run_id, **metrics})
                continue
            m = metrics["metrics"]
            head = "  ".join(f"{k} {m[k]:.4f}" for k in ("recall@5", "recall@10", "ndcg@10", "mrr") if k in m)
            print(f"{done.dataset:<10} {done.config.name:<12} {metrics['questions']:>5} q  {head}  -> {done.folder}")
            _longmemeval_line(metrics)
            _abstention_line(metrics)
            _errata_line(metrics)
    return 0


def _errata_line(metrics: dict) -> None:
    e = metrics.get("errata")
    if not e:
        return
    figures = "  ".join(f"{m} {v:.4f} -> {e['corrected'][m]:.4f}" for m, v in e["official"].items()
                        if m in ("recall@10", "ndcg@10"))
    print(f"{'':<10} errata: {e['corrections']} correction(s), {e['questions_changed']} question(s) scored "
          f"differently; official -> corrected: {figures}")


def _abstention_line(metrics: dict) -> None:
    a = metrics.get("abstention")
    if not a:
        return
    v = a["validation"] if a["validation"]["answerable"] else a["tune"]
    part = "validation" if v is a["validation"] else "tune (no validation part)"
    shown = {k: "-" if v[k] is None else v[k] for k in ("precision", "recall", "auroc", "cost")}
    print(f"{'':<10} abstention: threshold {a['threshold']:.4f} fitted on tune; {part}: precision {shown['precision']}  "
          f"recall {shown['recall']}  AUROC {shown['auroc']}  {a['metric']} cost {shown['cost']}  ({a['negatives']})")
    for name, why in (v.get("undefined") or {}).items():
        print(f"{'':<10}   {name} -: {why}")


def eval_systems(args: argparse.Namespace) -> int:
    """`lab eval --system ...`: each system through the one harness (lab.flow.systems); a system
    that fails is reported and the others go on (exit 6 when any failed)."""
    import json

    from lab.eval.report import config_from
    from lab.eval.stores import save_config
    from lab.flow.systems import Systems, evaluate_systems

    if args.preset and len(args.preset) > 1:
        from lab.errors import ValidationError

        raise ValidationError("--system lab takes one --preset (the configuration lab is measured with)")
    systems = Systems(tuple(args.system), config_from((args.preset or ["lab"])[0], args.config if not args.preset else None),
                      save_config(args.context_turns, args.time_in_text), args.query_model or "auto",
                      json.loads(args.system_settings) if args.system_settings else None, tuple(args.k),
                      dict(os.environ), import_from=os.getcwd())
    workspace = command_workspace(args.datasets, args.tracking_uri)
    failed, done = 0, {}
    with command_engine(args, workspace=workspace) as engine:
        dataset, finished = evaluate_systems(systems, _dataset_ref(args), workspace, out=args.out,
                                             tracked=not args.no_track, progress=not args.quiet, engine=engine)
        for system in finished:
            failed += _report_system(args, dataset, system)
            if system.outcome.result is not None:
                done[system.outcome.result.system["system"]] = system.outcome.result
    if len(done) > 1 and not args.json:
        _systems_table(done, args.baseline, args.correction, args.family)
    return 6 if failed else 0


def _dataset_ref(args: argparse.Namespace):
    from lab.eval.dataset_ref import DatasetOptions, DatasetRef

    return DatasetRef(args.dataset, args.datasets, args.split, DatasetOptions(args.observations, args.summaries,
                                                                              args.granularity, args.corpus))


def _systems_table(done: dict, baseline: str | None, correction: str, family: list[str] | None) -> None:
    """The systems side by side, changes against the first (or --baseline) corrected over the
    declared family (every other system x the family's metrics, whichever are shown); speeds marked
    as measured one after another."""
    from lab.errors import ValidationError
    from lab.eval.comparison import compare_many, render, speed_of

    tables = {name: r.per_query for name, r in done.items()}
    family = family or default_family(tables)
    metrics = [m for m in ("recall@10", "ndcg@10", "mrr") if m in family] or family[:3]
    if baseline and baseline not in done:
        raise ValidationError(f"--baseline {baseline!r} is not one of the systems evaluated: {sorted(done)}")
    speeds = {name: speed_of(r.metrics) for name, r in done.items()}
    print()
    print(render(compare_many(tables, metrics, baseline, speeds=speeds, correction=correction, family=family)), end="")


def _report_system(args: argparse.Namespace, dataset, system) -> int:
    """Print one system's line (its run folder is written); 1 when it failed."""
    from lab.adapters.base import AdapterError

    outcome = system.outcome
    if outcome.error is not None:
        if not isinstance(outcome.error, AdapterError) and len(args.system) == 1:
            raise outcome.error
        print(f"error: {outcome.error}", file=sys.stderr, flush=True)
        return 1
    result, out = outcome.result, system.folder
    if args.json:
        print_json({"run": str(out), "mlflow_run_id": system.run_id, **result.metrics})
        return 0
    m = result.metrics["metrics"]
    trip = result.metrics.get("round_trip") or {}
    head = "  ".join(f"{k} {m[k]:.4f}" for k in ("recall@10", "ndcg@10") if k in m)
    print(f"{dataset.name:<8} {result.system['system']:<14} {result.metrics['questions']:>5} q  {head}  round trip "
          f"{'next search' if trip.get('next_search') else 'late' if trip.get('found') else 'NOT FOUND'}  -> {out}")
    if result.system.get("approximates"):
        print(f"{'':<10} {'':<14} approximates: {result.system['approximates']}")
    _longmemeval_line(result.metrics)
    return 0


def _longmemeval_line(metrics: dict) -> None:
    """LongMemEval's own figures under a run's line (the file's questions only)."""
    lme = metrics.get("longmemeval")
    if not lme:
        return
    from lab.eval.longmemeval_metrics import headline_lines

    for line in headline_lines(lme):
        print(f"{'':<10} {line}")


def cmd_compare(args: argparse.Namespace) -> int:
    """Two runs: the paired deltas with their CIs, the tests, the corrected p-values, the effect
    sizes and how many questions each run wins; any number: one table (lab.eval.comparison) as
    text, markdown or LaTeX. Corrected over the declared family (--family, --correction)."""
    from lab.errors import ValidationError
    from lab.eval.comparison import compare_many, render
    from lab.eval.report import load_run

    if len(args.runs) < 2:
        raise ValidationError(f"lab compare needs two or more run folders, got {len(args.runs)}")
    loaded = {}
    for run in args.runs:
        meta, table = load_run(run)
        name = _run_label(run, loaded)
        loaded[name] = (meta, table)
    datasets = {meta["dataset"] for meta, _ in loaded.values()}
    if len(datasets) > 1:
        raise ValidationError(f"runs are on different datasets: {sorted(datasets)}")
    tables = {n: t for n, (_, t) in loaded.items()}
    family = args.family or default_family(tables)
    metrics = args.metric or family
    baseline = _run_label(args.baseline, {}) if args.baseline else None
    result = compare_many(tables, metrics, baseline, speeds=_speeds(loaded), correction=args.correction,
                          family=family)
    if args.json:
        print_json({"baseline": result.baseline, "questions": result.questions, "test": result.test,
                    "correction": result.correction, "family": result.family, "family_size": result.family_size,
                    "metrics": result.metrics, "means": result.means, "changes": result.changes,
                    "speeds": result.speeds, "small_n": result.small_n})
        return 0
    if len(args.runs) == 2 and args.format == "text" and not baseline:
        _two_runs(args.runs, result)
        return 0
    print(render(result, args.format), end="")
    return 0


def default_family(tables: dict) -> list[str]:
    """The family a comparison corrects over unless --family says: the default family's metrics
    every run has (fixed by the runs, never by which metrics are shown)."""
    from lab.errors import ValidationError

    family = [m for m in DEFAULT_FAMILY if all(m in t.columns for t in tables.values())]
    if not family:
        raise ValidationError(f"the runs share none of the default family's metrics ({', '.join(DEFAULT_FAMILY)}): "
                              "pass --family with metrics every run has", field="family")
    return family


def _two_runs(runs: list[str], c) -> None:
    """Two runs as one line per metric: B - A with its CI, its own p, the corrected p and d_z."""
    from lab.eval.comparison import two_run_lines
    from lab.eval.multiple import CORRECTIONS
    from lab.eval.report import compare

    table = {r["metric"]: r for r in compare(runs[0], runs[1], c.metrics).iter_rows(named=True)}
    (other,) = c.changes
    print(f"{'metric':<12} {'A':>8} {'B':>8} {'B-A':>8}  {'95% CI of B-A':<19} {'p':>7} {'p corr':>7}  {'d_z [95% CI]':<22} test")
    for m in c.metrics:
        r, ch = table[m], c.changes[other][m]
        e = ch["effect"]
        effect = "-" if e["d_z"] is None else f"{e['d_z']:+.2f}" + (
            "" if e["low"] is None else f" [{e['low']:+.2f}, {e['high']:+.2f}]")
        print(f"{m:<12} {r['mean_a']:8.4f} {r['mean_b']:8.4f} {r['delta']:+8.4f}  "
              f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] {ch['p']:7.4f} {ch['p_corrected']:7.4f}  {effect:<22} "
              f"{ch['test']}" + (f" ({ch['mcnemar']['only_a']} only A, {ch['mcnemar']['only_b']} only B)"
                                 if "mcnemar" in ch else ""))
    print(f"\nA = {c.names[0]}, B = {c.names[1]}; {c.questions} paired questions; p: {c.test} (McNemar's exact test "
          f"where a metric is binary); p corr: {CORRECTIONS[c.correction]} over a declared family of {c.family_size} "
          f"comparisons ({', '.join(c.family)}); d_z: paired effect size")
    for line in two_run_lines(c):
        print(line)
    for why in c.small_n:
        print(f"warning: {why}")


def _run_label(run: str, taken: dict) -> str:
    """A run folder's name in a table: its folder name (a number added when two share one)."""
    from pathlib import Path

    name, n = Path(run).name, 2
    label = name
    while label in taken:
        label, n = f"{name}#{n}", n + 1
    return label


def _speeds(loaded: dict) -> dict:
    """Systems' speed figures from their metrics.json (preset runs have none)."""
    from lab.eval.comparison import speed_of

    return {name: speed for name, (meta, _) in loaded.items() if (speed := speed_of(meta))}


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate presets on a dataset; writes run folders")
    p.add_argument("--dataset", help="locomo, scifact, demo, longmemeval-s-dev, longmemeval-oracle-dev, a golden .yaml, "
                   "a LoCoMo or LongMemEval .json (LongMemEval's .json.gz too) or a BEIR folder")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--split", default="train", help="BEIR qrels split")
    engine_args(p)
    p.add_argument("--preset", nargs="+", help="one or more preset names")
    p.add_argument("--system", nargs="+", metavar="SYSTEM",
                   help="memory systems through the same harness: lab, txtai, chroma, mem0, mempalace, an adapter "
                        "file (.yaml: http, mcp or python) or module:Class")
    p.add_argument("--baseline", default=None, metavar="SYSTEM",
                   help="with several --system: the one the others are compared with (default: the first)")
    p.add_argument("--system-settings", dest="system_settings", metavar="JSON",
                   help="a built-in system's knobs, e.g. '{\"weights\": 0.7}' for txtai's hybrid weight")
    correction_args(p)
    p.add_argument("--config", help="a .yaml/.json SearchConfig instead of a preset")
    p.add_argument("-k", "--k", type=int, nargs="+", default=list(DEFAULT_KS), help="cutoffs")
    p.add_argument("--respect-top-k", action="store_true", help="cut at each preset's own top_k, as served")
    p.add_argument("--observations", action="store_true", help="LoCoMo: add observations as derived facts")
    p.add_argument("--summaries", action="store_true", help="LoCoMo: add session summaries as memories")
    p.add_argument("--granularity", choices=("turn", "session"), default=None,
                   help="LongMemEval: a memory per turn (the default) or per session (its turns joined)")
    p.add_argument("--corpus", choices=("user", "all"), default=None,
                   help="LongMemEval: the user turns (the official corpus, the default) or every turn")
    p.add_argument("--credit-derived", action="store_true", help="a hit on a derived fact counts for its source")
    p.add_argument("--context-turns", type=int, default=None,
                   help="index time: index each memory with up to N earlier turns of its episode (default 2; 0: off)")
    p.add_argument("--model", default=None,
                   help="index time: the store's embedding model (`lab models`; default all-MiniLM-L6-v2) or st:/onnx: folder")
    p.add_argument("--query-model", dest="query_model", default=None,
                   help="encode the questions with this model instead (one of the store's vector space)")
    p.add_argument("--encoders", nargs="+", default=None, metavar="MODEL",
                   help="index time: extra encoders the store carries (e5, e5-sparse, minilm), each ranked as a list")
    p.add_argument("--time-in-text", action="store_true", help="index time: index each memory with its date")
    p.add_argument("--budget", type=int, default=None,
                   help=f"context metrics at this token budget (0: off; default {DEFAULT_BUDGET}, or a candidate file's own)")
    p.add_argument("--counter", choices=["estimate", "exact"], default=None,
                   help="token counter for context metrics (default estimate, or a candidate file's own)")
    p.add_argument("--ragas", action="store_true", help="also report ragas's LLM-free context metrics")
    p.add_argument("--abstention", action="store_true",
                   help="also measure abstention: a threshold on the best cosine fitted on tune questions, "
                        "reported on held-out ones (docs/abstention.md)")
    p.add_argument("--abstention-cost", dest="abstention_cost", type=float, default=0.01, metavar="COST",
                   help="recall@10 the abstention threshold may cost answerable tune questions (default 0.01)")
    p.add_argument("--errata", metavar="OVERLAY_YAML", default=None,
                   help="also score the labels an errata overlay corrects, beside the official ones "
                        "(datasets/errata/; docs: evaluation.md)")
    p.add_argument("--check", metavar="REGRESSIONS_YAML", help="run every condition; OK / OKISH / FAIL, exit 1 on FAIL")
    p.add_argument("--out", default="runs", help="folder for run folders (default runs/)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: env, else .lab/mlflow)")
    p.add_argument("--no-track", action="store_true", help="do not log the evaluation to MLflow")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="runs side by side: metrics with CIs, paired changes, corrected p-values")
    p.add_argument("runs", nargs="+")
    p.add_argument("--metric", nargs="+", help="metrics to compare (default: the headline ones)")
    p.add_argument("--baseline", default=None, help="the run the others are compared with (default: the first)")
    p.add_argument("--format", choices=["text", "markdown", "latex"], default="text",
                   help="the table as aligned text, markdown or LaTeX")
    correction_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)


def correction_args(p: argparse.ArgumentParser) -> None:
    """--correction and --family: the multiple-comparison correction and the family it runs over."""
    p.add_argument("--correction", choices=list(CORRECTION_CHOICES), default="maxT",
                   help="correction of the p-values over the family: maxT (permutation, family-wise; the default), "
                        "holm (family-wise), bh (false discovery rate) or none")
    p.add_argument("--family", nargs="+", default=None, metavar="METRIC",
                   help="the metrics the correction counts, each against the baseline (default: those of "
                        f"{' '.join(DEFAULT_FAMILY)} every run has); the shown metrics must be among them")
