"""`lab serve` and `lab keys`: parse the options, start the server or edit the keys file."""
from __future__ import annotations

import argparse
import sys

from lab.cli.common import print_json


SETTING_FLAGS = ("model", "bundle", "store", "host", "port", "auth", "keys_file", "rate", "burst", "max_body_bytes",
                 "query_model", "tracking_uri", "log_level", "proxy_upstream", "proxy_timeout_s", "proxy_position",
                 "proxy_save", "mcp_sessions_per_key", "mcp_session_idle_s")


def open_served(args: argparse.Namespace, log_stream=None):
    """(settings, the GO configuration served, its keys) from the flags, checked before anything
    is opened; logging goes to ``log_stream`` (stderr by default)."""
    import logging

    from lab.errors import ValidationError
    from lab.serve.auth import KeyRing
    from lab.serve.bundle import load_bundle, load_model, seed_store
    from lab.serve.settings import DEMO_MODEL, DEMO_STORE, load_settings

    flags = {k: getattr(args, k, None) for k in SETTING_FLAGS}
    if getattr(args, "demo", False):
        if flags["model"] or flags["bundle"]:
            raise ValidationError(f"--demo serves {DEMO_MODEL}: drop --model/--bundle, or drop --demo")
        flags = {**flags, "model": DEMO_MODEL, "store": flags["store"] or DEMO_STORE}
    settings = load_settings(flags, config_file=args.config)
    logging.basicConfig(level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        stream=log_stream or sys.stderr)
    logging.getLogger("bm25s").setLevel(max(logging.WARNING, logging.getLogger().level))  # it logs every build
    served = load_bundle(settings.bundle) if settings.bundle else load_model(settings.model, settings.tracking_uri)
    seeded = seed_store(served, settings.store) if getattr(args, "demo", False) else None
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
    from lab.serve.proxy import shown_url, upstream_url

    app = create_app(settings, served, keys=keys, faces=faces)
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
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, access_log=False,
                timeout_graceful_shutdown=10)
    return 0


def add_setting_flags(p: argparse.ArgumentParser) -> None:
    """The flags `lab serve` and `lab mcp` share: what is served and how it is guarded."""
    p.add_argument("--model", help="registered model version (default models:/lab-memory@champion)")
    p.add_argument("--demo", action="store_true",
                   help="serve `lab demo`'s champion (models:/lab-memory-demo@champion) over .lab/serve/demo, a store "
                        "seeded on first start with the demo data it was judged on")
    p.add_argument("--bundle", help="an exported bundle folder instead of the registry")
    p.add_argument("--store", help="the store to serve (default .lab/serve/store, created with the gated settings)")
    p.add_argument("--query-model", dest="query_model",
                   help="model encoding queries: auto (fastest backend of the store's vector space), store, or a model id")
    p.add_argument("--tracking-uri", dest="tracking_uri", help="MLflow tracking URI (default: local SQLite)")
    p.add_argument("--log-level", dest="log_level", choices=["debug", "info", "warning", "error"])
    p.add_argument("--config", help="settings file (YAML; env LAB_SERVE_CONFIG)")


def add_network_flags(p: argparse.ArgumentParser, tag: str = "") -> None:
    """Where the server listens and how it guards the door (`lab serve`, `lab mcp --transport http`)."""
    p.add_argument("--host", help=f"{tag}address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, help=f"{tag}port (default 8080)")
    p.add_argument("--auth", choices=["on", "off", "auto"], help=f"{tag}API keys required (auto: unless bound to loopback)")
    p.add_argument("--keys-file", dest="keys_file", help=f"{tag}API keys file (hashed; `lab keys create` writes it)")
    p.add_argument("--rate", type=float, help=f"{tag}requests per second per key (default 50)")
    p.add_argument("--burst", type=int, help=f"{tag}requests allowed at once per key (default 100)")
    p.add_argument("--max-body-bytes", dest="max_body_bytes", type=int, help=f"{tag}request body limit (default 1 MiB)")
    p.add_argument("--mcp-sessions-per-key", dest="mcp_sessions_per_key", type=int, metavar="N",
                   help=f"{tag}MCP sessions one key may hold open at once (default 32; with auth off, the local caller's)")
    p.add_argument("--mcp-session-idle", dest="mcp_session_idle_s", type=float, metavar="S",
                   help=f"{tag}seconds an MCP session may stay idle before it is closed (default 1800)")


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
    p.add_argument("--proxy-upstream", dest="proxy_upstream", metavar="URL",
                   help="an OpenAI-compatible base URL: serve /v1/chat/completions with memory injected, forwarded there")
    p.add_argument("--proxy-timeout", dest="proxy_timeout_s", type=float, metavar="S",
                   help="seconds the upstream may take before the proxy answers 504 (default 120)")
    p.add_argument("--proxy-position", dest="proxy_position", choices=["system", "first_user", "before_last_user"],
                   help="where memory is injected by default (default system; a request may choose)")
    p.add_argument("--proxy-save", dest="proxy_save", choices=["on", "off"],
                   help="save every proxied exchange as episodic memories (default off; a request may ask)")
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
