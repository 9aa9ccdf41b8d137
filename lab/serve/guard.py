"""The door every request of `lab serve` passes first (REST, /mcp and the chat proxy alike):
Host, Origin and body type, checked before authentication or any work.

- **Host**: bound to loopback (where auth is off by default), a request must name a loopback
  host (``127.0.0.1``, ``localhost``, ``[::1]``, any port). A page on another site that points
  its own DNS name at 127.0.0.1 (DNS rebinding) sends its own name as Host: 421.
- **Origin**: a request a browser sends on behalf of a page carries the page's origin; one that
  is not this server's own (the Host it asked for) is cross-site: 403. ``Origin: null``
  (sandboxed frames, files) is cross-site too.
- **Body type**: a POST, PUT or PATCH with a body must say it is JSON (``application/json`` or
  ``application/*+json``): 415. A browser sends ``text/plain`` cross-site without asking first
  (no CORS preflight), so accepting it would let any page write through the server.
"""
from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from lab.serve.state import error_response

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
BODY_METHODS = ("POST", "PUT", "PATCH")


def host_name(host: str) -> str:
    """``host[:port]`` (``[v6]:port`` for IPv6) -> the bare host name, lower-cased."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_json_type(content_type: str) -> bool:
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


class RequestGuard:
    """ASGI: refuses a request with the wrong Host (when bound to loopback), a cross-site Origin,
    or a body that is not declared JSON, with lab's error body naming what was refused."""

    def __init__(self, app: Any, loopback: bool) -> None:
        self.app, self.loopback = app, loopback

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        problem = self.problem(scope["method"], headers)
        if problem is not None:
            status, message, field = problem
            return await error_response(status, message, field)(scope, receive, send)
        await self.app(scope, receive, send)

    def problem(self, method: str, headers: dict[str, str]) -> tuple[int, str, str | None] | None:
        host = headers.get("host", "")
        if self.loopback and host_name(host) not in LOOPBACK_NAMES:
            return (421, f"Host {host!r} is not this server's name: bound to loopback, it answers only requests "
                         f"for {', '.join(LOOPBACK_NAMES)} (another name is a DNS-rebinding page)", "header.host")
        origin = headers.get("origin")
        if origin is not None:
            parts = urlsplit(origin)
            if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.lower():
                return (403, f"Origin {origin!r} is another site than this server ({host!r}): cross-site requests "
                             "are refused", "header.origin")
        if method in BODY_METHODS and (headers.get("content-length", "0") not in ("", "0")
                                       or "transfer-encoding" in headers):
            kind = headers.get("content-type", "")
            if not is_json_type(kind):
                return (415, f"Content-Type {kind or '(none)'!r} is not JSON: send the body as application/json",
                        "header.content-type")
        return None
