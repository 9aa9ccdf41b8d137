"""`lab init | ingest | stats | store compact | encoders | check | repair`: creating, filling, inspecting and mending a store."""
from __future__ import annotations

import argparse
from pathlib import Path

from lab.cli.common import command_engine, engine_args, print_json, print_stats, store_arg, store_settings

def demo_data() -> Path:
    """The embedded demo data, in the workspace's project."""
    from lab.workspace import current

    return current().project / "datasets" / "demo"
DEMO_QUERIES = (
    ("atlas", "why did the billing service fail in February?"),
    ("household", "when is the next dentist appointment?"),
)


def cmd_init(args: argparse.Namespace) -> int:
    from lab.config import ChunkConfig, EmbedConfig, SaveConfig
    from lab.errors import ConflictError
    from lab.pipeline import Pipeline
    from lab.store.layout import info_path

    config = SaveConfig(
        chunk=ChunkConfig(size=args.chunk_size, overlap=args.chunk_overlap),
        embed=EmbedConfig(model=args.model),
    )
    if info_path(args.store).exists():
        raise ConflictError(f"a store exists already at {args.store}")
    with Pipeline.open(args.store, config, create=True, settings=store_settings()) as pipe:
        print(f"created store at {args.store} (model {pipe.embedder.model_id}, version {pipe.store.version()})")
    return 0


def cmd_ingest(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from lab.errors import NotFoundError
    from lab.pipeline import Pipeline
    from lab.store.layout import is_store

    if not Path(args.path).exists():  # before a store is opened or created
        raise NotFoundError(f"input not found: {args.path}")
    new_store = args.create and not is_store(args.store, store_settings())
    try:
        with command_engine(args) as engine, Pipeline.open(args.store, create=args.create, engine=engine,
                                                           settings=store_settings()) as pipe:
            report = pipe.ingest(args.path, args.namespace, progress=not args.quiet)
    except BaseException:
        if new_store:  # a refused ingest into a store this command created leaves no empty store behind
            shutil.rmtree(args.store, ignore_errors=True)
        raise
    data = report.to_dict()
    if args.json:
        print_json(data)
    else:
        print(
            f"ingested {args.path}: {data['created']} new, {data['duplicates']} already stored, "
            f"{data['edges']} edges, {data['chunks']} chunks, {data['embedded']} embedded, "
            f"{data['seconds']} s; store version {data['version']}"
        )
    return 0


def cmd_encoders(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from lab.config import ENCODERS
    from lab.errors import ValidationError
    from lab.pipeline import Pipeline
    from lab.store.store import Store

    recorded = Store.open(args.store, read_only=True, settings=store_settings()).recorded_config()
    models = [m for m in recorded.index.models if m not in (args.remove or [])]
    models += [m for m in (args.add or []) if m not in models]
    unknown = [m for m in (args.add or []) + (args.remove or []) if m not in ENCODERS]
    if unknown:
        raise ValidationError(f"unknown encoder(s) {unknown}; known: {list(ENCODERS)} (`lab models`)")
    config = replace(recorded, index=replace(recorded.index, models=tuple(models)))
    with command_engine(args) as engine, Pipeline.open(args.store, config, settings=store_settings()) as pipe:
        chunks = pipe.embed_encoders(progress=not args.quiet, engine=engine)
    lists = [ENCODERS[m] for m in models]
    print(f"store {args.store} carries {', '.join(models) or 'no extra encoders'}"
          + (f": {sum(chunks.values())} chunks in {len(chunks)} namespaces embedded by each; "
             f"rank them with encoders: {lists} in a search config" if models else ""))
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    from lab.store.store import Store

    store = Store.open(args.store, read_only=True, settings=store_settings())
    if args.namespace is not None:
        store.require_namespace(args.namespace)
    stats = store.stats(args.namespace)
    stats["files"] = store.file_counts()
    if args.json:
        print_json(stats)
    else:
        print_stats(stats)
        print("files           " + ", ".join(f"{k}={v}" for k, v in stats["files"].items()))
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    from lab.pipeline import Pipeline

    with Pipeline.open(args.store, settings=store_settings()) as pipe:
        before = pipe.store.file_counts()
        report = pipe.compact(vacuum_hours=args.vacuum_hours)
        after = pipe.store.file_counts()
    if args.json:
        print_json({"before": before, "after": after, "report": report})
    else:
        for table in before:
            print(f"{table:<11} files {before[table]:>5} -> {after[table]:>5}")
        print(f"stale chunks removed: {report['stale_chunks_removed']}; second copies removed: "
              f"{report['duplicate_chunks_removed']}; indexes rebuilt: "
              f"{', '.join(report['indexes_rebuilt']) or '-'}; kept (few deleted chunks): "
              f"{', '.join(report['indexes_kept']) or '-'}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from lab.write.check import check_store

    report = check_store(args.store, store_settings())
    if args.json:
        print_json(report.to_dict())
    else:
        for where, what in report.checked.items():
            print(f"ok      {where}: {what}")
        for problem in report.problems:
            print(problem)
        print(f"{len(report.errors)} error(s), {len(report.problems) - len(report.errors)} warning(s)"
              + ("; `lab store repair` mends what the Delta log allows" if report.errors else ""))
    return 5 if report.errors else 0  # 5: the store cannot be read as it is (StoreError's code)


def cmd_repair(args: argparse.Namespace) -> int:
    from lab.pipeline import Pipeline
    from lab.store.delta_log import TORN_FOLDER
    from lab.store.repair import recover_torn_commits
    from lab.write.check import check_store

    torn = recover_torn_commits(args.store, settings=store_settings())  # before opening: a torn log file stops any open
    with Pipeline.open(args.store, settings=store_settings()) as pipe:
        done = pipe.repair()
    done["torn_commits_removed"] = torn
    done["check"] = check_store(args.store, store_settings()).to_dict()
    if args.json:
        print_json(done)
    else:
        for name in torn:
            print(f"table {name.split('/')[0]}: took out the torn log file {name.split('/')[1]} (kept in "
                  f"{TORN_FOLDER}/); the table is back at the version before it and that commit's changes are gone "
                  "(cut off while written, no client was told it landed; damaged on disk later, it may have been "
                  "acknowledged: compare with a backup)")
        for table, r in done["files_dropped"].items():
            print(f"table {table}: took out damaged file(s) {', '.join(r['files'])} (their rows are lost; "
                  f"now at version {r['version']})")
        if done.get("namespaces_relisted"):
            print(f"namespaces listed again (they hold memories; their rows were lost): {done['namespaces_relisted']}")
        if done.get("stale_chunks_removed") or done.get("duplicate_chunks_removed"):
            print(f"orphan chunks removed: {done['stale_chunks_removed']}; second copies removed: "
                  f"{done['duplicate_chunks_removed']}")
        if done.get("memories_rechunked"):
            print(f"memories chunked and embedded again: {done['memories_rechunked']}")
        print(f"indexes rebuilt: {', '.join(done['indexes_rebuilt']) or '-'}; removed: {', '.join(done['removed']) or '-'}")
        left = [p for p in done["check"]["problems"] if p["severity"] == "error"]
        for p in left:
            print(f"still wrong: {p['where']}: {p['what']}")
        print("store checks clean" if not left else f"{len(left)} problem(s) left")
    return 5 if not done["check"]["ok"] else 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="create an empty store")
    store_arg(p)
    p.add_argument("--model", default="all-MiniLM-L6-v2",
                   help="embedding model: an id or alias from `lab models` (minilm, minilm-int8, e5), or st:PATH / onnx:PATH")
    p.add_argument("--chunk-size", type=int, default=350)
    p.add_argument("--chunk-overlap", type=int, default=150)
    p.set_defaults(func=cmd_init)

    p = sub.add_parser("ingest", help="validate and save a memories file or folder (JSONL/Parquet)")
    p.add_argument("path", help="memories .jsonl/.parquet, or a folder with memories.* and edges.*")
    store_arg(p)
    p.add_argument("--namespace", help="namespace for records that name none")
    p.add_argument("--create", action="store_true", help="create the store if it does not exist")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true")
    engine_args(p)
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("stats", help="store statistics")
    store_arg(p)
    p.add_argument("--namespace")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("store", help="store maintenance")
    store_sub = p.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    c = store_sub.add_parser("compact", help="merge small files, drop stale chunks, rebuild indexes")
    store_arg(c)
    c.add_argument("--vacuum-hours", type=float, default=None,
                   help="also delete files only versions older than this need (breaks older pins)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_compact)
    c = store_sub.add_parser("encoders", help="add or remove extra encoders (index.models); embeds only the new ones")
    store_arg(c)
    c.add_argument("--add", nargs="+", metavar="MODEL", help="encoders to carry: e5, e5-sparse, minilm")
    c.add_argument("--remove", nargs="+", metavar="MODEL")
    c.add_argument("--quiet", action="store_true")
    engine_args(c)
    c.set_defaults(func=cmd_encoders)
    c = store_sub.add_parser("check", help="verify every table and index; exit 5 when something is wrong")
    store_arg(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_check)
    c = store_sub.add_parser("repair", help="take damaged files out of their tables, re-chunk, rebuild indexes")
    store_arg(c)
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_repair)
