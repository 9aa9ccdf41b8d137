"""The chat proxy's side towards its upstream: the URL a request goes to (always under the
upstream's base path), the headers it carries (the caller's own credentials, never one of lab's
keys in any scheme), and the one send that turns silence into 504 and no connection into 502.
"""
from __future__ import annotations

import base64
import binascii
import re
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from lab.serve.state import ApiError, AppState

# request headers passed to the upstream as they are (besides Authorization)
PASSED = ("openai-organization", "openai-project", "openai-beta", "accept", "user-agent")
# the characters a path segment keeps unquoted (RFC 3986 pchar, less '%': a segment is quoted whole;
# less ';', which some servers read as the start of path parameters)
SEGMENT_SAFE = "!$&'()*+,=:@-._~"
# an Authorization value split into the pieces a key could be hidden in (scheme, token, user, password)
_PIECES = re.compile(r"[\s,;=:\"']+")
MAX_PIECES = 64  # a header of more pieces is not forwarded: checking each costs a hash


def _pieces(value: str) -> set[str] | None:
    """Every piece of an Authorization value a key could be: the words, and the words of any piece
    that is base64 (``Basic b64(user:password)``); None when there are too many to check."""
    words = [w for w in _PIECES.split(value.strip()) if w]
    found = set(words)
    for word in words:
        try:
            decoded = base64.b64decode(word + "=" * (-len(word) % 4), validate=True).decode("utf-8")
        except (binascii.Error, ValueError):
            continue
        found.update(w for w in _PIECES.split(decoded) if w)
    found.add(value.strip())
    return found if len(found) <= MAX_PIECES else None


def carries_lab_key(value: str, state: AppState, also: tuple[str, ...] = ()) -> bool:
    """Does an Authorization value hold one of lab's keys (or one of ``also``), in any scheme:
    ``Bearer K``, ``Token K``, a bare ``K``, ``Basic b64(K:)`` or ``Basic b64(user:K)``?"""
    pieces = _pieces(value)
    if pieces is None:
        return True  # not checked, so not forwarded
    known = {a for a in also if a}
    return any(p in known or state.keys.find(p) is not None for p in pieces)


def upstream_headers(request: Any, state: AppState) -> dict[str, str]:
    """The headers the upstream gets: the caller's own credentials and the passed-through ones.
    An ``Authorization`` (or ``X-Upstream-Authorization``) that carries one of lab's own keys never
    leaves (a client configured with lab's key as its api_key sends it both as X-API-Key and as
    Authorization); with auth on and no X-API-Key, Authorization carried lab's key and stays here."""
    h = request.headers
    out = {k: h[k] for k in PASSED if k in h}
    out["content-type"] = "application/json"
    own = (h.get("x-api-key", ""),)
    if h.get("x-upstream-authorization"):
        if not carries_lab_key(h["x-upstream-authorization"], state, own):
            out["authorization"] = h["x-upstream-authorization"]
    elif h.get("authorization") and not (state.auth_on and not h.get("x-api-key")):
        if not carries_lab_key(h["authorization"], state, own):
            out["authorization"] = h["authorization"]
    return out


def upstream_url(base: str, path: str = "chat/completions", query: str = "") -> str:
    """The upstream's URL for ``path`` (the part after ``/v1/``, quoted already): appended to the
    base URL's path, the base's query kept (``https://x/openai?api-version=2024-06-01``) and the
    caller's added."""
    parts = urlsplit(base)
    joined = "&".join(q for q in (parts.query, query) if q)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/" + path.lstrip("/"), query=joined))


def contained_url(base: str, segments: list[str], query: str = "") -> str:
    """The upstream's URL for the decoded path ``segments``, each quoted as one segment, and
    checked once more as the client library will send it: same scheme, host and port as ``base``
    and a path under the base's path (defence in depth: the segments were refused already when one
    could leave it)."""
    url = upstream_url(base, "/".join(quote(s, safe=SEGMENT_SAFE) for s in segments), query)
    sent, home = httpx.URL(url), httpx.URL(base)
    under = home.raw_path.split(b"?", 1)[0].rstrip(b"/") + b"/"
    if (sent.scheme, sent.host, sent.port) != (home.scheme, home.host, home.port) \
            or not sent.raw_path.split(b"?", 1)[0].startswith(under):
        raise ApiError(400, f"path /v1/{'/'.join(segments)} would leave the upstream's base path "
                            f"{under.decode('latin-1')}: refused", field="path")
    return url


def shown_url(url: str) -> str:
    """``url`` as an error or a log line may show it: no user name or password, no query (an
    upstream's key often travels in one)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


async def send_upstream(state: AppState, upstream: httpx.Request, shown: str) -> httpx.Response:
    """The upstream's answer, streamed; silence past the timeout is 504, no connection 502."""
    try:
        return await state.proxy_client.send(upstream, stream=True)
    except httpx.TimeoutException:
        raise ApiError(504, f"the upstream {shown} did not answer within {state.settings.proxy_timeout_s:g} s") from None
    except httpx.HTTPError as exc:
        raise ApiError(502, f"the upstream {shown} could not be reached ({type(exc).__name__})") from None
