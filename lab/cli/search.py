"""`lab search | context | presets`: reading a store through the read-only retriever."""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from lab.cli.common import default_store, print_hits, print_json, store_arg, store_settings, terminal_safe
from lab.cli.demo import demo_store


def _retriever(args: argparse.Namespace):
    from lab.retriever import Retriever

    # queries by the fastest model of the store's space, as `lab serve` encodes them (for a MiniLM
    # store the int8 ONNX export: a one-shot search loads no torch); --query-model store: its own
    return Retriever.open(args.store, search=args.preset, query_model=args.query_model, settings=store_settings())


def _check_before_loading(args: argparse.Namespace) -> None:
    """Refuse what can be refused without the model or the store loaded (a one-shot command spends
    most of its second loading them): counts, a blank query, a store or preset file that is not there."""
    from pathlib import Path

    from lab.errors import NotFoundError, ValidationError
    from lab.store.layout import is_store

    from lab.config import AssembleConfig, FusionConfig
    from lab.fields import rule

    # each flag is checked by the rule of the config field it sets (lab.fields)
    for flag, declared in (("k", rule(FusionConfig, "top_k")), ("candidates", rule(FusionConfig, "top_k")),
                           ("budget", rule(AssembleConfig, "budget")), ("neighbours", rule(AssembleConfig, "neighbours"))):
        value = getattr(args, flag, None)
        problem = None if value is None else declared.problem(value)
        if problem:
            raise ValidationError(f"--{flag} {problem}", field=flag)
    if not args.query.strip():
        raise ValidationError("the query is empty: give the text to search for")
    store = args.store  # a folder, or a URI (lab.store.location)
    if not is_store(store, store_settings()):
        raise NotFoundError(f"no lab store at {store} ({_where_to_look(store)})")
    for flag in ("preset", "assemble"):
        value = getattr(args, flag, None)
        if value and Path(value).suffix.lower() in (".yaml", ".yml", ".json") and not Path(value).is_file():
            raise NotFoundError(f"--{flag} {value}: no such file")


def _where_to_look(store: str) -> str:
    """The hint of a missing store: after `lab demo` the store a user means without --store is
    most likely the demo's, which is not the default one."""
    from lab.store.layout import is_store

    demo = demo_store()
    if store == default_store() and store != demo and is_store(demo, store_settings()):
        return f"the demo's store is {demo}: add --store {demo}; or create one with `lab init --store {store}`"
    return f"create one with `lab init --store {store}`, or name another with --store"


def cmd_search(args: argparse.Namespace) -> int:
    _check_before_loading(args)
    with _retriever(args) as retriever:
        response = retriever.search_response(args.query, args.namespace, k=args.k, explain=args.explain)
    hits = response.results
    if response.abstention.abstain:  # the preset's abstain.threshold: said beside the results
        print(f"abstain: {response.abstention.reason}", file=sys.stderr)
    if args.json:
        print_json([h.to_dict() for h in hits])
    else:
        print_hits(hits, explain=args.explain)
    return 0


def _ratios(text: str) -> dict[str, float]:
    from lab.errors import ValidationError

    try:
        critical, middle, recency = (float(x) for x in text.split("/"))
    except ValueError:
        raise ValidationError(f"--ratios must be CRITICAL/MIDDLE/RECENCY, e.g. 15/65/20, got {text!r}") from None
    total = critical + middle + recency
    if min(critical, middle, recency) < 0:
        raise ValidationError(f"--ratios {text!r}: each share must be >= 0")
    if abs(total - 100.0) < 1e-6:
        scale = 100.0  # 15/65/20
    elif abs(total - 1.0) < 1e-6:
        scale = 1.0  # 0.15/0.65/0.2
    else:
        raise ValidationError(f"--ratios {text!r}: the three shares must sum to 100 (or to 1), got {total:g}")
    return {"critical_ratio": critical / scale, "middle_ratio": middle / scale, "recency_ratio": recency / scale}


def cmd_context(args: argparse.Namespace) -> int:
    _check_before_loading(args)
    ratios = _ratios(args.ratios) if args.ratios else {}
    from lab.config import AssembleConfig, load_config

    acfg = load_config(AssembleConfig, args.assemble) if args.assemble else AssembleConfig()
    changes = {k: v for k, v in (("budget", args.budget), ("counter", args.counter),
                                  ("neighbours", args.neighbours)) if v is not None}
    acfg = replace(acfg, **changes, **ratios)
    with _retriever(args) as retriever:
        ctx = retriever.context(args.query, args.namespace, assemble_config=acfg, candidates=args.candidates)
    if args.format == "json":
        print_json(ctx.to_dict())
        return 0
    text = ctx.render(args.format)
    if text:
        print(terminal_safe(text, keep_newlines=True))
    if ctx.abstention is not None and ctx.abstention.abstain:
        print(f"abstain: {ctx.abstention.reason} (nothing assembled)", file=sys.stderr)
    zones = "  ".join(f"{z} {u.used}/{u.available}" for z, u in ctx.zones.items())
    print(f"\n({len(ctx.items)} items, {ctx.used}/{ctx.budget} tokens [{ctx.counter}]; {zones}; "
          f"{len(ctx.skipped)} skipped)", file=sys.stderr)
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


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("search", help="search a namespace")
    p.add_argument("query")
    store_arg(p)
    p.add_argument("--namespace", required=True)
    p.add_argument("--preset", default=None, help="preset name or a .yaml/.json SearchConfig (default: lab)")
    p.add_argument("-k", "--k", type=int, default=None, help="results to return (default: the preset's top_k)")
    p.add_argument("--explain", action="store_true", help="per-signal ranks, scores, contributions, counterfactual ranks")
    p.add_argument("--query-model", dest="query_model", default="auto",
                   help="model encoding the query: auto (the fastest of the store's vector space), store, or a model id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_search)

    from lab.config import AssembleConfig  # its declaration is the default's one place

    p = sub.add_parser("context", help="search, then assemble a zoned context within a token budget")
    p.add_argument("query")
    store_arg(p)
    p.add_argument("--namespace", required=True)
    p.add_argument("--budget", type=int, default=None, help=f"token budget (default {AssembleConfig().budget})")
    p.add_argument("--preset", default=None, help="search preset name or a .yaml/.json SearchConfig (default: lab)")
    p.add_argument("--assemble", default=None, help="a .yaml/.json AssembleConfig")
    p.add_argument("--ratios", default=None, help="zone ratios CRITICAL/MIDDLE/RECENCY, e.g. 15/65/20")
    p.add_argument("--counter", choices=["estimate", "exact"], default=None, help="token counter (default estimate)")
    p.add_argument("--neighbours", type=int, default=None, help="adjacent turns of the same episode to add")
    p.add_argument("--candidates", type=int, default=50, help="fused results offered to assembly")
    p.add_argument("--query-model", dest="query_model", default="auto",
                   help="model encoding the query: auto (the fastest of the store's vector space), store, or a model id")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.set_defaults(func=cmd_context)

    p = sub.add_parser("presets", help="list the search presets, or print one as YAML")
    p.add_argument("name", nargs="?")
    p.set_defaults(func=cmd_presets)
