"""The REST routes: generated from the table of operations (``lab.serve.operations``), plus the
server's own (health, readiness, metrics, documents) and the chat proxy. No domain logic.

An operation's path fields come from the path, its other fields from the JSON body (POST, PATCH)
or the query string (GET, DELETE); its answer is its output model, serialised once. Writes,
searches and context requests are queued to the service's threads and awaited; other reads run in
the request thread pool with the store to themselves (``service.read``).
"""
from __future__ import annotations

import inspect
import re
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic import create_model
from starlette.concurrency import run_in_threadpool
from starlette.convertors import Convertor, register_url_convertor

from lab.errors import StoreUnavailable
from lab.serve import contract as S
from lab.serve.auth import ApiKey
from lab.serve.caller import Caller, authenticate, secret_of
from lab.serve.operations import BY_NAME, OPERATIONS, Operation
from lab.serve.proxy import chat_completions as proxy_forward
from lab.serve.passthrough import passthrough as proxy_passthrough
from lab.serve.state import AppState
from lab.version import __version__

ERRORS = {status: {"model": S.ErrorBody} for status in (400, 401, 403, 404, 409, 413, 415, 421, 422, 429, 500, 503)}


async def get_state(request: Request) -> AppState:
    return request.app.state.lab


def identify(state: AppState, request: Request) -> ApiKey | None:
    """The key the request carries, when it is valid (no rate limit taken, no error raised)."""
    secret = secret_of(request.headers)
    return state.keys.find(secret) if secret else None


async def caller(request: Request) -> Caller:  # async: a few microseconds, no thread-pool hop
    """Authenticate (when auth is on) and take a token from the caller's rate-limit bucket."""
    return authenticate(request.app.state.lab, secret_of(request.headers), request.client.host if request.client else "-")


State = Annotated[AppState, Depends(get_state)]
Auth = Annotated[Caller, Depends(caller)]
operations = APIRouter(tags=["operations"])
proxy = APIRouter(prefix="/v1", tags=["proxy"], responses={s: ERRORS[s] for s in (401, 403, 422, 429)})
v1 = APIRouter(prefix="/v1", responses=ERRORS)


# --------------------------------------------------------------------------- operations
@operations.get("/health", response_model=S.Health)
def health() -> dict[str, Any]:
    """Liveness: the process answers."""
    return {"status": "ok", "version": __version__}


@operations.get("/ready", response_model=S.Ready, response_model_exclude_none=True, responses={503: {"model": S.Ready}})
def ready(state: State, request: Request, response: Response) -> dict[str, Any]:
    """Readiness: every namespace's index is loaded and caught up with the store. With auth on,
    a request without a valid key is told only yes or no."""
    service = state.service
    if not service.ready.is_set():
        response.status_code = 503
        if state.auth_on and identify(state, request) is None:
            return {"ready": False}
        return {"ready": False, "error": "indexes failed to load" if service.startup_error else "loading indexes"}
    told_only_yes_or_no = state.auth_on and identify(state, request) is None
    try:  # the store is asked whoever asks: a server whose store does not answer is not ready
        version, namespaces = service.read(lambda: (str(service.store.version()), len(service.store.namespaces())))
    except StoreUnavailable:
        response.status_code = 503
        return {"ready": False} if told_only_yes_or_no else {"ready": False, "error": "the store is unreachable"}
    if told_only_yes_or_no:
        return {"ready": True}
    return {"ready": True, "namespaces": namespaces, "store_version": version,
            "served": {**service.served.describe(), "embedding": service.embedding_models()}}


@operations.get("/metrics", response_class=PlainTextResponse, responses=ERRORS)
def metrics(state: State, who: Auth) -> PlainTextResponse:
    """Prometheus metrics (text exposition format). With auth on it needs a key, and memories are
    counted only for the namespaces that key may read."""
    from prometheus_client import CONTENT_TYPE_LATEST

    return PlainTextResponse(state.metrics.exposition(who.can), media_type=CONTENT_TYPE_LATEST)


def docs_assets() -> str:
    """Swagger UI's script, stylesheet and icon, from the fastapi-offline package (MIT): the docs
    page is whole without a network."""
    from importlib.resources import files

    return str(files("fastapi_offline") / "static")


DOCS_ASSETS = "/docs-assets"


def document_routes(app: Any, *, guarded: bool) -> None:
    """/docs (Swagger UI from packaged assets) and, when ``guarded`` (auth on), /openapi.json, both
    behind the key check like any other route; the assets themselves are public files."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    app.mount(DOCS_ASSETS, StaticFiles(directory=docs_assets()), name="docs-assets")

    def page() -> Any:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI",
                                   swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
                                   swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
                                   swagger_favicon_url=f"{DOCS_ASSETS}/favicon.png")

    if not guarded:
        app.get("/docs", include_in_schema=False)(page)
        return

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_document(who: Auth) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def swagger(who: Auth) -> Any:
        return page()


# --------------------------------------------------------------------------- the operations
_PATH_FIELD = re.compile(r"{(\w+)(?::path)?}")


def part_model(op: Operation, fields: list[str], suffix: str) -> Any:
    """The input model restricted to ``fields`` (the body, or the query), same limits and config."""
    if len(fields) == len(op.input.model_fields):
        return op.input
    return create_model(f"{op.input.__name__}{suffix}", __config__=op.input.model_config,
                        **{f: (op.input.model_fields[f].annotation, op.input.model_fields[f]) for f in fields})


def endpoint(op: Operation) -> Any:
    """A FastAPI endpoint for ``op``: its signature says where each input field comes from."""
    rest = op.rest
    in_path = _PATH_FIELD.findall(rest.path)
    others = [f for f in op.input.model_fields if f not in in_path]
    params = [inspect.Parameter("state", inspect.Parameter.KEYWORD_ONLY, annotation=State),
              inspect.Parameter("who", inspect.Parameter.KEYWORD_ONLY, annotation=Auth)]
    for name in in_path:
        info = op.input.model_fields[name]
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[
            info.annotation, *info.metadata, Path(description=info.description)]))
    part = None
    if others:
        part = part_model(op, others, "Body" if rest.method in ("POST", "PATCH") else "Query")
        where = Body() if rest.method in ("POST", "PATCH") else Query()
        params.append(inspect.Parameter("part", inspect.Parameter.KEYWORD_ONLY, annotation=Annotated[part, where]))
    run_sync = not inspect.iscoroutinefunction(op.function)

    async def call(*, state: AppState, who: Caller, part: Any = None, **path: Any) -> Response:
        given = part.model_dump(exclude_unset=True) if part is not None else {}
        body = op.input.model_validate({**given, **path})
        if run_sync:
            out = await run_in_threadpool(op.function, state, who, body)
        else:
            out = await op.function(state, who, body)
        return Response(out.model_dump_json(), status_code=rest.status, media_type="application/json")

    call.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    call.__name__ = op.name
    call.__doc__ = op.summary
    return call


def known_fields(request: Request, loc: tuple) -> list[str]:
    """The fields an operation's body or query accepts, for an error naming an unknown one."""
    route = request.scope.get("route")
    op = BY_NAME.get(getattr(route, "name", ""))
    if op is None or op.rest is None or len(loc) != 2:
        return []
    in_path = _PATH_FIELD.findall(op.rest.path)
    return sorted(f for f in op.input.model_fields if f not in in_path)


for _op in OPERATIONS:
    if _op.rest is not None:
        v1.add_api_route(_op.rest.path.removeprefix("/v1"), endpoint(_op), methods=[_op.rest.method],
                         status_code=_op.rest.status, response_model=_op.output, tags=[_op.rest.tag],
                         name=_op.name, summary=_op.summary.split(";")[0].rstrip("."), description=_op.summary)


# --------------------------------------------------------------------------- the chat proxy
def chat_body() -> dict[str, Any]:
    """The chat route's request body as the API document shows it: what lab reads (the messages,
    its own ``lab`` options); every other field goes to the upstream as sent."""
    message = {"type": "object", "required": ["role", "content"], "additionalProperties": True,
               "properties": {"role": {"enum": ["system", "developer", "user", "assistant", "tool"]},
                              "content": {"type": "string", "minLength": 1}}}
    example = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Who owns billing?"}],
               "lab": {"position": "before_last_user", "budget": 500}}
    return {"required": True, "content": {"application/json": {"example": example, "schema": {
        "type": "object", "required": ["messages"], "additionalProperties": True,
        "properties": {"model": {"type": "string"}, "stream": {"type": "boolean"},
                       "messages": {"type": "array", "minItems": 1, "items": message},
                       "lab": S.ProxyOptions.model_json_schema()}}}}}


@proxy.post("/chat/completions", responses={**ERRORS, 502: {"model": S.ErrorBody}, 504: {"model": S.ErrorBody}},
            openapi_extra={"requestBody": chat_body()})
async def chat_completions(request: Request, state: State) -> Response:
    """An OpenAI Chat Completions request with memory injected, forwarded to the configured upstream
    with the caller's own credentials; the upstream's answer (or stream) comes back unchanged, with
    X-Lab-Memories and X-Lab-Context-Tokens saying what was injected."""
    return await proxy_forward(request, state)


# the passthrough's route takes every method, so one it does not forward is a 405 with its Allow
ROUTED_METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS", "TRACE", "CONNECT"]


class AnyPath(Convertor):
    """Starlette's ``path`` but across line breaks too: a decoded CR or LF in a path reaches the
    passthrough, which refuses it by name (``path``'s ``.*`` stops at a newline: a bare 404)."""
    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("anypath", AnyPath())


@proxy.api_route("/{path:anypath}", methods=ROUTED_METHODS, include_in_schema=False)
async def upstream_passthrough(path: str, request: Request, state: State) -> Response:
    """Any other /v1 path the setting proxy_passthrough allows (GET /v1/models first) to the
    upstream unchanged, nothing injected (lab.serve.passthrough says within which limits). A path
    of lab's own asked with another method is still 405 (this route is the last one)."""
    # the decoded path, as routing saw it (request.url.path is encoded again: "%0A" would match ".*")
    if any(isinstance(r, APIRoute) and r.path_regex.match(request.scope["path"]) for r in (*v1.routes, *operations.routes)):
        raise StarletteHTTPException(405, "method not allowed")
    return await proxy_passthrough(request, state)
