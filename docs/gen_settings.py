"""Writes docs/settings.md: every setting lab reads, with its type, default, allowed values and
one-line doc, generated from the declarations themselves (lab.fields), so the page cannot drift
from what the code checks. Run by the mkdocs hook before every build, or by hand."""
from __future__ import annotations

import dataclasses
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).with_name("settings.md")


def _sections():
    from lab import config as C
    from lab.serve.settings import Settings
    from lab.workspace import Workspace

    return [
        ("Search (a preset or `--config` file)", "", C.SearchConfig),
        ("Search: filters", "filters.", C.FilterConfig),
        ("Search: graph walk", "graph.", C.GraphConfig),
        ("Search: query analysis", "analysis.", C.AnalysisConfig),
        ("Search: fusion", "fusion.", C.FusionConfig),
        ("Index time: chunks (`save.chunk`)", "chunk.", C.ChunkConfig),
        ("Index time: embedding (`save.embed`)", "embed.", C.EmbedConfig),
        ("Index time: indexes (`save.index`)", "index.", C.IndexConfig),
        ("Index time: vector index", "index.vector.", C.VectorIndexConfig),
        ("Index time: lexical index", "index.lexical.", C.LexicalIndexConfig),
        ("Context assembly (`assemble`)", "assemble.", C.AssembleConfig),
        ("Query adapters (`lab adapt` flags)", "adapt.", C.AdaptConfig),
        ("Fine-tuning (`lab adapt --kind finetune` flags)", "finetune.", C.FinetuneConfig),
        ("The server (`lab serve` flags, `LAB_SERVE_*`, a serve config file)", "", Settings),
        ("The workspace (flags and environment)", "", Workspace),
    ]


def _type(tp) -> str:
    text = getattr(tp, "__name__", None) if not typing.get_args(tp) else None
    text = text or str(tp).replace("typing.", "").replace("pathlib.", "")
    return text.replace(" | ", " or ")  # a bar would end the table cell


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = f.default_factory()  # type: ignore[misc]
        if dataclasses.is_dataclass(value):
            return "(section)"
        if f.name == "project":
            return "the checkout, else the working folder"
    else:
        return "(required)"
    if value == "":
        return "(empty)"
    return "none" if value is None else f"`{value}`".replace("|", "\\|")


def render() -> str:
    from lab.fields import RULE, Rule

    lines = ["# Settings reference", "",
             "Every setting lab reads, generated from the declarations the code checks against "
             "(`lab/fields.py`): a value outside what the table allows is refused with an error naming the "
             "setting, the value and the allowed range. Dotted names are the keys of a config file.", ""]
    for title, prefix, cls in _sections():
        hints = typing.get_type_hints(cls)
        lines += [f"## {title}", "", "| setting | type | default | allowed | what it is |", "|---|---|---|---|---|"]
        for f in dataclasses.fields(cls):
            r: Rule = f.metadata.get(RULE, Rule())
            allowed = r.allowed() if (r.numeric or r.choices is not None) else ""
            lines.append(f"| `{prefix}{f.name}` | {_type(hints[f.name])} | {_default(f)} | {allowed} | {r.doc} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    sys.path.insert(0, str(ROOT))
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
