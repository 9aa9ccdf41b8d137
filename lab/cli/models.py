"""`lab models`: the embedding models lab can use here, and what each needs."""
from __future__ import annotations

import argparse

from lab.cli.common import print_json


# the table's columns: header, the entry's field, alignment ("<" left, ">" right)
COLUMNS = (("model", "id", "<"), ("alias", "alias", "<"), ("backend", "backend", "<"), ("dim", "dim", ">"),
           ("tokens", "max_tokens", ">"), ("MB", "size_mb", ">"), ("license", "license", "<"))
SPEED_COLUMNS = (("query ms", "query_ms", ">"), ("passages/s", "passages_per_s", ">"))
GAP = "  "


def _cell(entry: dict, field: str) -> str:
    value = entry.get(field)
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def models_table(entries: list[dict], measure: bool = False) -> list[str]:
    """The models as aligned rows, each followed by its description; every column as wide as its
    widest cell, so a long model id (a sparse head's) does not push its row out of line."""
    columns = COLUMNS + (SPEED_COLUMNS if measure else ())
    cells = [[_cell(e, field) for _, field, _ in columns] for e in entries]
    widths = [max([len(header)] + [len(row[i]) for row in cells]) for i, (header, _, _) in enumerate(columns)]

    def line(values: list[str]) -> str:
        return GAP.join(f"{v:{align}{w}}" for v, (_, _, align), w in zip(values, columns, widths))

    lines = [line([header for header, _, _ in columns]).rstrip()]
    indent = " " * (widths[0] + len(GAP))
    for entry, row in zip(entries, cells):
        if entry["installed"]:
            lines.append(line(row).rstrip())
        else:  # no speed to show: what installs it, in the speed columns' place
            lines.append(line(row[:len(COLUMNS)]) + GAP + f"not installed: {entry['install']}")
        lines.append(indent + entry["about"])
    return lines


def cmd_models(args: argparse.Namespace) -> int:
    from lab.embed.survey import survey

    from lab.embed.survey import server_entries

    entries = survey(measure=args.measure) + server_entries(args.server or [], measure=args.measure)
    failed = [e for e in entries if e.get("error")]
    if args.json:
        print_json(entries)
        return 1 if failed else 0
    print("\n".join(models_table(entries, measure=args.measure)))
    print("\nA store's model is embed.model (`lab eval --model ALIAS`, a save config); a local folder is "
          "st:PATH (sentence-transformers) or onnx:PATH (model.onnx + tokenizer.json).\n"
          "Models of one space (the same vectors) may query each other's stores: `lab serve --query-model`.\n"
          "A model behind an OpenAI-compatible server is openai:MODEL@BASE_URL or openai:FILE.yaml "
          "(`lab models --server NAME` asks it for its dimension; docs/models.md).")
    if args.measure:
        print("speed: one thread; a query at a time, then 32 short passages in one call.")
    for entry in failed:
        print(f"error: {entry['error']}")
    return 1 if failed else 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="the embedding models available here (dimension, size, licence, speed)")
    p.add_argument("--measure", action="store_true", help="also time each installed model here (a few seconds each)")
    p.add_argument("--server", action="append", metavar="NAME",
                   help="also list this server model (openai:MODEL@BASE_URL or openai:FILE.yaml), after one probe "
                        "call for its dimension; repeatable")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_models)
