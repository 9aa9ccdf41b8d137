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
from lab.cli.common import quiet_chatty_libraries


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
    tune_commands.add_adapt_parser(sub)
    tune_commands.add_gate_parser(sub)
    serve_commands.add_parsers(sub)
    mcp_commands.add_parsers(sub)
    stage_commands.add_parsers(sub)
    datasets_commands.add_parsers(sub)
    models_commands.add_parsers(sub)
    _document(parser)
    return parser


# the help of flags many commands share, said once (a command's own help wins)
SHARED_HELP = {
    "json": "print JSON instead of a table", "quiet": "no progress output",
    "tracking_uri": "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else SQLite under .lab/mlflow)",
    "log_level": "server log level (default info)", "namespace": "the namespace to read (e.g. atlas in the demo data)",
    "query": "the text to search for", "keys_file": "the API keys file (hashed; `lab keys create` writes it)",
    "no_track": "do not log runs to MLflow (export needs them)",
}
SPECIFIC_HELP = {
    ("init", "chunk_size"): "tokens per chunk (default: the model's limit)",
    ("init", "chunk_overlap"): "tokens two neighbouring chunks share",
    ("store encoders", "remove"): "remove these extra encoders instead of adding them",
    ("presets", "name"): "a preset to print as YAML (default: list them all)",
    ("context", "format"): "text (zones as plain text), markdown, or json (items, zones, skipped and why)",
    ("compare", "runs"): "two or more run folders (lab eval writes them under runs/); the first is the baseline",
    ("runs", "n"): "how many runs to list (newest first)",
    ("runs", "kind"): "only runs of this kind (eval, sweep, sweep-trial, gate, system)",
    ("keys create", "name"): "a name for the key (shown in logs and `lab keys list`)",
    ("keys create", "scope"): "read: search and context only; write: also save, update and forget",
    ("stage", "stage"): "the stage to run (as dvc.yaml names them)",
}


def _document(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> None:
    """Every sub-command gets a description (its one-line help, when it has no longer one) and every
    option a help text, so `lab COMMAND --help` explains each flag."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                if not sub.description and helps.get(name):
                    sub.description = helps[name][0].upper() + helps[name][1:] + "."
                _document(sub, path + (name,))
        elif action.help is None and action.dest != "help":
            action.help = SPECIFIC_HELP.get((" ".join(path), action.dest)) or SHARED_HELP.get(action.dest)


def _one_line_warnings() -> None:
    """lab's own warnings (lab.errors.LabWarning) as one ``warning:`` line on stderr, not Python's
    file:line form; other libraries' warnings are left to Python."""
    import warnings

    from lab.errors import LabWarning

    shown = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, LabWarning):
            print(f"warning: {message}", file=sys.stderr, flush=True)
        else:
            shown(message, category, filename, lineno, file, line)

    warnings.showwarning = show


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
    _one_line_warnings()
    quiet_chatty_libraries()
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
