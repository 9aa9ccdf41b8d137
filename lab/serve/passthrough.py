"""The proxy's passthrough: a ``/v1/*`` request that is not lab's own goes to the upstream as it
came (method, query, body, the caller's credentials; nothing injected), within three limits:

- **the path stays under the upstream's base path**: the path is read as sent (not as the
  server decoded it) and split into segments; a ``.`` or ``..`` segment (also ``%2e%2e``, and
  ``..;x``, which servers that read path parameters take for ``..``), an
  encoded ``/`` or ``\\`` inside a segment (``..%2f``), a ``%`` left after decoding (a double
  encoding), NUL or another control character, or an empty segment is refused 400 naming it. Each
  segment is quoted again as one segment, and the URL the upstream gets is checked once more to
  be under the base path, on the base's host.
- **only allowed paths**: the setting ``proxy_passthrough`` lists the path prefixes that pass
  (``models`` and ``embeddings`` by default); another is 404 naming the path and the setting.
- **a read-only key only reads**: through the passthrough a key of scope ``read`` may send GET
  only (list the models, describe one); any other method can create, change or delete something
  upstream, or spend the account's quota with credentials the base URL may carry, which a key
  promised to change nothing must not do: 403 naming the key, the method and the path.

``/v1/chat/completions/`` (a trailing slash) is the chat route, never forwarded as a passthrough
with lab's own body field in it; another method on the chat path is 405 (``Allow: POST``).
"""
from __future__ import annotations

import logging
from typing import AsyncIterator
from urllib.parse import unquote

import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from lab.serve.caller import Caller, authenticate, secret_of
from lab.serve.proxy import chat_completions
from lab.serve.state import ApiError, AppState
from lab.serve.upstream import contained_url, send_upstream, shown_url, upstream_headers

log = logging.getLogger("lab.serve.proxy")

PREFIX = "/v1/"
FORWARDED = ("GET", "POST", "PUT", "PATCH", "DELETE")
CHAT = ["chat", "completions"]
SETTING = "proxy_passthrough"


def _control(text: str) -> str | None:
    return next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)


def segments_of(raw_path: str) -> list[str]:
    """The decoded segments after ``/v1/`` of a path as sent (still percent-encoded), a trailing
    slash kept as a last empty segment; a segment that could leave the base path, or that no
    upstream path has, is refused 400 naming it."""
    if not raw_path.startswith(PREFIX):
        raise ApiError(400, f"path {raw_path[:200]!r} is not under /v1/", field="path")
    parts = raw_path[len(PREFIX):].split("/")
    out = []
    for i, part in enumerate(parts):
        shown = f"segment {i + 1} ({part[:80]!r}) of {'/v1/' + '/'.join(parts)[:200]!r}"
        try:
            segment = unquote(part, errors="strict") if "%" in part else part
        except UnicodeDecodeError:
            raise ApiError(400, f"path {shown} does not decode as UTF-8", field="path") from None
        bad = _control(segment)
        if bad is not None:
            raise ApiError(400, f"path {shown} holds the control character {bad!r} (NUL, CR, LF and the like "
                                "are refused)", field="path")
        # '..;x' is '..' to servers that read ';' as the start of path parameters (Tomcat, Spring)
        if segment.split(";", 1)[0] in (".", ".."):
            raise ApiError(400, f"path {shown} is a dot segment: '.' and '..' (also written %2e) are refused, "
                                "so a request cannot leave the upstream's base path", field="path")
        if "/" in segment or "\\" in segment:
            raise ApiError(400, f"path {shown} holds an encoded '/' or '\\': refused, so a request cannot leave "
                                "the upstream's base path", field="path")
        if "%" in segment:
            raise ApiError(400, f"path {shown} is percent-encoded twice: refused", field="path")
        if not segment and i != len(parts) - 1:
            raise ApiError(400, f"path {shown} is empty ('//'): refused", field="path")
        out.append(segment)
    return out


def allowed(segments: list[str], prefixes: tuple[str, ...]) -> bool:
    """Is the path (its segments, a trailing slash ignored) one of ``prefixes`` or under one?"""
    path = [s for s in segments if s] if segments and not segments[-1] else segments
    return any(path[:len(p.split("/"))] == p.split("/") for p in prefixes)


def check_scope(request: Request, state: AppState, who: Caller, segments: list[str]) -> None:
    """The allow-list, then the key's scope (see the module's docstring)."""
    path = "/v1/" + "/".join(segments)
    prefixes = state.settings.proxy_passthrough
    if not allowed(segments, prefixes):
        listed = ", ".join(f"/v1/{p}" for p in prefixes) if prefixes else "none"
        raise ApiError(404, f"{path} is neither one of lab's paths nor a path the passthrough allows (setting "
                            f"{SETTING}: {listed})", field="path")
    if who.key is not None and who.key.scope != "write" and request.method != "GET":
        raise ApiError(403, f"key {who.key.name!r} is read-only: through the passthrough it may only GET, "
                            f"not {request.method} {path}")


async def passthrough(request: Request, state: AppState) -> Response:
    """Any other ``/v1/*`` request to the upstream as it came (see the module's docstring)."""
    # who first: a request without a valid key learns nothing of the path's rules
    who = authenticate(state, secret_of(request.headers, api_key_first=True),
                       request.client.host if request.client else "-")
    raw = request.scope.get("raw_path") or request.scope["path"].encode("utf-8")
    segments = segments_of(raw.decode("latin-1").split("?", 1)[0])
    if [s for s in segments if s] == CHAT:  # the chat route with a trailing slash
        if request.method != "POST":
            raise ApiError(405, f"{request.method} /v1/{'/'.join(segments)}: the chat route answers POST only",
                           headers={"Allow": "POST"})
        return await chat_completions(request, state, who)
    if request.method not in FORWARDED:
        raise ApiError(405, f"{request.method} is not passed through to the upstream: the passthrough forwards "
                            f"{', '.join(FORWARDED)}", headers={"Allow": ", ".join(FORWARDED)})
    check_scope(request, state, who, segments)
    headers = upstream_headers(request, state)
    if request.headers.get("content-type"):
        headers["content-type"] = request.headers["content-type"]
    else:
        headers.pop("content-type", None)
    url = contained_url(state.settings.proxy_upstream, segments, request.url.query)
    shown = shown_url(url)
    reply = await send_upstream(state, state.proxy_client.build_request(
        request.method, url, content=await request.body(), headers=headers), shown)

    async def relay() -> AsyncIterator[bytes]:
        try:
            async for chunk in reply.aiter_bytes():
                yield chunk
        except httpx.HTTPError as exc:
            log.warning("the upstream %s broke off its answer (%s)", shown, type(exc).__name__)
        finally:
            await reply.aclose()

    return StreamingResponse(relay(), status_code=reply.status_code,
                             media_type=reply.headers.get("content-type", "application/json"),
                             headers={"X-Lab-Proxy": "passthrough"}, background=BackgroundTask(reply.aclose))
