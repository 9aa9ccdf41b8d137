"""`lab models`: the embedding models lab can use here, and what each needs."""
from __future__ import annotations

import argparse

from lab.cli.common import print_json


def cmd_models(args: argparse.Namespace) -> int:
    from lab.embed.survey import survey

    entries = survey(measure=args.measure)
    if args.json:
        print_json(entries)
        return 0
    speed = "  query ms  passages/s" if args.measure else ""
    print(f"{'model':<27} {'alias':<12} {'backend':<21} {'dim':>4} {'tokens':>6} {'MB':>6}  {'license':<10}{speed}")
    for e in entries:
        size = f"{e['size_mb']:6.1f}" if e["size_mb"] is not None else f"{'-':>6}"
        line = (f"{e['id']:<27} {e['alias']:<12} {e['backend']:<21} {e['dim']:>4} {e['max_tokens']:>6} {size}  "
                f"{e['license']:<10}")
        if not e["installed"]:
            line += f"  not installed: {e['install']}"
        elif args.measure:
            line += f"  {e['query_ms']:>8.1f}  {e['passages_per_s']:>10.1f}"
        print(line)
        print(f"{'':<27} {e['about']}")
    print("\nA store's model is embed.model (`lab eval --model ALIAS`, a save config); a local folder is "
          "st:PATH (sentence-transformers) or onnx:PATH (model.onnx + tokenizer.json).\n"
          "Models of one space (the same vectors) may query each other's stores: `lab serve --query-model`.")
    if args.measure:
        print("speed: one thread; a query at a time, then 32 short passages in one call.")
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="the embedding models available here (dimension, size, licence, speed)")
    p.add_argument("--measure", action="store_true", help="also time each installed model here (a few seconds each)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)
