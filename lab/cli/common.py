"""Shared parsing and printing for the `lab` commands: no domain logic here."""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from contextlib import contextmanager
from typing import Any, Mapping

DEFAULT_STORE = ".lab/store"


def default_store() -> str:
    """The store a command reads without --store: $LAB_STORE, else .lab/store."""
    from lab.workspace import current

    return str(current().store or DEFAULT_STORE)


def store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default=default_store(), help=f"store folder (env LAB_STORE; default {DEFAULT_STORE})")


# libraries that log every routine step at DEBUG or INFO (bm25s: each index it builds)
CHATTY_LOGGERS = ("bm25s",)


class _WarningsUnlessDebugging(logging.Filter):
    """A chatty library's records below WARNING are dropped unless the root logger is at DEBUG
    (`lab serve --log-level debug`): asked for, they are shown."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or logging.getLogger().level == logging.DEBUG


def quiet_chatty_libraries() -> None:
    """Keep CHATTY_LOGGERS' routine records out of a command's output. A filter, not a level:
    bm25s sets its logger to DEBUG when it is imported, which is after this (it is imported by the
    command that needs it), and any root handler (uvicorn's for `lab serve`, the MCP SDK's, one a
    library installs by logging through the root logger) would print its debug lines."""
    for name in CHATTY_LOGGERS:
        chatty = logging.getLogger(name)
        if not any(isinstance(f, _WarningsUnlessDebugging) for f in chatty.filters):
            chatty.addFilter(_WarningsUnlessDebugging())


def command_workspace(datasets: str | None = None, tracking_uri: str | None = None):
    """The workspace a command passes to the flow: the one `main` resolved, with this command's
    own --datasets and --tracking-uri flags over it (a flag given wins over the environment)."""
    from dataclasses import replace
    from pathlib import Path

    from lab.workspace import current

    workspace = current()
    if datasets:
        workspace = replace(workspace, datasets=Path(datasets))
    if tracking_uri:
        workspace = replace(workspace, tracking_uri=tracking_uri)
    return workspace


def store_settings():
    """The store settings of the workspace `main` resolved (lab.store.settings), handed to every store opened."""
    from lab.store.settings import StoreSettings
    from lab.workspace import current

    return StoreSettings.of(current())


def command_tracking(args: argparse.Namespace):
    """The tracking store a command logs to (lab.track's ``Tracking``): its --tracking-uri over the
    workspace's ($MLFLOW_TRACKING_URI), with the workspace's tracking_timeout."""
    from lab.track.connect import Tracking

    return Tracking.of(command_workspace(tracking_uri=getattr(args, "tracking_uri", None)))


def check_tracking(args: argparse.Namespace) -> None:
    """Before a command's work: the tracking server it will log to answers (unless --no-track)."""
    if not getattr(args, "no_track", False):
        from lab.track import require_reachable

        require_reachable(command_tracking(args))


def engine_args(p: argparse.ArgumentParser) -> None:
    """--engine and --ray-address, their help and choices from the workspace's declarations."""
    from lab.fields import rule
    from lab.workspace import Workspace

    declared = {name: rule(Workspace, name) for name in ("engine", "ray_address")}
    p.add_argument("--engine", choices=list(declared["engine"].choices),
                   help=f"{declared['engine'].doc} (default $LAB_ENGINE, else local)")
    p.add_argument("--ray-address", dest="ray_address", metavar="ADDRESS",
                   help=f"{declared['ray_address'].doc}; implies --engine ray (default $RAY_ADDRESS)")


def ray_auth(env: Mapping[str, str]) -> str | None:
    """Ray's token auth mode for lab's driver: ``token`` when the user gives a token ($RAY_AUTH_TOKEN
    or $RAY_AUTH_TOKEN_PATH) and no $RAY_AUTH_MODE. Ray 2.60 sends a token to an address it is
    given only in token mode, and infers that mode from a token only for a cluster it finds itself."""
    if env.get("RAY_AUTH_MODE") or not (env.get("RAY_AUTH_TOKEN") or env.get("RAY_AUTH_TOKEN_PATH")):
        return None
    return "token"


@contextmanager
def command_engine(args: argparse.Namespace, *, say: bool = True, workspace=None):
    """The engine a command's heavy work runs on (lab.engine), from its --engine / --ray-address
    flags over the workspace's; it ships ``workspace`` (default: the one `main` resolved) with
    each unit of work. A Ray started for the command is stopped when it ends."""
    from lab.engine import make_engine
    from lab.errors import ValidationError
    from lab.workspace import current

    workspace = workspace or current()
    name = getattr(args, "engine", None) or ("ray" if getattr(args, "ray_address", None) else workspace.engine)
    address = getattr(args, "ray_address", None) or workspace.ray_address
    if name == "local" and getattr(args, "ray_address", None):
        raise ValidationError(f"--ray-address {args.ray_address} needs --engine ray (or leave --engine out)",
                              field="ray_address")
    engine = make_engine(name, address if name == "ray" else None, auth=ray_auth(os.environ) if name == "ray" else None,
                         workspace=workspace)
    try:
        if say and not engine.in_process:
            print(f"engine: {engine.describe()}", file=sys.stderr, flush=True)
        yield engine
    finally:
        engine.close()


# embedding and override controls that reorder the text after them (emoji joiners are left alone)
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """Memory content as a terminal should show it: control characters (ANSI escapes, NUL) and
    invisible format characters (bidi overrides that reorder what follows) become visible
    ``\\uXXXX`` escapes instead of acting on the terminal."""
    import unicodedata

    out = []
    for ch in text:
        if keep_newlines and ch in "\n\t":
            out.append(ch)
        elif unicodedata.category(ch) == "Cc" or ch in _BIDI_CONTROLS:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return "".join(out)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True, default=str))


def print_stats(stats: dict[str, Any]) -> None:
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


def print_hits(hits: list, width: int = 80, explain: bool = False) -> None:
    if not hits:
        print("(no results)")
        return
    print(f"{'#':>2}  {'score':>7}  {'memory':<18} {'type':<9} text")
    for hit in hits:
        text = terminal_safe(" ".join(hit.content.split()))
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


def run_notebook(app: Any, allowed: tuple[str, ...]) -> int:
    """A marimo notebook run as a script (`python notebooks/x.py --dataset demo`): its arguments
    checked first, and a bad value a one-line error naming it and what is allowed (exit 2, as a
    `lab` command), never a traceback."""
    import sys

    from lab.errors import LabError

    given = [a[2:].split("=", 1)[0] for a in sys.argv[1:] if a.startswith("--")]
    unknown = [g for g in given if g not in allowed]
    if unknown:
        print(f"error: unknown argument(s) {', '.join('--' + u for u in unknown)}; this notebook takes "
              f"{', '.join('--' + a for a in allowed)}", file=sys.stderr)
        return 2
    try:
        app.run()
    except LabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0
