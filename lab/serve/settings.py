"""The server's settings: from flags, then environment variables, then a config file, then defaults.

Every setting has one name; its environment variable is ``LAB_SERVE_`` + the name in capitals
(``LAB_SERVE_PORT``), its config file key the name itself (``serve.yaml``: ``port: 8080``). A
value is checked once, here, and a bad one names the setting, where it came from and what is allowed.
"""
from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from lab.config import read_yaml
from lab.errors import ValidationError

ENV_PREFIX = "LAB_SERVE_"
DEFAULT_MODEL = "models:/lab-memory@champion"  # the champion `lab gate --export` makes with goldens/gate.yaml
DEMO_MODEL = "models:/lab-memory-demo@champion"  # `lab demo`'s champion (goldens/gate-demo.yaml)
DEMO_STORE = ".lab/serve/demo"  # `lab serve --demo`: seeded with the demo data that champion was judged on
DEFAULT_STORE = ".lab/serve/store"


@dataclass(frozen=True)
class Settings:
    """What ``lab serve`` runs with. ``bundle`` wins over ``model`` when both are set."""
    model: str = DEFAULT_MODEL  # a registered model version: models:/NAME@ALIAS or models:/NAME/VERSION
    bundle: str | None = None  # an exported bundle folder, instead of the registry
    store: str = DEFAULT_STORE  # the store served (created on first start with the gated index settings)
    host: str = "127.0.0.1"
    port: int = 8080
    auth: str = "auto"  # on | off | auto (on unless bound to loopback)
    keys_file: str | None = None  # API keys, hashed (``lab keys create`` writes it)
    rate: float = 50.0  # requests per second per key (per client address without auth), refilled
    burst: int = 100  # the bucket's size: requests allowed at once
    max_body_bytes: int = 1_048_576
    group_max: int = 256  # memories committed together at most
    group_wait_ms: float = 2.0  # how long a commit waits for more writes to join it
    query_batch: int = 32  # queries embedded in one model call at most
    query_embedders: int = 1  # model processes embedding queries (0: in the server process)
    model_threads: int = 1  # threads per query-embedding model call
    # the model encoding queries: "auto" (the fastest installed backend of the stored vectors'
    # space: MiniLM's int8 ONNX export for a MiniLM store), "store" (the store's own model), or a
    # model id of that space
    query_model: str = "auto"
    embed_timeout_s: float = 30.0  # a query-embedding process silent this long is killed (hung)
    snapshot_seconds: float = 30.0  # idle time after writes before index snapshots are saved
    refresh_seconds: float = 1.0  # other processes' commits to the store are seen within this
    tracking_uri: str | None = None
    log_level: str = "info"
    # the OpenAI-compatible chat proxy (lab.serve.proxy): off unless an upstream is named
    proxy_upstream: str | None = None  # the upstream's base URL, e.g. https://api.openai.com/v1
    proxy_timeout_s: float = 120.0  # an upstream silent this long is answered 504
    proxy_position: str = "system"  # where memory goes: system | first_user | before_last_user
    proxy_save: str = "off"  # on: save every proxied exchange as episodic memories (a request may ask itself)
    # MCP over HTTP (--mcp): each session is bound to the key that opened it; a key (or, with auth
    # off, the one local caller) holds at most this many at once, and one idle this long is closed
    mcp_sessions_per_key: int = 32
    mcp_session_idle_s: float = 1800.0

    def __post_init__(self) -> None:
        for name in RANGES:
            problem = out_of_range(name, getattr(self, name))
            if problem:
                raise ValidationError(f"setting {name} {problem}")
        if self.auth not in ("on", "off", "auto"):
            raise ValidationError(f"setting auth must be on, off or auto, got {self.auth!r}")
        if self.log_level not in LOG_LEVELS:
            raise ValidationError(f"setting log_level must be one of {list(LOG_LEVELS)}, got {self.log_level!r}")
        if self.proxy_upstream is not None and not self.proxy_upstream.startswith(("http://", "https://")):
            raise ValidationError(f"setting proxy_upstream must be an http:// or https:// URL, got {self.proxy_upstream!r}")
        if self.proxy_position not in PROXY_POSITIONS:
            raise ValidationError(f"setting proxy_position must be one of {list(PROXY_POSITIONS)}, "
                                  f"got {self.proxy_position!r}")
        if self.proxy_save not in ("on", "off"):
            raise ValidationError(f"setting proxy_save must be on or off, got {self.proxy_save!r}")
        if not self.model.startswith("models:/"):
            raise ValidationError(f"setting model must look like models:/NAME@ALIAS or models:/NAME/VERSION, "
                                  f"got {self.model!r}")

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


PROXY_POSITIONS = ("system", "first_user", "before_last_user")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")

# each numeric setting's allowed range (low, high, whether low itself is allowed); NaN and the
# infinities are never allowed (a NaN rate compares false with everything and would turn limiting off).
# The lower bounds keep a server usable: port 0 would bind a random port no client is told of, a
# rate near 0 refills a bucket once an age, a refresh or snapshot interval of 0 re-reads the log or
# saves every index on every request, and a query-embedding process given microseconds is killed
# as hung on every query. query_embedders 0 is a real choice: embed in the server process.
RANGES: dict[str, tuple[float, float, bool]] = {
    "port": (1, 65535, True),
    "rate": (0.001, 1e6, True),
    "burst": (0, 1e6, False),
    "max_body_bytes": (0, 1 << 30, False),
    "group_max": (0, 100_000, False),
    "group_wait_ms": (0, 10_000, True),
    "query_batch": (0, 4096, False),
    "query_embedders": (0, 16, True),
    "model_threads": (0, 64, False),
    "embed_timeout_s": (1, 86_400, True),
    "snapshot_seconds": (1, 86_400, True),
    "refresh_seconds": (0.05, 3_600, True),
    "proxy_timeout_s": (0, 86_400, False),
    "mcp_sessions_per_key": (1, 10_000, True),
    "mcp_session_idle_s": (1, 86_400, True),
}


def out_of_range(name: str, value: Any) -> str | None:
    """What is wrong with a numeric setting's value ('must be ...'), or None when it is allowed."""
    low, high, low_ok = RANGES[name]
    allowed = f"{'>=' if low_ok else '>'} {low:g} and <= {high:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"must be a number {allowed}, got {value!r}"
    if not math.isfinite(value):
        return f"must be a finite number {allowed}, got {value!r}"
    if not ((value >= low if low_ok else value > low) and value <= high):
        return f"must be {allowed}, got {value!r}"
    return None


def _coerce(name: str, raw: Any, kind: type, where: str) -> Any:
    if raw is None:
        return None
    if kind in (int, float):
        value: Any = None
        if not isinstance(raw, bool):
            try:
                value = float(raw)
                if kind is int:
                    value = int(value) if value.is_integer() else None
            except (TypeError, ValueError, OverflowError):
                value = None
        if value is None:
            raise ValidationError(f"setting {name} from {where}: {raw!r} is not a"
                                  f"{'n integer' if kind is int else ' number'}")
        problem = out_of_range(name, value)
        if problem:
            raise ValidationError(f"setting {name} from {where} {problem}")
        return value
    if not isinstance(raw, (str, int, float)):
        raise ValidationError(f"setting {name} from {where}: {raw!r} is not a string")
    return str(raw)


_KINDS = {"port": int, "burst": int, "max_body_bytes": int, "group_max": int, "query_batch": int,
          "query_embedders": int, "model_threads": int,
          "rate": float, "embed_timeout_s": float, "group_wait_ms": float, "snapshot_seconds": float, "refresh_seconds": float, "proxy_timeout_s": float,
          "mcp_sessions_per_key": int, "mcp_session_idle_s": float}


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
    for name in names:
        kind = _KINDS.get(name, str)
        if flags and flags.get(name) is not None:
            values[name] = _coerce(name, flags[name], kind, "the command line")
        elif env.get(ENV_PREFIX + name.upper()) not in (None, ""):
            values[name] = _coerce(name, env[ENV_PREFIX + name.upper()], kind, f"${ENV_PREFIX}{name.upper()}")
        elif name in from_file and from_file[name] is not None:
            values[name] = _coerce(name, from_file[name], kind, str(config_file))
    return Settings(**values)
