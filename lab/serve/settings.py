"""The server's settings: from flags, then environment variables, then a config file, then defaults.

Every setting has one name; its environment variable is ``LAB_SERVE_`` + the name in capitals
(``LAB_SERVE_PORT``), its config file key the name itself (``serve.yaml``: ``port: 8080``). A
value is checked once, here, and a bad one names the setting, where it came from and what is allowed.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

from lab.errors import ValidationError

ENV_PREFIX = "LAB_SERVE_"
DEFAULT_MODEL = "models:/lab-memory@champion"
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
    embed_timeout_s: float = 30.0  # a query-embedding process silent this long is killed (hung)
    snapshot_seconds: float = 30.0  # idle time after writes before index snapshots are saved
    refresh_seconds: float = 1.0  # other processes' commits to the store are seen within this
    tracking_uri: str | None = None
    log_level: str = "info"

    def __post_init__(self) -> None:
        if self.auth not in ("on", "off", "auto"):
            raise ValidationError(f"setting auth must be on, off or auto, got {self.auth!r}")
        if not 0 <= self.port <= 65535:
            raise ValidationError(f"setting port must be 0-65535, got {self.port}")
        for name in ("rate", "burst", "max_body_bytes", "group_max", "query_batch", "model_threads",
                     "embed_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValidationError(f"setting {name} must be > 0, got {getattr(self, name)}")
        for name in ("group_wait_ms", "snapshot_seconds", "refresh_seconds", "query_embedders"):
            if getattr(self, name) < 0:
                raise ValidationError(f"setting {name} must be >= 0, got {getattr(self, name)}")
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


def _coerce(name: str, raw: Any, kind: type, where: str) -> Any:
    if raw is None:
        return None
    try:
        if kind is int and not isinstance(raw, bool):
            return int(raw)
        if kind is float and not isinstance(raw, bool):
            return float(raw)
    except (TypeError, ValueError):
        raise ValidationError(f"setting {name} from {where}: {raw!r} is not a{'n integer' if kind is int else ' number'}") from None
    if kind in (int, float):
        raise ValidationError(f"setting {name} from {where}: {raw!r} is not a number")
    if not isinstance(raw, (str, int, float)):
        raise ValidationError(f"setting {name} from {where}: {raw!r} is not a string")
    return str(raw)


_KINDS = {"port": int, "burst": int, "max_body_bytes": int, "group_max": int, "query_batch": int,
          "query_embedders": int, "model_threads": int,
          "rate": float, "embed_timeout_s": float, "group_wait_ms": float, "snapshot_seconds": float, "refresh_seconds": float}


def load_settings(flags: Mapping[str, Any] | None = None, *, env: Mapping[str, str] | None = None,
                  config_file: str | Path | None = None) -> Settings:
    """Settings from ``flags`` (None means not given), then ``env`` (default: os.environ), then
    ``config_file`` (default: $LAB_SERVE_CONFIG when set), then the defaults."""
    from lab.config import read_yaml

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
