"""`lab serve` and `lab keys`: parse the options, start the server or edit the keys file."""
from __future__ import annotations

import argparse
import sys

from lab.cli.common import command_workspace, print_json, quiet_chatty_libraries, store_settings


def open_served(args: argparse.Namespace, log_stream=None):
    """(settings, the GO configuration served, its keys) from the flags, checked before anything
    is opened; logging goes to ``log_stream`` (stderr by default)."""
    import logging

    from lab.errors import ValidationError
    from lab.serve.auth import KeyRing
    from lab.serve.bundle import load_bundle, load_model, seed_store
    from dataclasses import fields

    from lab.serve.settings import DEMO_MODEL, DEMO_STORE, Settings, load_settings
    from lab.track.connect import Tracking

    # every setting a command has a flag for (setting_flag names its dest after the setting)
    flags = {f.name: getattr(args, f.name, None) for f in fields(Settings)}
    if getattr(args, "demo", False):
        if flags["model"] or flags["bundle"]:
            raise ValidationError(f"--demo serves {DEMO_MODEL}: drop --model/--bundle, or drop --demo")
        flags = {**flags, "model": DEMO_MODEL, "store": flags["store"] or DEMO_STORE}
    settings = load_settings(flags, config_file=args.config)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=log_stream or sys.stderr)
    quiet_chatty_libraries()  # a root handler now prints what reaches it: bm25s's DEBUG lines, unfiltered
    # --tracking-uri ($LAB_SERVE_TRACKING_URI) over the workspace's ($MLFLOW_TRACKING_URI), its timeout
    tracking = Tracking.of(command_workspace(tracking_uri=settings.tracking_uri))
    served = load_bundle(settings.bundle) if settings.bundle else load_model(settings.model, tracking)
    seeded = seed_store(served, settings.store, store_settings()) if getattr(args, "demo", False) else None
    if seeded:
        print(f"store {settings.store}: {seeded}", file=log_stream or sys.stderr, flush=True)
    keys = KeyRing.load(settings.keys_file)
    if settings.auth_on and not keys.keys:
        why = "asked for" if settings.auth == "on" else f"on by default when binding to {settings.host}"
        raise ValidationError(f"auth is {why}, but there are no API keys: create one with "
                              "`lab keys create NAME --keys-file FILE` and pass --keys-file FILE "
                              "(or set $LAB_API_KEYS), or bind to 127.0.0.1")
    return settings, served, keys


def cmd_serve(args: argparse.Namespace) -> int:
    settings, served, keys = open_served(args)
    import uvicorn

    from lab.serve.app import create_app

    faces = []
    if args.mcp:
        from lab.mcp.http import mcp_face

        faces.append(mcp_face)
    from lab.serve.upstream import shown_url, upstream_url

    app = create_app(settings, served, keys=keys, faces=faces, stores=store_settings())
    service = app.state.lab.service
    models = service.embedding_models()
    base = f"http://{settings.host}:{settings.port}"
    spaces = service.store.namespaces()
    print(f"serving {served.source} (candidate {served.manifest.get('candidate')}, verdict GO) "
          f"from store {settings.store} (version {service.store.version()}, {len(spaces)} namespace(s)"
          f"{': ' + ', '.join(spaces[:5]) + (' ...' if len(spaces) > 5 else '') if spaces else ''}) on {base}  "
          f"auth {'on' if settings.auth_on else 'off'}, {len(keys.keys)} key(s); API docs at /docs"
          + (f"; MCP (streamable HTTP) at {base}/mcp" if args.mcp else "")
          + (f"; chat proxy at {base}/v1/chat/completions -> {shown_url(upstream_url(settings.proxy_upstream))}"
             if settings.proxy_upstream else "")
          + "\n"
          f"vectors of {models['store']}, queries encoded by {models['query']}"
          + (f", extra encoders {', '.join(models['encoders'])}" if models["encoders"] else ""), flush=True)
    _gated_warnings(served.manifest)
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False,
                timeout_graceful_shutdown=10)
    return 0


def setting_flag(p: argparse.ArgumentParser, name: str, flag: str | None = None, *, tag: str = "",
                 metavar: str | None = None) -> None:
    """A flag for the server setting ``name``: its help, choices and default come from the setting's
    declaration (lab.serve.settings); its value is checked and coerced by load_settings, the one
    place every source of a setting goes through, so a bad flag is named as a bad variable is."""
    from dataclasses import MISSING, fields

    from lab.fields import rule
    from lab.serve.settings import Settings

    declared = rule(Settings, name)
    f = next(f for f in fields(Settings) if f.name == name)
    default = f.default if f.default is not MISSING else None
    shown = "" if default is None else f" (default {default})"
    p.add_argument(flag or "--" + name.replace("_", "-"), dest=name, metavar=metavar,
                   choices=list(declared.choices) if declared.choices else None, help=f"{tag}{declared.doc}{shown}")


def add_setting_flags(p: argparse.ArgumentParser) -> None:
    """The flags `lab serve` and `lab mcp` share: what is served and how it is guarded."""
    setting_flag(p, "model")
    p.add_argument("--demo", action="store_true",
                   help="serve `lab demo`'s champion (models:/lab-memory-demo@champion) over .lab/serve/demo, a store "
                        "seeded on first start with the demo data it was judged on")
    for name in ("bundle", "store", "query_model", "tracking_uri", "log_level"):
        setting_flag(p, name)
    p.add_argument("--config", help="settings file (YAML; env LAB_SERVE_CONFIG)")


def add_network_flags(p: argparse.ArgumentParser, tag: str = "") -> None:
    """Where the server listens and how it guards the door (`lab serve`, `lab mcp --transport http`)."""
    for name in ("host", "port", "auth", "keys_file", "rate", "burst", "max_body_bytes"):
        setting_flag(p, name, tag=tag)
    setting_flag(p, "mcp_sessions_per_key", tag=tag, metavar="N")
    setting_flag(p, "mcp_session_idle_s", "--mcp-session-idle", tag=tag, metavar="S")


def cmd_keys_create(args: argparse.Namespace) -> int:
    from lab.serve.auth import add_key

    secret = add_key(args.keys_file, args.name, args.scope, args.namespaces)
    print(f"key {args.name!r} ({args.scope}, namespaces {', '.join(args.namespaces)}) added to {args.keys_file}; "
          "its hash is stored, the key itself is shown only now:", file=sys.stderr)
    print(secret)
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    from lab.serve.auth import KeyRing, describe

    print_json(describe(KeyRing.load(args.keys_file, env={})))
    return 0


def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve the gated configuration over REST (FastAPI on uvicorn)",
                       description="Serve the registered champion (or a bundle) over REST. Settings come from "
                                   "flags, then $LAB_SERVE_<NAME> variables, then --config FILE (YAML).")
    add_setting_flags(p)
    add_network_flags(p)
    p.add_argument("--mcp", action="store_true",
                   help="also serve the MCP tools over streamable HTTP at /mcp (same keys, scopes and rate limits)")
    setting_flag(p, "proxy_upstream", metavar="URL")
    setting_flag(p, "proxy_timeout_s", "--proxy-timeout", metavar="S")
    setting_flag(p, "proxy_position")
    setting_flag(p, "proxy_save")
    setting_flag(p, "proxy_passthrough", metavar="PATHS")
    p.set_defaults(func=cmd_serve)

    k = sub.add_parser("keys", help="create and list the server's API keys")
    ksub = k.add_subparsers(dest="keys_command", metavar="ACTION", required=True)
    c = ksub.add_parser("create", help="create a key: prints it once, stores its hash")
    c.add_argument("name")
    c.add_argument("--keys-file", dest="keys_file", required=True)
    c.add_argument("--scope", choices=["read", "write"], default="read")
    c.add_argument("--namespaces", nargs="+", default=["*"], help="patterns: '*', 'team-a/*', 'project-x'")
    c.set_defaults(func=cmd_keys_create)
    ls = ksub.add_parser("list", help="the keys in a file (names, scopes, namespaces; no hashes)")
    ls.add_argument("--keys-file", dest="keys_file", required=True)
    ls.set_defaults(func=cmd_keys_list)


def _gated_warnings(manifest: dict) -> None:
    """What the gate's evaluation of the served configuration said about fusing its lists (a list
    mostly empty, ids that never meet, a fused ranking equal to one list), each a `warning:` line."""
    import warnings

    from lab.errors import LabWarning

    for suite, figures in sorted((manifest.get("metrics") or {}).items()):
        for line in figures.get("warnings") or []:
            warnings.warn(LabWarning(f"the served configuration, judged on suite {suite}: {line}"), stacklevel=2)
