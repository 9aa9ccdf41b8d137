"""`lab datasets`: the datasets lab knows, where it looked, whether they are there, and how to place
them; `lab datasets export`: one of them in a standard IR format (BEIR, TREC)."""
from __future__ import annotations

import argparse

from lab.cli.common import command_workspace, print_json


def cmd_datasets(args: argparse.Namespace) -> int:
    from lab.eval.catalog import survey

    ws = command_workspace(args.datasets)
    entries = survey(ws.datasets_root, verify=not args.no_verify, project=ws.project)
    if args.json:
        print_json(entries)
        return 0
    for e in entries:
        print(f"{e['name']:<8} {e['status'].upper():<8} {e['title']}")
        print(f"         looked in {e['where']}")
        for f in e["files"]:
            if not f["present"]:
                state = "missing" + (" (optional)" if e["status"] == "found" else "")
            elif f["matches"] is None:
                state = "present (not verified)"
            else:
                state = "sha256 ok" if f["matches"] else f"sha256 {f['sha256'][:16]}... differs from the measured file"
            expected = f"expected {f['sha256_expected'][:16]}..." if f["sha256_expected"] else "no checksum published"
            print(f"         {f['path']}: {state} ({expected})")
        print(f"         source: {e['source']}")
        print(f"         licence: {e['licence']}")
        if e["status"] != "found" and e["steps"]:
            print("         to place it:")
            for i, step in enumerate(e["steps"], 1):
                print(f"           {i}. {step}")
    missing = [e["name"] for e in entries if e["status"] == "missing"]
    if missing:
        print(f"\nmissing: {', '.join(missing)}. The datasets root is --datasets, else $LAB_DATASETS, "
              "else ../shared/datasets beside the project; nothing is downloaded at run time.")
    return 0


def cmd_datasets_export(args: argparse.Namespace) -> int:
    from lab.eval.ir_export import export_dataset

    dataset = _load(args, args.name)
    done = export_dataset(dataset, args.out, args.format)
    if args.json:
        print_json(done)
        return 0
    print(f"{done['dataset']} as {done['format']}: {done['documents']} documents in {done['namespaces']} namespace(s), "
          f"{done['queries']} queries, {done['qrels']} relevance judgements -> {done['out']}")
    print(f"  files: {', '.join(done['files'])}; each query is asked of its own namespace (metadata.namespace)")
    return 0


def cmd_datasets_check(args: argparse.Namespace) -> int:
    """Exit 0 when the file loads and its gold is whole, 1 when it loads with problems (named), 2
    when it cannot be read as a dataset (the loader's error, naming the line and the field)."""
    from lab.eval.dataset_check import describe_dataset

    dataset = _load(args, args.file)
    d = describe_dataset(dataset, args.file)
    if args.json:
        print_json(d)
        return 1 if d["problems"] else 0
    print(f"{'FAIL' if d['problems'] else 'OK'} {d['file']}: {d['format']} dataset {d['name']!r} (read from {d['read']})")
    print(f"  memories   {d['memories']} in {d['memory_namespaces']} namespace(s), {d['edges']} edge(s)")
    cats = ", ".join(f"{c} {n}" for c, n in d["by_category"].items())
    print(f"  questions  {d['questions']} in {d['namespaces']} namespace(s) ({cats}); {d['unanswerable']} unanswerable")
    g = d["gold_per_question"]
    print(f"  gold       {g['min']}-{g['max']} memory id(s) per question (mean {g['mean']})")
    now = (f"{d['reference_times']} namespace(s) with their own" if d["reference_times"] else d["reference_time"]
           or "not set (time signals use the moment of the search)")
    print(f"  now        {now}")
    for line in d["loader"]:
        print(f"  loader     {line}")
    for line in d["problems"]:
        print(f"  problem    {line}")
    return 1 if d["problems"] else 0


def _load(args: argparse.Namespace, name: str):
    """The dataset ``name`` as --granularity, --split and --datasets say (export and check alike)."""
    from lab.eval.dataset_ref import DatasetOptions, DatasetRef

    ws = command_workspace(args.datasets)
    return DatasetRef(name, split=args.split, options=DatasetOptions(granularity=args.granularity)).at(
        ws.datasets_root, ws.project).load()


def cmd_goldens_check(args: argparse.Namespace) -> int:
    from lab.eval.goldens import describe_golden

    d = describe_golden(args.file, command_workspace().project)
    if args.json:
        print_json(d)
        return 0
    print(f"OK {d['file']}: gold set {d['name']!r}")
    print(f"  memories   {d['memories']} in {len(d['namespaces'])} namespace(s) ({', '.join(d['namespaces'])}), "
          f"{d['edges']} edge(s), from {d['data']}")
    cats = ", ".join(f"{c} {n}" for c, n in d["by_category"].items())
    e = d["expected_per_question"]
    print(f"  questions  {d['questions']} ({cats})")
    print(f"  expected   {e['min']}-{e['max']} memory id(s) per question (mean {e['mean']}); "
          f"{d['save_then_search']} save-then-search, {d['stale']} stale id(s)")
    print(f"  now        {d['reference_time'] or 'not set (time signals use the moment of the search)'}")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    g = sub.add_parser("goldens", help="gold question sets: check one")
    gsub = g.add_subparsers(dest="goldens_command", required=True)
    c = gsub.add_parser("check", help="validate a golden .yaml against its memories and say what it holds")
    c.add_argument("file", help="the golden .yaml (its dataset: a folder relative to it, or a name in datasets/)")
    c.add_argument("--json", action="store_true")
    c.set_defaults(func=cmd_goldens_check)
    p = sub.add_parser("datasets", help="the known datasets: where lab looks, found or not, source, licence, how to place "
                                        "them; `lab datasets export` writes one as BEIR or TREC files")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of the files")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_datasets)
    dsub = p.add_subparsers(dest="datasets_command")
    e = dsub.add_parser("export", help="a dataset lab reads as a BEIR folder or TREC files (qrels, topics, corpus), "
                                       "for MTEB, ranx, pyserini or trec_eval")
    e.add_argument("name", help="locomo, longmemeval-s-dev, scifact, demo, a golden .yaml, a LoCoMo or LongMemEval "
                                ".json or a BEIR folder")
    e.add_argument("--format", required=True, choices=["beir", "trec"],
                   help="beir: corpus.jsonl, queries.jsonl, qrels/test.tsv; trec: qrels.trec, topics.tsv, corpus.jsonl")
    e.add_argument("--out", required=True, help="the folder to write (new or empty)")
    _loading_args(e)
    e.set_defaults(func=cmd_datasets_export)
    c = dsub.add_parser("check", help="any dataset file lab reads, checked: what it holds, what the loader "
                                      "repaired or dropped, gold outside its question's namespace (exit 1)")
    c.add_argument("file", help="a LoCoMo or LongMemEval .json (.json.gz), a conversations .jsonl, a golden .yaml, "
                                "a BEIR folder, or a name: locomo, longmemeval-s-dev, scifact, demo")
    _loading_args(c)
    c.set_defaults(func=cmd_datasets_check)


def _loading_args(p: argparse.ArgumentParser) -> None:
    """How a dataset named on the command line is loaded (export and check read it alike)."""
    p.add_argument("--granularity", choices=["turn", "session"], default=None,
                   help="a LongMemEval file's memories: turns (default) or sessions")
    p.add_argument("--split", default="train", help="a BEIR dataset's qrels split (default train)")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--json", action="store_true")
