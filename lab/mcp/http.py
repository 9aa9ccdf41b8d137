"""The MCP face over streamable HTTP, inside `lab serve` (``--mcp``): one more route of the same
app, behind the same keys, namespace scopes and rate limits as REST.

``KeyGate`` authenticates each HTTP request exactly as a REST route does (``lab.serve.caller.authenticate``)
and leaves the caller in the request's scope, where the tools find it. It also keeps the
``SessionBook``: every MCP session belongs to the key that opened it (another key naming its id
is answered as if the session did not exist, so it can neither use nor end it), and one key holds
at most ``mcp_sessions_per_key`` sessions at once, so no key can fill the server's session table
and lock the others out.
"""
from __future__ import annotations

import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator

from lab.mcp.server import SCOPE_KEY, build_server
from starlette.datastructures import Headers

from lab.serve.caller import Caller, authenticate, secret_of
from lab.serve.state import ApiError, AppState, error_response

MCP_PATH = "/mcp"
SESSION_HEADER = "mcp-session-id"
# the SDK's own answer for an unknown or expired session (a JSON-RPC error with no request id),
# given word for word to a key naming another key's session: the two must not be told apart
NO_SESSION = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'


def owner_of(caller: Caller) -> str:
    """Who a session belongs to: the key's name, or the one local caller when auth is off."""
    return f"key:{caller.key.name}" if caller.key is not None else "local"


@dataclass
class Session:
    owner: str
    in_flight: int = 0  # requests of this session being answered (an open GET stream counts)
    idle_since: float = 0.0  # monotonic time the last request ended


class SessionBook:
    """Which key opened each live session, and how many each key holds.

    The SDK closes a session once no request has been in flight for ``idle_s`` (the same
    setting is handed to it); the book forgets it by the same rule, so a key's count falls as
    its sessions idle out, and at once when it ends one with DELETE.

    An open takes its slot before the SDK sees the request (``reserve``: the count and the
    taking in one step, with no await between them, on the server's one event loop), and gives
    it back when no session came of it: concurrent opens by one key cannot all pass a count
    that none of them has raised yet."""

    def __init__(self, per_key: int, idle_s: float) -> None:
        self.per_key, self.idle_s = per_key, idle_s
        self.sessions: dict[str, Session] = {}
        self.pending: dict[str, int] = {}  # owner -> opens under way (slots taken, no session id yet)

    def prune(self, now: float) -> None:
        gone = [sid for sid, s in self.sessions.items() if s.in_flight == 0 and now - s.idle_since > self.idle_s]
        for sid in gone:
            del self.sessions[sid]

    def held_by(self, owner: str) -> int:
        """Sessions ``owner`` holds, counting the opens under way."""
        self.prune(time.monotonic())
        return sum(1 for s in self.sessions.values() if s.owner == owner) + self.pending.get(owner, 0)

    def reserve(self, owner: str) -> int | None:
        """Take a slot for an open by ``owner``: None when taken, else how many it holds (all of them)."""
        held = self.held_by(owner)
        if held >= self.per_key:
            return held
        self.pending[owner] = self.pending.get(owner, 0) + 1
        return None

    def release(self, owner: str) -> None:
        """Give back a slot taken by ``reserve`` (the open became a session, or failed)."""
        left = self.pending.get(owner, 0) - 1
        if left > 0:
            self.pending[owner] = left
        else:
            self.pending.pop(owner, None)

    def may_use(self, sid: str, owner: str) -> bool:
        """True when ``sid`` is a live session of ``owner``'s (an unknown id is not)."""
        self.prune(time.monotonic())
        session = self.sessions.get(sid)
        return session is not None and session.owner == owner

    def opened(self, sid: str, owner: str) -> None:
        self.sessions[sid] = Session(owner, 0, time.monotonic())

    def started(self, sid: str) -> None:
        if sid in self.sessions:
            self.sessions[sid].in_flight += 1

    def ended(self, sid: str, *, closed: bool = False) -> None:
        session = self.sessions.get(sid)
        if session is None:
            return
        if closed:
            del self.sessions[sid]
            return
        session.in_flight = max(0, session.in_flight - 1)
        session.idle_since = time.monotonic()


def header(scope: dict, name: str) -> str | None:
    wanted = name.encode("latin-1")
    for k, v in scope.get("headers") or []:
        if k.lower() == wanted:
            return v.decode("latin-1")
    return None


class KeyGate:
    """ASGI: authenticate and rate-limit, hold each session to its key, then hand the request
    to the MCP transport."""

    def __init__(self, app: Any, state: AppState, book: SessionBook) -> None:
        self.app, self.state, self.book = app, state, book

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        client = scope.get("client") or ("-", 0)
        try:
            caller = authenticate(self.state, secret_of(Headers(scope=scope)), client[0])
        except ApiError as exc:
            return await error_response(exc.status, exc.message, exc.field, exc.headers)(scope, receive, send)
        scope[SCOPE_KEY] = caller
        owner = owner_of(caller)
        sid = header(scope, SESSION_HEADER)
        if sid is None:
            return await self.open(scope, receive, send, caller, owner)
        if not self.book.may_use(sid, owner):
            return await self.no_session(send)
        self.book.started(sid)
        status = [0]

        async def watched(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            # a DELETE answered 2xx ended the session; a 404 means the SDK had already closed it
            self.book.ended(sid, closed=(scope["method"] == "DELETE" and status[0] < 300) or status[0] == 404)

    async def open(self, scope: dict, receive: Any, send: Any, caller: Caller, owner: str) -> None:
        """A request without a session id: an initialize, which opens a session for ``owner``."""
        if scope["method"] != "POST":  # no session opens: the SDK answers it (400, 405)
            return await self.app(scope, receive, send)
        held = self.book.reserve(owner)
        if held is not None:
            who = f"key {caller.key.name!r}" if caller.key is not None else "this server's local caller"
            message = (f"{who} holds {held} open MCP sessions, the most one key may hold (setting mcp_sessions_per_key "
                       f"= {self.book.per_key}): end one (DELETE /mcp with its mcp-session-id header) or let one idle "
                       f"out (mcp_session_idle_s = {self.book.idle_s:g} s)")
            return await error_response(429, message, headers={"Retry-After": "60"})(scope, receive, send)
        reserved = [True]

        async def watched(message: dict) -> None:
            if message["type"] == "http.response.start" and message["status"] < 400:
                new = next((v.decode("latin-1") for k, v in message.get("headers") or []
                            if k.lower() == SESSION_HEADER.encode()), None)
                if new is not None:  # the slot becomes the session, in one step
                    self.book.release(owner)
                    reserved[0] = False
                    self.book.opened(new, owner)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            if reserved[0]:  # no session came of it (refused, failed, or the client left)
                self.book.release(owner)

    @staticmethod
    async def no_session(send: Any) -> None:
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(NO_SESSION)).encode())]})
        await send({"type": "http.response.body", "body": NO_SESSION})


def mcp_face(state: AppState) -> tuple[str, Any, Any]:
    """(path, ASGI app, lifespan) of the MCP endpoint over ``state``, for ``create_app(faces=...)``."""
    server = build_server(state)
    settings = state.settings
    # the MCP SDK's own check of Host and Origin (against DNS rebinding) when bound to loopback;
    # its idle timeout is the book's, so both forget a session at the same time
    server.streamable_http_app(streamable_http_path=MCP_PATH, host=settings.host,
                               session_idle_timeout=settings.mcp_session_idle_s)
    from mcp.server.streamable_http_manager import StreamableHTTPASGIApp

    manager = server.session_manager
    book = SessionBook(settings.mcp_sessions_per_key, settings.mcp_session_idle_s)
    app = KeyGate(StreamableHTTPASGIApp(manager), state, book)

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        async with manager.run():
            yield

    return MCP_PATH, app, lifespan
