"""API keys (stored hashed), per-key namespace permissions and scopes, and per-key rate limits.

A keys file (YAML or JSON) lists keys by the SHA-256 of their secret, never the secret itself::

    keys:
      - name: agent-a
        sha256: 9f86d08...          # `lab keys create` prints the secret once and writes this
        scope: write                # read | write (write includes read)
        namespaces: ["team-a/*", "project-x"]

``$LAB_API_KEYS`` may hold the same list (YAML or JSON); there an entry may give ``key`` (the
secret) instead of ``sha256``, hashed at load and not kept. Namespace patterns: ``*`` is every
namespace, ``team-a/*`` every namespace under ``team-a/`` (not ``team-a`` itself), anything else
one namespace exactly. Secrets are random 32-byte tokens, so one SHA-256 is the right hash (a slow
password hash buys nothing against guessing 256 bits and costs every request).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lab.config import read_yaml
from lab.errors import ValidationError
from lab.store.records import validate_namespace

SCOPES = ("read", "write")
KEY_PREFIX = "lab_"


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class ApiKey:
    name: str
    sha256: str
    scope: str
    namespaces: tuple[str, ...]

    def can(self, namespace: str, write: bool = False) -> bool:
        """May this key read (or write) ``namespace``?"""
        if write and self.scope != "write":
            return False
        return any(p == "*" or p == namespace or (p.endswith("/*") and namespace.startswith(p[:-1]))
                   for p in self.namespaces)

    def can_all(self) -> bool:
        """Granted every namespace (may list and create any)."""
        return "*" in self.namespaces


def _entry(raw: Any, where: str, allow_secret: bool) -> ApiKey:
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where}: a key is a mapping with name, sha256, scope and namespaces")
    known = {"name", "sha256", "scope", "namespaces"} | ({"key"} if allow_secret else set())
    unknown = sorted(set(raw) - known)
    if unknown:
        hint = " (secrets are not kept in a keys file: give sha256)" if "key" in unknown else ""
        raise ValidationError(f"{where}: unknown field(s) {unknown}; known: {sorted(known)}{hint}")
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"{where}: field 'name' must be a non-empty string")
    digest = raw.get("sha256")
    if digest is None and allow_secret and isinstance(raw.get("key"), str) and raw["key"]:
        digest = hash_key(raw["key"])
    if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise ValidationError(f"{where} ({name}): field 'sha256' must be 64 lowercase hex digits"
                              + (" (or give 'key')" if allow_secret else ""))
    scope = raw.get("scope", "read")
    if scope not in SCOPES:
        raise ValidationError(f"{where} ({name}): field 'scope' must be one of {list(SCOPES)}, got {scope!r}")
    patterns = raw.get("namespaces")
    if isinstance(patterns, str):
        patterns = [patterns]
    if not isinstance(patterns, list) or not patterns or not all(isinstance(p, str) and p for p in patterns):
        raise ValidationError(f"{where} ({name}): field 'namespaces' must be a non-empty list of patterns "
                              "('*', 'team-a/*', 'project-x')")
    for p in patterns:
        check_pattern(p, f"{where} ({name}): namespace pattern")
    return ApiKey(name, digest, scope, tuple(patterns))


def check_pattern(pattern: str, where: str) -> str:
    """A namespace pattern: '*', a namespace, or a namespace followed by '/*'."""
    if pattern != "*":
        try:
            validate_namespace(pattern[:-2] if pattern.endswith("/*") else pattern)
        except ValidationError:
            raise ValidationError(f"{where} {pattern!r} is neither '*', a namespace, nor a namespace "
                                  "followed by '/*'") from None
    return pattern


def _parse_list(data: Any, where: str, allow_secret: bool) -> list[ApiKey]:
    if isinstance(data, Mapping):
        data = data.get("keys")
    if not isinstance(data, list):
        raise ValidationError(f"{where}: expected a list of keys (or a mapping with 'keys')")
    return [_entry(item, f"{where} key {i}", allow_secret) for i, item in enumerate(data)]


@dataclass
class KeyRing:
    """Every key the server accepts, looked up by hash (compared in constant time)."""
    keys: list[ApiKey] = field(default_factory=list)

    @classmethod
    def load(cls, keys_file: str | Path | None, env: Mapping[str, str] | None = None) -> "KeyRing":
        import yaml


        env = os.environ if env is None else env
        keys: list[ApiKey] = []
        if keys_file:
            keys += _parse_list(read_yaml(keys_file, "keys file") or [], str(keys_file), allow_secret=False)
        if env.get("LAB_API_KEYS"):
            try:
                data = yaml.safe_load(env["LAB_API_KEYS"])
            except yaml.YAMLError:
                raise ValidationError("$LAB_API_KEYS is neither YAML nor JSON") from None
            keys += _parse_list(data, "$LAB_API_KEYS", allow_secret=True)
        names = [k.name for k in keys]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValidationError(f"key name(s) {dup} are given more than once")
        return cls(keys)

    def find(self, secret: str) -> ApiKey | None:
        digest = hash_key(secret)
        found = None
        for key in self.keys:  # every key is compared, so timing does not tell which one came close
            if hmac.compare_digest(key.sha256, digest):
                found = key
        return found


def add_key(keys_file: str | Path, name: str, scope: str, namespaces: list[str]) -> str:
    """Create a key in ``keys_file`` (created when absent); returns the secret, which is not stored."""
    import yaml

    path = Path(keys_file)
    existing: list[dict[str, Any]] = []
    if path.is_file():
        existing = [k.__dict__ | {"namespaces": list(k.namespaces)} for k in KeyRing.load(path, env={}).keys]
    if any(k["name"] == name for k in existing):
        raise ValidationError(f"{path} has a key named {name!r} already")
    secret = new_secret()
    entry = _entry({"name": name, "sha256": hash_key(secret), "scope": scope, "namespaces": namespaces},
                   "new key", allow_secret=False)
    existing.append({"name": entry.name, "sha256": entry.sha256, "scope": entry.scope,
                     "namespaces": list(entry.namespaces)})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump({"keys": existing}, sort_keys=False), encoding="utf-8")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return secret


def describe(ring: KeyRing) -> list[dict[str, Any]]:
    """The keys without their hashes, for listing."""
    return [{"name": k.name, "scope": k.scope, "namespaces": list(k.namespaces)} for k in ring.keys]


class RateLimiter:
    """A token bucket per caller: ``rate`` requests per second refilled, up to ``burst`` at once.

    Used from the event loop only (one thread), so it needs no lock."""
    def __init__(self, rate: float, burst: int, clock=time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # caller -> (tokens, at)

    def take(self, caller: str) -> float:
        """0 when the request may go ahead, else the seconds until a token is back."""
        now = self.clock()
        tokens, at = self._buckets.get(caller, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) * self.rate)
        if tokens >= 1.0:
            self._buckets[caller] = (tokens - 1.0, now)
            return 0.0
        self._buckets[caller] = (tokens, now)
        return (1.0 - tokens) / self.rate
