"""The `lab` command: one subcommand per stage; heavy imports happen inside each command."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Sequence

DEFAULT_STORE = ".lab/store"
DEMO_DATA = Path(__file__).resolve().parent.parent / "datasets" / "demo"


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store", default=os.environ.get("LAB_STORE", DEFAULT_STORE),
        help=f"store folder (env LAB_STORE; default {DEFAULT_STORE})",
    )


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def _open(args: argparse.Namespace, *, create: bool = False):
    from lab.pipeline import Pipeline

    return Pipeline.open(args.store, create=create)


def _print_stats(stats: dict[str, Any]) -> None:
    print(f"store version   {stats['version']}  (memories.chunks.edges.access)")
    print(f"embedding model {stats['embed_model']}")
    print(f"namespaces      {', '.join(stats['namespaces']) or '-'}")
    print(f"memories        {stats['memories']} ({stats['valid']} valid, {stats['pinned']} pinned)")
    print(f"chunks          {stats['chunks']}")
    print(f"edges           {stats['edges']}")
    for key in ("by_namespace", "by_type", "by_relation"):
        if stats.get(key):
            print(f"{key.replace('_', ' '):<15} " + ", ".join(f"{k}={v}" for k, v in stats[key].items()))
    if stats.get("created_from"):
        print(f"time span       {stats['created_from'][:19]} .. {stats['created_to'][:19]}")


def _print_hits(hits: list, width: int = 80, explain: bool = False) -> None:
    if not hits:
        print("(no results)")
        return
    print(f"{'#':>2}  {'score':>7}  {'memory':<18} {'type':<9} text")
    for hit in hits:
        text = " ".join(hit.content.split())
        if len(text) > width:
            text = text[: width - 1] + "…"
        flags = (" [superseded]" if hit.superseded else "") + (
            f" [contradicts {', '.join(hit.contradicts)}]" if hit.contradicts else "")
        print(f"{hit.rank:>2}  {hit.score:7.4f}  {hit.memory_id:<18} {hit.type:<9} {text}{flags}")
        if explain:
            for signal, d in sorted(hit.signals.items()):
                without = ""
                if hit.counterfactual is not None:
                    alt = hit.counterfactual.get(signal)
                    without = f"  without it: rank {alt if alt is not None else '-'}"
                print(f"{'':>12}{signal:<10} rank {d.rank:>3}  score {d.score:9.4f}  adds {d.contribution:.4f}{without}")


def cmd_init(args: argparse.Namespace) -> int:
    from lab.config import ChunkConfig, EmbedConfig, SaveConfig
    from lab.pipeline import Pipeline

    config = SaveConfig(
        chunk=ChunkConfig(size=args.chunk_size, overlap=args.chunk_overlap),
        embed=EmbedConfig(model=args.model),
    )
    if (Path(args.store) / "lab-store.json").exists():
        from lab.errors import ConflictError

        raise ConflictError(f"a store exists already at {args.store}")
    pipe = Pipeline.open(args.store, config, create=True)
    print(f"created store at {args.store} (model {pipe.embedder.model_id}, version {pipe.store.version()})")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    from lab.pipeline import Pipeline

    pipe = Pipeline.open(args.store, create=args.create)
    with pipe:
        report = pipe.ingest(args.path, args.namespace, progress=not args.quiet)
    data = report.to_dict()
    if args.json:
        _print_json(data)
    else:
        print(
            f"ingested {args.path}: {data['created']} new, {data['duplicates']} already stored, "
            f"{data['edges']} edges, {data['chunks']} chunks, {data['embedded']} embedded, "
            f"{data['seconds']} s; store version {data['version']}"
        )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    pipe = _open(args)
    stats = pipe.stats(args.namespace)
    stats["files"] = pipe.store.file_counts()
    if args.json:
        _print_json(stats)
    else:
        _print_stats(stats)
        print("files           " + ", ".join(f"{k}={v}" for k, v in stats["files"].items()))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with _open(args) as pipe:
        before = pipe.store.file_counts()
        report = pipe.compact(vacuum_hours=args.vacuum_hours)
        after = pipe.store.file_counts()
    if args.json:
        _print_json({"before": before, "after": after, "report": report})
    else:
        for table in before:
            print(f"{table:<11} files {before[table]:>5} -> {after[table]:>5}")
        print(f"stale chunks removed: {report['stale_chunks_removed']}; indexes rebuilt: "
              f"{', '.join(report['indexes_rebuilt']) or '-'}")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _open(args) as pipe:
        hits = pipe.search(args.query, args.namespace, k=args.k, preset=args.preset, explain=args.explain)
    if args.json:
        _print_json([h.to_dict() for h in hits])
    else:
        _print_hits(hits, explain=args.explain)
    return 0


def cmd_context(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from lab.config import AssembleConfig, load_config

    acfg = load_config(AssembleConfig, args.assemble) if args.assemble else AssembleConfig()
    changes = {k: v for k, v in (("budget", args.budget), ("counter", args.counter),
                                  ("neighbours", args.neighbours)) if v is not None}
    if args.ratios:
        try:
            critical, middle, recency = (float(x) for x in args.ratios.split("/"))
        except ValueError:
            from lab.errors import ValidationError

            raise ValidationError(f"--ratios must be CRITICAL/MIDDLE/RECENCY, e.g. 15/65/20, got {args.ratios!r}")
        total = critical + middle + recency
        scale = 100.0 if abs(total - 100.0) < 1e-6 else 1.0  # 15/65/20 or 0.15/0.65/0.2
        changes.update(critical_ratio=critical / scale, middle_ratio=middle / scale, recency_ratio=recency / scale)
    acfg = replace(acfg, **changes)
    with _open(args) as pipe:
        ctx = pipe.context(args.query, args.namespace, preset=args.preset, assemble=acfg, candidates=args.candidates)
    if args.format == "json":
        _print_json(ctx.to_dict())
        return 0
    text = ctx.render(args.format)
    if text:
        print(text)
    zones = "  ".join(f"{z} {u.used}/{u.available}" for z, u in ctx.zones.items())
    print(f"\n({len(ctx.items)} items, {ctx.used}/{ctx.budget} tokens [{ctx.counter}]; {zones}; "
          f"{len(ctx.skipped)} skipped)", file=sys.stderr)
    return 0


def _eval_one(args: argparse.Namespace, dataset, pipe, config, out_root: Path):
    from dataclasses import replace

    from lab.config import AssembleConfig
    from lab.eval.report import write_run
    from lab.eval.runner import EvalOptions, evaluate

    options = EvalOptions(ks=tuple(args.k), respect_top_k=args.respect_top_k, credit_derived=args.credit_derived,
                          budget=args.budget or None, assemble=replace(AssembleConfig(), counter=args.counter),
                          ragas=args.ragas)
    from lab.config import to_dict

    result = evaluate(pipe, dataset, config, options)
    result.info["chunk"] = to_dict(pipe.config.chunk)  # the index-time configuration measured
    # the folder names what was measured beyond the defaults, so runs of other settings never overwrite it
    extras = "".join(tag for flag, tag in ((getattr(args, "observations", False), "+obs"),
                                           (getattr(args, "summaries", False), "+sum"),
                                           (args.credit_derived, "+credit")) if flag)
    out = out_root / f"{dataset.name}{_index_suffix(pipe.config.chunk)}{extras}-{config.name}"
    write_run(result, dataset.qrels, out)
    return result, out


def _save_config(context_turns: int | None = None, time_in_text: bool = False):
    from lab.config import ChunkConfig, SaveConfig

    turns = ChunkConfig().context_turns if context_turns is None else context_turns
    return SaveConfig(chunk=ChunkConfig(context_turns=turns, time_in_text=time_in_text))


def _index_suffix(chunk) -> str:
    """Run folder suffix naming the index-time levers that differ from the default (none: no suffix)."""
    from lab.config import ChunkConfig

    default = ChunkConfig()
    return ((f"+ctx{chunk.context_turns}" if chunk.context_turns != default.context_turns else "")
            + ("+time" if chunk.time_in_text != default.time_in_text else ""))


def cmd_eval(args: argparse.Namespace) -> int:
    from lab.eval.goldens import load_dataset
    from lab.eval.report import check, config_from, load_regressions
    from lab.eval.runner import eval_pipeline

    out_root = Path(args.out)
    if args.check:
        conditions = load_regressions(args.check)
        failed = 0
        for c in conditions:
            dataset = load_dataset(c["dataset"], args.datasets, split=c.get("split", "train"),
                                   observations=c.get("observations", False), summaries=c.get("summaries", False))
            turns = c.get("context_turns")
            pipe = eval_pipeline(dataset, _save_config(None if turns is None else int(turns), bool(c.get("time_in_text", False))),
                                 progress=not args.quiet)
            args.k = c.get("ks", args.k)
            args.observations, args.summaries = c.get("observations", False), c.get("summaries", False)
            result, _ = _eval_one(args, dataset, pipe, config_from(c["preset"], c.get("config")), out_root)
            status, notes = check(result.metrics["metrics"], c["expected"], float(c.get("tolerance", 0.005)),
                                  float(c.get("okish", 0.02)))
            failed += status == "FAIL"
            print(f"{status:<6} {c['name']}: " + "; ".join(notes))
        return 1 if failed else 0
    if not args.dataset:
        from lab.errors import ValidationError

        raise ValidationError("--dataset is required (locomo, scifact, demo, a golden .yaml or a BEIR folder)")
    dataset = load_dataset(args.dataset, args.datasets, split=args.split, observations=args.observations,
                           summaries=args.summaries)
    pipe = eval_pipeline(dataset, _save_config(args.context_turns, args.time_in_text), progress=not args.quiet)
    configs = [config_from(p, None) for p in args.preset] if args.preset else [config_from(None, args.config)]
    for config in configs:
        result, out = _eval_one(args, dataset, pipe, config, out_root)
        m = result.metrics["metrics"]
        if args.json:
            _print_json({"run": str(out), **result.metrics})
            continue
        head = "  ".join(f"{k} {m[k]:.4f}" for k in ("recall@5", "recall@10", "ndcg@10", "mrr") if k in m)
        print(f"{dataset.name:<10} {config.name:<12} {result.metrics['questions']:>5} q  {head}  -> {out}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from lab.eval.report import compare

    table = compare(args.run_a, args.run_b, args.metric or None)
    if args.json:
        _print_json(table.to_dicts())
        return 0
    print(f"{'metric':<12} {'A':>8} {'B':>8} {'B-A':>8}  {'95% CI of B-A':<19} {'p':>7}")
    for r in table.iter_rows(named=True):
        print(f"{r['metric']:<12} {r['mean_a']:8.4f} {r['mean_b']:8.4f} {r['delta']:+8.4f}  "
              f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}] {r['p_value']:7.4f}")
    return 0


def cmd_presets(args: argparse.Namespace) -> int:
    from lab.config import to_yaml
    from lab.search.presets import PRESETS, preset

    if args.name:
        print(to_yaml(preset(args.name)), end="")
        return 0
    for name, cfg in PRESETS.items():
        print(f"{name:<12} {cfg.description}")
    return 0


DEMO_QUERIES = (
    ("atlas", "why did the billing service fail in February?"),
    ("household", "when is the next dentist appointment?"),
)


def cmd_demo(args: argparse.Namespace) -> int:
    """The main job on the embedded default: store, ingest the demo set, stats, a sample search."""
    from lab.pipeline import Pipeline

    store = Path(args.store)
    fresh = not (store / "lab-store.json").exists()
    print(f"{'creating' if fresh else 'reusing'} store at {store}")
    with Pipeline.open(store, create=True) as pipe:
        report = pipe.ingest(args.data, progress=True)
        data = report.to_dict()
        print(
            f"ingested {args.data}: {data['created']} new, {data['duplicates']} already stored, "
            f"{data['edges']} new edges, {data['embedded']} texts embedded in {data['seconds']} s\n"
        )
        _print_stats(pipe.stats())
        for namespace, query in DEMO_QUERIES:
            if namespace not in pipe.store.namespaces():
                continue
            print(f"\nsearch [{namespace}] {query!r}")
            _print_hits(pipe.search(query, namespace, k=args.k))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description="Evaluate and tune memory retrieval for AI agents.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("demo", help="create a store, ingest the demo memories, print stats and sample searches")
    p.add_argument("--store", default=os.environ.get("LAB_STORE", ".lab/demo"), help="store folder (default .lab/demo)")
    p.add_argument("--data", default=str(DEMO_DATA), help="memories file or folder (default: datasets/demo)")
    p.add_argument("--k", type=int, default=5)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("init", help="create an empty store")
    _store_arg(p)
    p.add_argument("--model", default="all-MiniLM-L6-v2", help="embedding model (all-MiniLM-L6-v2 or fake-hash-256)")
    p.add_argument("--chunk-size", type=int, default=350)
    p.add_argument("--chunk-overlap", type=int, default=150)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("ingest", help="validate and save a memories file or folder (JSONL/Parquet)")
    p.add_argument("path", help="memories .jsonl/.parquet, or a folder with memories.* and edges.*")
    _store_arg(p)
    p.add_argument("--namespace", help="namespace for records that name none")
    p.add_argument("--create", action="store_true", help="create the store if it does not exist")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("stats", help="store statistics")
    _store_arg(p)
    p.add_argument("--namespace")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("store", help="store maintenance")
    store_sub = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    c = store_sub.add_parser("compact", help="merge small files, drop stale chunks, rebuild indexes")
    _store_arg(c)
    c.add_argument("--vacuum-hours", type=float, default=None,
                   help="also delete files only versions older than this need (breaks older pins)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compact)

    p = sub.add_parser("search", help="search a namespace")
    p.add_argument("query")
    _store_arg(p)
    p.add_argument("--namespace", required=True)
    p.add_argument("--preset", default=None, help="preset name or a .yaml/.json SearchConfig (default: lab)")
    p.add_argument("--k", type=int, default=None, help="results to return (default: the preset's top_k)")
    p.add_argument("--explain", action="store_true", help="per-signal ranks, scores, contributions, counterfactual ranks")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    p = sub.add_parser("context", help="search, then assemble a zoned context within a token budget")
    p.add_argument("query")
    _store_arg(p)
    p.add_argument("--namespace", required=True)
    p.add_argument("--budget", type=int, default=None, help="token budget (default 2000)")
    p.add_argument("--preset", default=None, help="search preset name or a .yaml/.json SearchConfig (default: lab)")
    p.add_argument("--assemble", default=None, help="a .yaml/.json AssembleConfig")
    p.add_argument("--ratios", default=None, help="zone ratios CRITICAL/MIDDLE/RECENCY, e.g. 15/65/20")
    p.add_argument("--counter", choices=["estimate", "exact"], default=None, help="token counter (default estimate)")
    p.add_argument("--neighbours", type=int, default=None, help="adjacent turns of the same episode to add")
    p.add_argument("--candidates", type=int, default=50, help="fused results offered to assembly")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("eval", help="evaluate presets on a dataset; writes run folders")
    p.add_argument("--dataset", help="locomo, scifact, demo, a golden .yaml, a LoCoMo .json or a BEIR folder")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--split", default="train", help="BEIR qrels split")
    p.add_argument("--preset", nargs="+", help="one or more preset names")
    p.add_argument("--config", help="a .yaml/.json SearchConfig instead of a preset")
    p.add_argument("--k", type=int, nargs="+", default=[1, 5, 10, 20, 50, 100], help="cutoffs")
    p.add_argument("--respect-top-k", action="store_true", help="cut at each preset's own top_k, as served")
    p.add_argument("--observations", action="store_true", help="LoCoMo: add observations as derived facts")
    p.add_argument("--summaries", action="store_true", help="LoCoMo: add session summaries as memories")
    p.add_argument("--credit-derived", action="store_true", help="a hit on a derived fact counts for its source")
    p.add_argument("--context-turns", type=int, default=None,
                   help="index time: index each memory with up to N earlier turns of its episode (default 2; 0: off)")
    p.add_argument("--time-in-text", action="store_true", help="index time: index each memory with its date")
    p.add_argument("--budget", type=int, default=2000, help="context metrics at this token budget (0: off)")
    p.add_argument("--counter", choices=["estimate", "exact"], default="estimate")
    p.add_argument("--ragas", action="store_true", help="also report ragas's LLM-free context metrics")
    p.add_argument("--check", metavar="REGRESSIONS_YAML", help="run every condition; OK / OKISH / FAIL, exit 1 on FAIL")
    p.add_argument("--out", default="runs", help="folder for run folders (default runs/)")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("compare", help="metric deltas between two runs, with CIs and p-values")
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--metric", nargs="+", help="metrics to compare (default: the headline ones)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("presets", help="list the search presets, or print one as YAML")
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_presets)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from lab import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    from lab.errors import LabError

    try:
        return args.func(args)
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
