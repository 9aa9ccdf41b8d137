"""Who is calling: the key a request carries (or none, with auth off), its rate-limit bucket, and
what it may do with a namespace. Every face (REST, MCP, the chat proxy) authenticates here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from lab.serve.auth import ApiKey
from lab.serve.state import ApiError, AppState


@dataclass
class Caller:
    key: ApiKey | None  # None: auth is off, everything is allowed

    def can(self, namespace: str, write: bool = False) -> bool:
        return self.key is None or self.key.can(namespace, write)

    def require(self, namespace: str, write: bool = False) -> None:
        if self.key is None:
            return
        if not self.key.can(namespace):
            raise ApiError(403, f"key {self.key.name!r} has no access to namespace {namespace!r}")
        if write and not self.key.can(namespace, write=True):
            raise ApiError(403, f"key {self.key.name!r} is read-only: it cannot write to namespace {namespace!r}")

    def only_namespace(self) -> str | None:
        """The one namespace this key is for, when it names exactly one (a default for faces
        whose callers do not say which)."""
        if self.key is None or len(self.key.namespaces) != 1:
            return None
        pattern = self.key.namespaces[0]
        return None if pattern == "*" or pattern.endswith("/*") else pattern


def bearer(authorization: str) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` value (the scheme in any case), else ""."""
    scheme, _, token = authorization.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def secret_of(headers: Mapping[str, str], *, api_key_first: bool = False) -> str:
    """lab's key a request carries (``headers`` read with lower-case names): ``Authorization:
    Bearer KEY``, else ``X-API-Key: KEY``. On the chat proxy's routes ``Authorization`` belongs to
    the upstream first, so ``X-API-Key`` is read first there (``api_key_first``)."""
    token, api_key = bearer(headers.get("authorization") or ""), headers.get("x-api-key") or ""
    return (api_key or token) if api_key_first else (token or api_key)


def _take(state: AppState, who: str) -> None:
    wait = state.limiter.take(who)
    if wait > 0:
        state.metrics.rate_limited.inc()
        raise ApiError(429, f"rate limit of {state.settings.rate:g} requests/s (burst {state.settings.burst}) "
                            "exceeded; retry later", headers={"Retry-After": str(max(1, math.ceil(wait)))})


def authenticate(state: AppState, secret: str, client_host: str) -> Caller:
    """The caller a request's secret names (when auth is on), after taking a token from its
    rate-limit bucket. A request without a valid key takes its token from its client address's
    bucket first, so guessing keys is rate-limited like any other request."""
    address = f"addr:{client_host}"
    key = None
    if state.auth_on:
        key = state.keys.find(secret) if secret else None
        if key is None:
            _take(state, "failed-" + address)
            if not secret:
                raise ApiError(401, "an API key is required: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                               headers={"WWW-Authenticate": "Bearer"})
            raise ApiError(401, "the API key is not valid", headers={"WWW-Authenticate": "Bearer"})
    _take(state, f"key:{key.name}" if key else address)
    return Caller(key)
