"""`lab datasets`: the datasets lab knows, where it looked, whether they are there, and how to place them."""
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
    p = sub.add_parser("datasets", help="the known datasets: where lab looks, found or not, source, licence, how to place them")
    p.add_argument("--datasets", default=None, help="datasets root (env LAB_DATASETS; default ../shared/datasets)")
    p.add_argument("--no-verify", action="store_true", help="skip the SHA-256 check of the files")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_datasets)
