"""`lab sweep | runs | learn | gate`: parse the options, call lab.tune / lab.track, print the outcome."""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from pathlib import Path
import json
from datetime import datetime, timezone

from lab.cli.common import check_tracking, command_engine, command_tracking, command_workspace, engine_args, print_json


def cmd_sweep(args: argparse.Namespace) -> int:
    from lab.track import ui_command
    from lab.tune.spec import load_spec
    from lab.tune.sweep import run_sweep

    spec = load_spec(args.spec)
    check_tracking(args)
    say = (lambda msg: None) if args.quiet or args.json else (lambda msg: print(f"  {msg}", flush=True))
    ws = command_workspace(args.datasets, args.tracking_uri)
    with command_engine(args, workspace=ws) as engine, _sweep_kept(Path(args.out) / spec.name):
        result = run_sweep(spec, datasets=ws.datasets_root, project=ws.project, out_root=args.out,
                           progress=not args.quiet and not args.json,
                           root=ws.eval_root, embeddings=ws.embed_cache, track=not args.no_track,
                           tracking_uri=command_tracking(args), on_stage=say, engine=engine)
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
    from lab.tune.selection import describe

    for line in describe(info.get("selection") or {}):
        print(f"  {line}")
    if result.pareto.height:
        front = ", ".join(f"{r['all/context_tokens']:.0f} tok -> {r['all/context_recall']:.3f}"
                          for r in result.pareto.iter_rows(named=True))
        print(f"  Pareto front (tokens -> context recall): {front}")
    print(f"  -> {result.folder} (results.parquet, best.yaml, plots)")
    if info.get("mlflow_run_id"):
        print(f"  MLflow run {info['mlflow_run_id']}; view: {ui_command(command_tracking(args))}")
    return 130 if result.interrupted else 0


@contextmanager
def _sweep_kept(folder: Path):
    """A tracking failure after the sweep's folder was written says where its results are."""
    from lab.track import TrackingError

    try:
        yield
    except TrackingError as exc:
        if (folder / "summary.json").is_file():
            exc.leave(f"the sweep's results are in {folder} (not in MLflow)")
        raise


def cmd_runs(args: argparse.Namespace) -> int:
    from lab.track import recent_runs, ui_command

    runs = recent_runs(args.n, command_tracking(args), kind=args.kind)
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print(f"no runs yet in {ui_command(command_tracking(args)).split()[-1]}")
        return 0
    print(f"{'started (UTC)':<17} {'kind':<12} {'status':<9} {'verdict':<7} {'name':<40} run id")
    for r in runs:
        when = datetime.fromtimestamp(r["start_time"] / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M")
        m = r["metrics"]
        head = next((f"{k} {m[k]:.4f}" for k in ("recall_at_10", "tune.recall_at_10", "all.recall_at_10") if k in m), "")
        print(f"{when:<17} {r['kind'] or '':<12} {r['status']:<9} {r['verdict'] or '':<7} {r['name'][:40]:<40} "
              f"{r['run_id']}  {head}")
    print(f"view them: {ui_command(command_tracking(args))}")
    _print_champions(command_tracking(args))
    return 0


def _print_champions(uri) -> None:  # a lab.track Tracking
    """The registered champions, and the line that lets MLflow find them from any folder."""
    from lab.track import champions, env_line, load_line

    found = champions(uri)
    for c in found:
        print(f"champion: {c['uri']} (version {c['version']}, verdict {c['verdict']})")
    print(f"from another folder: {env_line(uri)}")
    if found:
        print(f"  then: {load_line(found[0]['uri'])}")


def cmd_export_notebook(args: argparse.Namespace) -> int:
    from lab.notebook.export import export_offline
    from lab.workspace import current

    name = args.notebook
    path = Path(name) if name.endswith(".py") else current().project / "notebooks" / f"{name}.py"
    import shlex

    page = export_offline(path, args.out, shlex.split(args.args or ""))
    print(f"{page} ({page.stat().st_size / 1e6:.1f} MB, marimo's frontend inside): open it in a browser as a "
          "file, no server or network needed; code cells start hidden (the page's ... menu shows them)")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export-notebook", help="run a notebook and export it as one HTML file that opens offline",
                       description="Run a marimo notebook and write NAME.html, one self-contained file with marimo's "
                                   "frontend inside (marimo's own export loads it from a CDN and is blank offline) "
                                   "and code cells hidden, e.g. lab export-notebook sweep --args '--sweep demo-small'")
    p.add_argument("notebook", help="tune, sweep, errors, context (notebooks/NAME.py) or a notebook file")
    p.add_argument("--out", default="runs/notebooks", help="folder for the page (default runs/notebooks)")
    p.add_argument("--args", default="", help="the notebook's own arguments, quoted: --args '--dataset locomo'")
    p.set_defaults(func=cmd_export_notebook)

    p = sub.add_parser("sweep", help="sweep configurations from a sweep file (grid, random, tpe); logs to MLflow")
    p.add_argument("spec", help="the sweep .yaml (see goldens/sweeps/)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--out", default="runs/sweeps", help="folder for sweep folders (default runs/sweeps)")
    engine_args(p)
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: env, else .lab/mlflow)")
    p.add_argument("--no-track", action="store_true", help="do not log to MLflow")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("runs", help="list recent MLflow runs (eval, sweep, gate)")
    p.add_argument("-n", type=int, default=20)
    p.add_argument("--kind", choices=["eval", "system", "sweep", "sweep-trial", "gate"])
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)


def cmd_learn(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lab.config import Candidate
    from lab.eval.goldens import load_dataset
    from lab.eval.report import candidate_from
    from lab.eval.runner import EvalOptions
    from lab.eval.stores import eval_retriever, save_config
    from lab.tune.learn import learn_fusion

    candidate = candidate_from(args.preset if not args.config else None, args.config)
    ws = command_workspace(args.datasets)
    dataset = load_dataset(args.dataset, ws.datasets_root, project=ws.project, split=args.split,
                           observations=args.observations)
    save = candidate.save or save_config()
    retriever = eval_retriever(dataset, save, root=ws.eval_root, embeddings=ws.embed_cache,
                               progress=not args.quiet and not args.json)
    say = None if args.quiet or args.json else (lambda msg: print(f"  {msg}", flush=True))
    options = EvalOptions(ks=(10,), credit_derived=args.credit_derived)
    config, judged = learn_fusion(retriever, dataset, candidate.search, options, l2=args.l2, cv=not args.no_cv,
                                  folds=args.folds, progress=say, root=ws.eval_root)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    verdict = ""
    if judged is not None:
        verdict = (f"# cross-validation (leave one namespace out): wins {judged.wins}/{len(judged.folds)} folds on "
                   f"{judged.objective}, mean held-out delta {judged.to_dict()['mean_delta']}\n")
    out.write_text(Candidate(config, candidate.save, candidate.assemble).to_yaml(
        f"# lab learn --dataset {args.dataset}: {config.fusion.learned.trained_on}\n{verdict}"), encoding="utf-8")
    if args.json:
        print_json({"config": str(out), "model": config.fusion.learned.__dict__,
                    "cross_validation": judged.to_dict() if judged else None})
        return 0
    if judged is not None:
        d = judged.to_dict()
        print(f"{'held out':<12} {'questions':>9}  " + "  ".join(f"{m + ' (base -> learned)':>27}" for m in judged.metrics))
        for f in judged.folds:
            cells = "  ".join(f"{f.base[m]:.4f} -> {f.learned[m]:.4f} ({f.delta[m]:+.4f})".rjust(27)
                              for m in judged.metrics)
            print(f"{f.held_out:<12} {f.questions:>9}  {cells}")
        for row in judged.pooled:
            print(f"all held out, {row['metric']}: {row['mean_a']:.4f} -> {row['mean_b']:.4f} ({row['delta']:+.4f}, "
                  f"95% CI [{row['delta_low']:+.4f}, {row['delta_high']:+.4f}], p {row['p_value']:.4f}, {row['n']} questions)")
        for cat, rows in judged.by_category.items():
            r = rows[judged.objective]
            print(f"  {cat:<18} {judged.objective} {r['mean_a']:.4f} -> {r['mean_b']:.4f} ({r['delta']:+.4f}, p {r['p_value']:.3f})")
        print(f"wins {judged.wins}/{len(judged.folds)} on {judged.objective}; mean held-out delta "
              f"{d['mean_delta']}; " + ("it passes the cross-validation rule (wins on most folds); "
                                       "check the other goldens before adopting it: lab gate --candidate FILE"
                                       if judged.adopt else "it fails the cross-validation rule (wins on too few folds)"))
    model = config.fusion.learned
    top = sorted(zip(model.features, model.coef), key=lambda fc: -abs(fc[1]))[:6]
    print("strongest features: " + ", ".join(f"{f} {c:+.2f}" for f, c in top))
    print(f"-> {out} (a candidate file: lab eval --config, lab gate --candidate)")
    return 0


def add_learn_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("learn", help="train a learned fuser on a dataset's gold; cross-validated; writes a candidate file")
    p.add_argument("--dataset", required=True, help="locomo, scifact, demo, a golden .yaml, a LoCoMo .json or a BEIR folder")
    p.add_argument("--preset", default="lab", help="the base configuration (default lab)")
    p.add_argument("--config", help="a candidate file as the base instead of a preset")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--split", default="train", help="BEIR qrels split")
    p.add_argument("--observations", action="store_true", help="LoCoMo: add observations as derived facts")
    p.add_argument("--credit-derived", action="store_true", help="a hit on a derived fact counts for its source")
    p.add_argument("--l2", type=float, default=1.0, help="L2 penalty of the logistic regression (default 1)")
    p.add_argument("--no-cv", action="store_true", help="skip the cross-validation")
    p.add_argument("--folds", type=int, default=5,
                   help="folds when the questions are all in one namespace (else one fold per namespace; default 5)")
    p.add_argument("--out", default="runs/learned.yaml", help="the candidate file to write (default runs/learned.yaml)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_learn)


def cmd_adapt(args: argparse.Namespace) -> int:
    from pathlib import Path

    from lab.config import AdaptConfig
    from lab.eval.dataset_ref import DatasetOptions, DatasetRef
    from lab.eval.report import candidate_from
    from lab.eval.stores import eval_retriever, save_config
    from lab.tune.adapt import adapt_from_gold

    if args.kind != "finetune":
        settings = AdaptConfig(kind=args.kind, rank=args.rank, l2=args.l2, steps=args.steps,
                               learning_rate=args.learning_rate or AdaptConfig.learning_rate,
                               temperature=args.temperature, seed=args.seed)
    check_tracking(args)
    candidate = candidate_from(args.preset if not args.config else None, args.config)
    ws = command_workspace(args.datasets, args.tracking_uri)
    dataset = DatasetRef(args.dataset, split=args.split, options=DatasetOptions(granularity=args.granularity)).at(
        ws.datasets_root, ws.project).load()
    show = not args.quiet and not args.json
    retriever = eval_retriever(dataset, candidate.save or save_config(), root=ws.eval_root, embeddings=ws.embed_cache,
                               progress=show)
    say = (lambda msg: print(f"  {msg}", flush=True)) if show else None
    if args.kind == "finetune":
        return _finetune(args, retriever, dataset, say)
    out = Path(args.out or f"models/adapter-{Path(dataset.name).stem}")
    done = adapt_from_gold(retriever, dataset, settings, str(out), cv=not args.no_cv, folds=args.folds, progress=say,
                           tracking=None if args.no_track else command_tracking(args))
    use = f"lab eval --dataset {args.dataset} --query-model adapter:{out}"
    if args.json:
        print_json({"adapter": done.adapter.model_id, "base": done.adapter.base, "questions": done.questions,
                    "cross_validation": done.judged.to_dict() if done.judged else None, "run_id": done.run_id,
                    "use": use})
        return 0
    if done.judged is not None:
        _print_judged(done.judged)
    print(f"-> {done.adapter.model_id}")
    print(f"   adapts the queries of {done.adapter.base}; trained on {done.questions} questions"
          + (f"; MLflow run {done.run_id}" if done.run_id else ""))
    print(f"   use it: {use}")
    return 0


def _print_judged(judged) -> None:
    """A held-out judgement (lab.tune.learn.CrossValidation) of a training from gold, per fold and pooled."""
    print(f"{'held out':<12} {'questions':>9}  " + "  ".join(f"{'vector ' + m + ' (base -> adapted)':>34}"
                                                            for m in judged.metrics))
    for f in judged.folds:
        cells = "  ".join(f"{f.base[m]:.4f} -> {f.learned[m]:.4f} ({f.delta[m]:+.4f})".rjust(34) for m in judged.metrics)
        print(f"{f.held_out:<12} {f.questions:>9}  {cells}")
    for row in judged.pooled:
        print(f"all held out, vector {row['metric']}: {row['mean_a']:.4f} -> {row['mean_b']:.4f} ({row['delta']:+.4f}, "
              f"95% CI [{row['delta_low']:+.4f}, {row['delta_high']:+.4f}], p {row['p_value']:.4f}, {row['n']} questions)")
    print(f"wins {judged.wins}/{len(judged.folds)} held-out folds on vector {judged.objective}")


def _finetune(args: argparse.Namespace, retriever, dataset, say) -> int:
    from pathlib import Path

    from lab.config import FinetuneConfig
    from lab.tune.finetune import finetune_from_gold

    settings = FinetuneConfig(epochs=args.epochs, batch_size=args.batch_size,
                              learning_rate=args.learning_rate or FinetuneConfig.learning_rate,
                              hard_negatives=args.hard_negatives, max_steps=args.max_steps, seed=args.seed)
    out = Path(args.out or f"models/finetune-{Path(dataset.name).stem}")
    done = finetune_from_gold(retriever, dataset, settings, str(out), cv=not args.no_cv, folds=args.folds,
                              progress=say, tracking=None if args.no_track else command_tracking(args))
    use = f"lab eval --dataset {args.dataset} --model st:{out}"
    if args.json:
        print_json({"model": done.model_id, "base": done.base, "questions": done.questions, "triplets": done.triplets,
                    "train_s": done.train_s, "cross_validation": done.judged.to_dict() if done.judged else None,
                    "run_id": done.run_id, "use": use})
        return 0
    if done.judged is not None:
        _print_judged(done.judged)
    print(f"-> {done.model_id}")
    print(f"   fine-tuned from {done.base} on {done.triplets} triplets of {done.questions} questions in "
          f"{done.train_s:.0f} s" + (f"; MLflow run {done.run_id}" if done.run_id else ""))
    print(f"   use it (every memory is embedded again by it): {use}")
    return 0


def add_adapt_parser(sub: argparse._SubParsersAction) -> None:
    from lab.config.adapt import AdaptConfig, FinetuneConfig  # light: the declarations only
    from lab.fields import rule

    def declared(name: str) -> str:
        r = rule(AdaptConfig, name)
        return f"{r.doc} (default {getattr(AdaptConfig, name)})"

    def tuned(name: str) -> str:
        r = rule(FinetuneConfig, name)
        return f"{r.doc} (default {getattr(FinetuneConfig, name)})"

    p = sub.add_parser("adapt", help="learn from a dataset's gold: a query adapter for the store's embedding model "
                                     "(adapter:PATH), or the model itself fine-tuned (--kind finetune, st:PATH); "
                                     "judged on held-out namespaces first")
    p.add_argument("--dataset", required=True, help="locomo, longmemeval-s-dev, scifact, demo, a golden .yaml, a LoCoMo "
                                                    "or LongMemEval .json or a BEIR folder")
    p.add_argument("--granularity", choices=["turn", "session"], default=None,
                   help="a LongMemEval file's memories: turns (default) or sessions")
    p.add_argument("--kind", choices=[*rule(AdaptConfig, "kind").choices, "finetune"], default=AdaptConfig.kind,
                   help=declared("kind") + "; finetune: train the store's model itself (every memory embedded again)")
    for name, kind in (("rank", int), ("l2", float), ("steps", int), ("temperature", float), ("seed", int)):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=getattr(AdaptConfig, name),
                       help=declared(name))
    p.add_argument("--learning-rate", dest="learning_rate", type=float, default=None,
                   help=f"adapter: {declared('learning_rate')}; finetune: {tuned('learning_rate')}")
    for name, kind in (("epochs", int), ("batch_size", int), ("hard_negatives", int), ("max_steps", int)):
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=kind, default=getattr(FinetuneConfig, name),
                       help="finetune: " + tuned(name))
    p.add_argument("--preset", default="lab", help="the configuration whose store is read (its context turns)")
    p.add_argument("--config", help="a candidate file whose store is read instead of a preset's")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--split", default="train", help="BEIR qrels split")
    p.add_argument("--no-cv", action="store_true", help="skip the held-out judgement")
    p.add_argument("--folds", type=int, default=5,
                   help="folds when the questions are all in one namespace (else one fold per namespace; default 5)")
    p.add_argument("--out", default=None, help="the folder to write (default models/adapter-DATASET, or "
                                               "models/finetune-DATASET for --kind finetune)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--no-track", action="store_true", help="do not log the training to MLflow")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_adapt)


def cmd_gate(args: argparse.Namespace) -> int:
    from lab.gate.checks import load_gate
    from lab.gate.run import JudgeOptions, report_table, run_gate

    gate = load_gate(args.config)
    ws = command_workspace(args.datasets, args.tracking_uri)
    judging = JudgeOptions(datasets=ws.datasets_root, project=ws.project, root=ws.eval_root, embeddings=ws.embed_cache,
                           progress=not args.quiet, rebaseline=args.rebaseline)
    report = run_gate(gate, args.candidate, judging=judging, out_root=args.out, track=not args.no_track,
                      uri=command_tracking(args), export=args.export, store=args.store, query_model=args.query_model)
    if args.json:
        print_json(report.as_dict())
    else:
        print(report_table(report))
        print(f"report: {report.folder / 'gate.json'}" + (f"   MLflow run {report.run_id}" if report.run_id else ""))
        if report.export:
            again = "; the same bundle as before, not registered again" if report.export.reused else ""
            print(f"exported: {report.export.uri} (version {report.export.version}{again}), "
                  f"bundle {report.export.bundle}")
            from lab.track import env_line

            print(f"from another folder: {env_line(command_tracking(args))}")
        elif report.refused:
            print("export refused: NO-GO; failed checks:")
            for line in report.refused:
                print(f"  - {line}")
    return 0 if report.verdict == "GO" else 1


def add_gate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("gate", help="GO/NO-GO of a candidate against the gold-standard gate; "
                                    "exit 0 GO, 1 NO-GO, 2 invalid input, 3 not found")
    p.add_argument("--config", default="goldens/gate.yaml", help="the gate file (default goldens/gate.yaml)")
    p.add_argument("--candidate", default="lab", help="a preset name or a SearchConfig file (e.g. a sweep's best.yaml)")
    p.add_argument("--export", action="store_true", help="on GO: register the model as @champion and write the bundle")
    p.add_argument("--store", default=None, help="export: the store the served module reads (default: the first suite's)")
    p.add_argument("--query-model", dest="query_model", default=None,
                   help="encode the candidate's queries with this model of the store's space, e.g. a query adapter "
                        "adapter:models/adapter-locomo (`lab adapt`); the exported bundle carries it")
    p.add_argument("--rebaseline", action="store_true",
                   help="when a suite's gold or corpus changed since the champion was judged: compare against the "
                        "champion re-evaluated on the new data (without it the gate refuses, naming both fingerprints)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--out", default="runs/gate", help="folder for gate reports (default runs/gate)")
    p.add_argument("--tracking-uri", default=None)
    p.add_argument("--no-track", action="store_true")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_gate)
