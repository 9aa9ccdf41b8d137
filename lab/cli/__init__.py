"""The `lab` command: one module per command group (store, search, eval, tune), parsing and printing only.

Heavy imports (torch, polars, deltalake) happen inside each command, so `lab --help` is instant.
"""
from __future__ import annotations

import argparse
import sys
from typing import Sequence

from lab.cli import datasets as datasets_commands
from lab.cli import demo as demo_commands
from lab.cli import eval as eval_commands
from lab.cli import mcp as mcp_commands
from lab.cli import models as models_commands
from lab.cli import search as search_commands
from lab.cli import serve as serve_commands
from lab.cli import stage as stage_commands
from lab.cli import store as store_commands
from lab.cli import tune as tune_commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description="Evaluate and tune memory retrieval for AI agents.")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo_commands.add_parsers(sub)
    store_commands.add_parsers(sub)
    search_commands.add_parsers(sub)
    eval_commands.add_parsers(sub)
    tune_commands.add_parsers(sub)
    tune_commands.add_learn_parser(sub)
    tune_commands.add_gate_parser(sub)
    serve_commands.add_parsers(sub)
    mcp_commands.add_parsers(sub)
    stage_commands.add_parsers(sub)
    datasets_commands.add_parsers(sub)
    models_commands.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from lab.errors import LabError
    from lab.workspace import Workspace, install

    try:  # the command line is an edge: the environment is read here, once, then passed down
        install(Workspace.resolve())
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        from lab.version import __version__

        print(__version__)
        return 0
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
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
