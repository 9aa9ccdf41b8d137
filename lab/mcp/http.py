"""The MCP face over streamable HTTP, inside `lab serve` (``--mcp``): one more route of the same
app, behind the same keys, namespace scopes and rate limits as REST.

``KeyGate`` authenticates each HTTP request exactly as a REST route does (``ops.authenticate``)
and leaves the caller in the request's scope, where the tools find it.
"""
from __future__ import annotations

from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from lab.mcp.server import SCOPE_KEY, build_server
from lab.serve.ops import authenticate
from lab.serve.state import ApiError, AppState, error_response

MCP_PATH = "/mcp"


class KeyGate:
    """ASGI: authenticate and rate-limit, then hand the request to the MCP transport."""

    def __init__(self, app: Any, state: AppState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        auth = headers.get("authorization", "")
        secret = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "")
        client = scope.get("client") or ("-", 0)
        try:
            scope[SCOPE_KEY] = authenticate(self.state, secret, client[0])
        except ApiError as exc:
            return await error_response(exc.status, exc.message, exc.field, exc.headers)(scope, receive, send)
        await self.app(scope, receive, send)


def mcp_face(state: AppState) -> tuple[str, Any, Any]:
    """(path, ASGI app, lifespan) of the MCP endpoint over ``state``, for ``create_app(faces=...)``."""
    server = build_server(state)
    # the MCP SDK's own check of Host and Origin (against DNS rebinding) when bound to loopback
    server.streamable_http_app(streamable_http_path=MCP_PATH, host=state.settings.host)
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

    manager = server.session_manager
    app = KeyGate(StreamableHTTPASGIApp(manager), state)

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with manager.run():
            yield

    return MCP_PATH, app, lifespan
