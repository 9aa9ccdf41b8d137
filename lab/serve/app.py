"""The FastAPI application: ``create_app(settings)``, its middleware and the one error mapping.

Every error leaves as ``{"error": {"status", "code", "message", "field"}}``: validation 422 naming
the field, unknown ids and namespaces 404, auth 401/403, rate limit 429 with Retry-After, body
limit 413. Messages are lab's own, with file paths and internals taken out; an unexpected error
is logged with its traceback and answered 500 with no detail.
"""
from __future__ import annotations

import logging
import re
import threading
import time
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, Callable, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from lab.errors import LabError
from lab.serve import routes
from lab.serve.auth import KeyRing, RateLimiter
from lab.serve.bundle import Served
from lab.serve.errors import first_problem, public_error, store_roots
from lab.serve.guard import RequestGuard
from lab.serve.ops import RESERVED_LAST_SEGMENT
from lab.serve.metrics import Metrics
from lab.serve.service import MemoryService
from lab.serve.settings import Settings
from lab.serve.state import ApiError, AppState, error_response
from lab.store.settings import StoreSettings
from lab.version import __version__

log = logging.getLogger("lab.serve")

class BodyLimit:
    """Refuses request bodies over ``limit`` bytes with 413, by Content-Length or while streaming."""
    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                if int(declared) > self.limit:
                    return await self.too_large()(scope, receive, send)
            except ValueError:
                return await error_response(400, "Content-Length is not a number")(scope, receive, send)
        if declared is not None:
            return await self.app(scope, receive, send)
        # no Content-Length (a chunked body): read it here, up to the limit, then hand it on.
        # Refusing it from inside the app's own read would reach the client as a parse error (400).
        chunks, seen = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            chunks.append(message.get("body", b""))
            seen += len(chunks[-1])
            if seen > self.limit:
                return await self.too_large()(scope, receive, send)
            if not message.get("more_body", False):
                break
        body, replayed = b"".join(chunks), False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def too_large(self) -> JSONResponse:
        return error_response(413, f"request body over {self.limit} bytes")


class Unexpected:
    """Answers an unexpected exception with lab's 500 body and keeps the connection usable.

    Starlette's own last-resort handler sends the 500 and then re-raises, and the server closes
    the connection on the re-raised error: the client's next request on it was reset."""
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracked(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracked)
        except Exception:
            log.exception("unexpected error on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise  # half a response is out: only closing the connection ends it
            await error_response(500, "internal error; the server log has the details")(scope, receive, send)


class Measure:
    """Counts requests and times them per route template (plain ASGI: no per-request task)."""
    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = [500]

        async def sent(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            path = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(path, scope["method"], str(status[0])).inc()
            self.metrics.latency.labels(path, scope["method"]).observe(time.perf_counter() - started)


def allowed_methods(app: FastAPI, scope: dict) -> list[str]:
    """The methods some operation of ``app``'s API answers on the request's path (from its OpenAPI
    paths: included routers are not plain route lists to walk in every FastAPI release)."""
    table = getattr(app.state, "method_table", None)
    if table is None:
        table = [(re.compile("^" + re.sub(r"\\{[^}]+\\}", ".+", re.escape(path)) + "$"),
                  {m.upper() for m in ops})
                 for path, ops in app.openapi().get("paths", {}).items()]
        app.state.method_table = table
    path = scope.get("path", "")
    methods: set[str] = set()
    for pattern, ops in table:
        if pattern.match(path):
            methods |= ops
    if path.rstrip("/").endswith("/" + RESERVED_LAST_SEGMENT):
        methods.discard("DELETE")  # a namespace's statistics, read-only: its DELETE answers 405 itself
    return sorted(methods)  # no HEAD: the API's routes do not answer it (405), so it is not offered


# another face of the same service (MCP): a path, its ASGI app and a lifespan to run beside the app's
Face = tuple[str, Any, Callable[[], AbstractAsyncContextManager[None]]]


def _lifespan(state: AppState, mounted: list[Face]):
    """The app's lifespan: the service warms in a thread (ready when it is), the chat proxy's HTTP
    client and each mounted face's own lifespan are open while the app runs; the service closes last."""
    service, settings, metrics = state.service, state.settings, state.metrics

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        def warm() -> None:
            service.warm()
            metrics.ready.set(1 if service.ready.is_set() else 0)

        threading.Thread(target=warm, name="lab-warm", daemon=True).start()
        async with AsyncExitStack() as stack:
            if settings.proxy_upstream:
                import httpx

                state.proxy_client = await stack.enter_async_context(httpx.AsyncClient(
                    timeout=httpx.Timeout(settings.proxy_timeout_s, connect=min(10.0, settings.proxy_timeout_s))))
            for _, _, face_lifespan in mounted:
                await stack.enter_async_context(face_lifespan())
            yield
        service.close()
    return lifespan


def create_app(settings: Settings, served: Served, *, service: MemoryService | None = None,
               keys: KeyRing | None = None, faces: Sequence[Callable[[AppState], Face]] = (),
               stores: StoreSettings | None = None) -> FastAPI:
    """The REST app over ``served`` (a GO configuration) and the store ``settings`` names, with
    each of ``faces`` (built over the same state: same service, keys and rate limits) as a route; the store
    is opened with ``stores`` (lab.store.settings: `lab serve` hands its workspace's; None: the built-in defaults)."""
    metrics = Metrics()
    service = service or MemoryService(settings, served, observer=metrics, stores=stores)
    service.observer = metrics
    keys = keys if keys is not None else KeyRing.load(settings.keys_file)
    state = AppState(settings, service, keys, RateLimiter(settings.rate, settings.burst), metrics, settings.auth_on)
    metrics.count_memories(lambda: service.read(
        lambda: dict(service.store.memories().group_by("namespace").len().iter_rows())))

    mounted = [make(state) for make in faces]
    lifespan = _lifespan(state, mounted)

    # with auth on, the API's own description is behind a key too (everything but /health and a
    # yes/no /ready is): its documents are served by routes that authenticate like any other
    # /docs is served here, not by FastAPI, whose page loads Swagger UI from a CDN (blank offline):
    # the same page with the scripts from a package (routes.docs_assets)
    hidden = {"openapi_url": None} if settings.auth_on else {}
    app = FastAPI(title="lab memory API", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  **hidden, description="Save, search and assemble agent memories with a gated retrieval configuration.")
    routes.document_routes(app, guarded=settings.auth_on)
    app.state.lab = state
    root = store_roots(service.store)

    @app.exception_handler(ApiError)
    @app.exception_handler(LabError)
    async def lab_error(request: Request, exc: Exception) -> JSONResponse:
        error = public_error(exc, root, where=f"{request.method} {request.url.path}")
        field = error.field
        if isinstance(exc, LabError) and field:  # named like pydantic's errors: where the field was sent
            field = ("body." if request.method in ("POST", "PATCH", "PUT") else "query.") + field
        return error_response(error.status, error.message, field, error.headers or None)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        error = first_problem(exc.errors(), lambda loc: routes.known_fields(request, loc))
        return error_response(error.status, error.message, error.field)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            # FastAPI's words for a body its JSON parser gave up on (nested past the parser's depth):
            # answered like any other body that is not JSON
            return error_response(422, "body: not JSON that can be read (malformed, or nested too deeply)", "body")
        if exc.status_code == 405:  # every method the path answers to, not only its first route's
            headers = {**(headers or {}), "Allow": ", ".join(allowed_methods(app, request.scope))}
        return error_response(exc.status_code, str(exc.detail), headers=headers)

    app.include_router(routes.operations)
    app.include_router(routes.v1)
    if settings.proxy_upstream:
        app.include_router(routes.proxy)
    for path, face_app, _ in mounted:
        app.router.routes.append(Route(path, endpoint=face_app, methods=["GET", "POST", "DELETE"]))
    app.add_middleware(Unexpected)  # innermost: an error never reaches Starlette's re-raising handler
    app.add_middleware(Measure, metrics=metrics)
    app.add_middleware(BodyLimit, limit=settings.max_body_bytes)
    app.add_middleware(RequestGuard, loopback=settings.loopback)  # outermost: refused before any work
    return app
