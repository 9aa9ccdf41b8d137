"""The server's settings: from flags, then environment variables, then a config file, then defaults.

Every setting has one name; its environment variable is ``LAB_SERVE_`` + the name in capitals
(``LAB_SERVE_PORT``), its config file key the name itself (``serve.yaml``: ``port: 8080``). A
value is checked once, here, and a bad one names the setting, where it came from and what is allowed.
"""
from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping, get_type_hints

from lab.config import read_yaml
from lab.errors import ValidationError
from lab.fields import check_declared, coerce, rule, setting
from lab.store.reach import safe_uri

ENV_PREFIX = "LAB_SERVE_"
DEFAULT_MODEL = "models:/lab-memory@champion"  # the champion `lab gate --export` makes with goldens/gate.yaml
DEMO_MODEL = "models:/lab-memory-demo@champion"  # `lab demo`'s champion (goldens/gate-demo.yaml)
DEMO_STORE = ".lab/serve/demo"  # `lab serve --demo`: seeded with the demo data that champion was judged on
DEFAULT_STORE = ".lab/serve/store"


PROXY_POSITIONS = ("system", "first_user", "before_last_user")
PASSTHROUGH_DEFAULT = ("models", "embeddings")
# a passthrough prefix: path segments of letters, digits and - _ . ~ (no dot segment, no empty one)
PASSTHROUGH_PREFIX = re.compile(r"(?!\.\.?(?:/|$))[A-Za-z0-9_~.-]+(?:/(?!\.\.?(?:/|$))[A-Za-z0-9_~.-]+)*")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


# Each numeric setting's allowed range is declared with it; NaN and the infinities are never
# allowed (a NaN rate compares false with everything and would turn limiting off). The lower bounds
# keep a server usable: port 0 would bind a random port no client is told of, a rate near 0 refills
# a bucket once an age, a refresh or snapshot interval of 0 re-reads the log or saves every index
# on every request, and a query-embedding process given microseconds is killed as hung on every
# query. query_embedders 0 is a real choice: embed in the server process.
@dataclass(frozen=True)
class Settings:
    """What ``lab serve`` runs with. ``bundle`` wins over ``model`` when both are set."""
    model: str = setting(DEFAULT_MODEL, doc="a registered model version: models:/NAME@ALIAS or models:/NAME/VERSION")
    bundle: str | None = setting(None, doc="an exported bundle folder, instead of the registry")
    store: str = setting(DEFAULT_STORE, doc="the store served (created on first start with the gated index settings)")
    host: str = setting("127.0.0.1", doc="the address to bind")
    port: int = setting(8080, low=1, high=65535, doc="the port to bind")
    auth: str = setting("auto", choices=("on", "off", "auto"), doc="API keys: on, off or auto (on unless bound to loopback)")
    keys_file: str | None = setting(None, doc="API keys, hashed (`lab keys create` writes it)")
    rate: float = setting(50.0, low=0.001, high=1e6, doc="requests per second per key (per client address without auth)")
    burst: int = setting(100, above=0, high=1e6, doc="the rate bucket's size: requests allowed at once")
    max_body_bytes: int = setting(1_048_576, above=0, high=1 << 30, doc="the largest request body")
    group_max: int = setting(256, above=0, high=100_000, doc="memories committed together at most")
    group_wait_ms: float = setting(2.0, low=0, high=10_000, doc="how long a commit waits for more writes to join it")
    query_batch: int = setting(32, above=0, high=4096, doc="queries embedded in one model call at most")
    query_embedders: int = setting(1, low=0, high=16, doc="model processes embedding queries (0: in the server process)")
    model_threads: int = setting(1, above=0, high=64, doc="threads per query-embedding model call")
    # "auto": the fastest installed backend of the stored vectors' space (MiniLM's int8 ONNX export
    # for a MiniLM store); "store": the store's own model; or a model id of that space
    query_model: str = setting("auto", doc="the model encoding queries: auto, store, or a model id of the store's space")
    embed_timeout_s: float = setting(30.0, low=1, high=86_400, doc="a query-embedding process silent this long is killed")
    snapshot_seconds: float = setting(30.0, low=1, high=86_400, doc="idle time after writes before index snapshots are saved")
    refresh_seconds: float = setting(1.0, low=0.05, high=3_600, doc="other processes' commits are seen within this")
    tracking_uri: str | None = setting(None, doc="the MLflow tracking URI")
    log_level: str = setting("info", choices=LOG_LEVELS, doc="the server log's level")
    # the OpenAI-compatible chat proxy (lab.serve.proxy): off unless an upstream is named
    proxy_upstream: str | None = setting(None, doc="the upstream's base URL, e.g. https://api.openai.com/v1")
    proxy_timeout_s: float = setting(120.0, above=0, high=86_400, doc="an upstream silent this long is answered 504")
    proxy_position: str = setting("system", choices=PROXY_POSITIONS, doc="where memory goes in the prompt")
    proxy_save: str = setting("off", choices=("on", "off"),
                              doc="on: save every proxied exchange as episodic memories (a request may ask itself)")
    # every other /v1 path reaches the upstream (with its base URL's credentials) only under one of
    # these prefixes; models and embeddings are what OpenAI clients need beside the chat route
    proxy_passthrough: tuple[str, ...] = setting(
        PASSTHROUGH_DEFAULT, doc="the /v1 paths passed through to the upstream (prefixes, comma-separated; empty: none)")
    # MCP over HTTP (--mcp): each session is bound to the key that opened it; a key (or, with auth
    # off, the one local caller) holds at most this many at once, and one idle this long is closed
    mcp_sessions_per_key: int = setting(32, low=1, high=10_000, doc="MCP sessions one key may hold at once")
    mcp_session_idle_s: float = setting(1800.0, low=1, high=86_400, doc="an MCP session idle this long is closed")

    def __post_init__(self) -> None:
        check_declared(self, said="setting ")
        if self.proxy_upstream is not None and not self.proxy_upstream.startswith(("http://", "https://")):
            raise ValidationError(f"setting proxy_upstream must be an http:// or https:// URL, got {safe_uri(self.proxy_upstream)!r}",
                                  field="proxy_upstream")
        for prefix in self.proxy_passthrough:
            if not isinstance(prefix, str) or not PASSTHROUGH_PREFIX.fullmatch(prefix):
                raise ValidationError(f"setting proxy_passthrough: {prefix!r} is not a path prefix under /v1/ (segments "
                                      "of letters, digits and - _ . ~ joined by '/', e.g. 'models' or 'fine_tuning/jobs'; "
                                      "no '.' or '..' segment)", field="proxy_passthrough")
        if not self.model.startswith("models:/"):
            raise ValidationError(f"setting model must look like models:/NAME@ALIAS or models:/NAME/VERSION, "
                                  f"got {self.model!r}", field="model")

    @property
    def loopback(self) -> bool:
        """Bound to loopback only (then auth is off unless asked for)."""
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    @property
    def auth_on(self) -> bool:
        return self.auth == "on" or (self.auth == "auto" and not self.loopback)


def load_settings(flags: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
                  config_file: str | Path | None = None) -> Settings:
    """Settings from ``flags`` (None means not given), then ``env`` (default: os.environ), then
    ``config_file`` (default: $LAB_SERVE_CONFIG when set), then the defaults."""
    env = os.environ if env is None else env
    names = [f.name for f in fields(Settings)]
    config_file = config_file or env.get(ENV_PREFIX + "CONFIG")
    from_file: dict[str, Any] = {}
    if config_file:
        data = read_yaml(config_file, "serve config file") or {}
        if not isinstance(data, dict):
            raise ValidationError(f"{config_file}: a serve config file is a mapping of settings, got {type(data).__name__}")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValidationError(f"{config_file}: unknown setting(s) {unknown}; known: {names}")
        from_file = data
    values: dict[str, Any] = {}
    hints = get_type_hints(Settings)
    for name in names:
        if flags and flags.get(name) is not None:
            raw, where = flags[name], "the command line"
        elif env.get(ENV_PREFIX + name.upper()) not in (None, ""):
            raw, where = env[ENV_PREFIX + name.upper()], f"${ENV_PREFIX}{name.upper()}"
        elif name in from_file and from_file[name] is not None:
            raw, where = from_file[name], str(config_file)
        else:
            continue
        # a file's "8080" is taken as a number too, as a flag's or a variable's is
        values[name] = _checked(name, coerce(hints[name], raw, f"setting {name} from {where}", text=True, field=name), where)
    return Settings(**values)


def _checked(name: str, value: Any, where: str) -> Any:
    """``value`` when its declared rule allows it, else an error naming where it came from."""
    problem = rule(Settings, name).problem(value)
    if problem:
        raise ValidationError(f"setting {name} from {where} {problem}", field=name)
    return value
