"""`lab mcp`: the memory tools for an MCP host (Claude Desktop, Claude Code, Cursor) over stdio.

The host launches this command and speaks MCP on its stdin and stdout. stdout carries only the
protocol: everything else this process (or a model process it starts) would print goes to stderr.
For MCP over HTTP, `lab serve --mcp` serves the same tools at /mcp beside REST.
"""
from __future__ import annotations

import argparse
import os
import sys

from lab.cli.common import store_settings
from lab.cli.serve import add_network_flags, add_setting_flags, open_served


def protocol_stdout() -> None:
    """Keep the real stdout for the protocol alone: file descriptor 1 (which child processes and
    stray prints use) becomes stderr, and ``sys.stdout`` a new file on the original descriptor."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(saved, "w", encoding="utf-8", buffering=1)


def cmd_mcp(args: argparse.Namespace) -> int:
    if args.transport == "http":
        from lab.cli.serve import cmd_serve

        args.mcp = True
        return cmd_serve(args)
    protocol_stdout()
    args.log_level = args.log_level or "warning"  # stderr is the host's log: its problems, not every step
    from lab.errors import ValidationError
    from lab.store.records import validate_namespace

    from lab.serve.auth import check_pattern

    allow = tuple(check_pattern(p, "--allow") for p in args.allow or ["*"])
    if args.namespace:
        validate_namespace(args.namespace)
    settings, served, keys = open_served(args)
    from lab.mcp.server import LocalPolicy, build_server
    from lab.serve.auth import RateLimiter
    from lab.serve.metrics import Metrics
    from lab.serve.service import MemoryService
    from lab.serve.state import AppState

    policy = LocalPolicy(args.namespace, allow, args.read_only)
    if args.namespace and not policy.caller().can(args.namespace):
        raise ValidationError(f"--namespace {args.namespace!r} is outside --allow {list(allow)}")
    service = MemoryService(settings, served, stores=store_settings())
    state = AppState(settings, service, keys, RateLimiter(settings.rate, settings.burst), Metrics(), auth_on=False)
    models = service.embedding_models()
    print(f"lab mcp (stdio): serving {served.source} (candidate {served.manifest.get('candidate')}, verdict GO) "
          f"from store {settings.store}; vectors of {models['store']}, queries encoded by {models['query']}; "
          f"namespaces {list(allow)}{' read-only' if args.read_only else ''}"
          + (f", default {args.namespace}" if args.namespace else ""), file=sys.stderr, flush=True)
    import threading

    threading.Thread(target=service.warm, name="lab-warm", daemon=True).start()
    try:
        build_server(state, policy).run("stdio")
    finally:
        service.close()
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("mcp", help="the memory tools for an MCP host (stdio; --transport http = lab serve --mcp)",
                       description="Serve the champion's memory tools (memory_save, memory_save_many, memory_search, "
                                   "memory_context, memory_get, memory_update, memory_forget, memory_list, memory_link, "
                                   "memory_check) "
                                   "to an MCP host over stdio, as the local user. Refuses a configuration that is "
                                   "not GO, as `lab serve` does.")
    add_setting_flags(p)
    p.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (a host launches this command) or http (streamable HTTP at /mcp, as lab serve --mcp)")
    p.add_argument("--namespace", help="namespace used when a tool call names none")
    p.add_argument("--allow", nargs="+", metavar="PATTERN",
                   help="namespaces this session may touch: '*' (default), 'team-a/*', 'project-x'")
    p.add_argument("--read-only", dest="read_only", action="store_true", help="refuse every write tool")
    add_network_flags(p, "(http) ")  # with --transport http, the network settings of lab serve
    p.set_defaults(func=cmd_mcp)
