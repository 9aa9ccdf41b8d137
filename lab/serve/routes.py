"""The REST routes: parse, check permission, call the service, shape the answer. No domain logic.

Writes, searches and context requests are queued to the service's threads and awaited; other
reads run in the request thread pool with the store to themselves (``service.read``).
"""
from __future__ import annotations

import base64
import json
from datetime import datetime
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from lab.serve import ops
from lab.serve import schemas as S
from lab.serve import work as W
from lab.serve.auth import ApiKey
from lab.serve.ops import Caller
from lab.serve.proxy import chat_completions as proxy_forward
from lab.serve.state import ApiError, AppState
from lab.version import __version__

ERRORS = {status: {"model": S.ErrorBody} for status in (400, 401, 403, 404, 409, 413, 415, 421, 422, 429, 500, 503)}


async def get_state(request: Request) -> AppState:
    return request.app.state.lab


def secret_of(request: Request) -> str:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")


def identify(state: AppState, request: Request) -> ApiKey | None:
    """The key the request carries, when it is valid (no rate limit taken, no error raised)."""
    secret = secret_of(request)
    return state.keys.find(secret) if secret else None


async def caller(request: Request) -> Caller:  # async: a few microseconds, no thread-pool hop
    """Authenticate (when auth is on) and take a token from the caller's rate-limit bucket."""
    return ops.authenticate(request.app.state.lab, secret_of(request),
                            request.client.host if request.client else "-")


State = Annotated[AppState, Depends(get_state)]
MemoryIdPath = Annotated[str, Path(min_length=1, max_length=200, pattern=S.ID_PATTERN)]
NamespacePath = Annotated[str, Path(min_length=1, max_length=128, pattern=S.NAMESPACE_PATTERN)]
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
    if state.auth_on and identify(state, request) is None:
        return {"ready": True}
    version, namespaces = service.read(lambda: (str(service.store.version()), len(service.store.namespaces())))
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


# --------------------------------------------------------------------------- memories
@v1.post("/memories", status_code=201, response_model=S.CreatedOne, tags=["memories"])
async def create_memory(body: S.MemoryIn, state: State, who: Auth) -> dict[str, Any]:
    """Save one memory; acknowledged once committed, and searchable from then on."""
    return (await ops.save(state, who, [body.record()]))["one"]


@v1.post("/memories/batch", status_code=201, response_model=S.CreatedBatch, tags=["memories"])
async def create_memories(body: S.MemoryBatchIn, state: State, who: Auth) -> dict[str, Any]:
    """Save several memories in one commit; each is reported created or duplicate (already stored)."""
    got = await ops.save(state, who, [m.record() for m in body.memories])
    return {"memories": got["memories"], "version": got["version"]}


@v1.get("/memories/{memory_id:path}", response_model=S.Memory, tags=["memories"])
def get_memory(memory_id: MemoryIdPath, state: State, who: Auth) -> dict[str, Any]:
    return ops.get(state, who, memory_id)


@v1.patch("/memories/{memory_id:path}", response_model=S.Memory, tags=["memories"])
async def patch_memory(memory_id: MemoryIdPath, body: S.MemoryPatch, state: State, who: Auth) -> dict[str, Any]:
    """Change fields; a new content, title or tags re-embeds the memory before this returns."""
    return await ops.update(state, who, memory_id, body.changes())


@v1.delete("/memories/{memory_id:path}", response_model=S.Deleted, tags=["memories"])
async def delete_memory(memory_id: MemoryIdPath, state: State, who: Auth,
                        hard: Annotated[bool, Query(description="remove it for good (default: mark invalid)")] = False,
                        ) -> dict[str, Any]:
    return await ops.forget(state, who, memory_id, hard)


def encode_cursor(row: dict[str, Any]) -> str:
    raw = json.dumps([row["created_at"].isoformat(), row["id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        at, last = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(at), str(last)
    except (ValueError, TypeError):
        raise ApiError(422, "query.cursor: not a cursor this server issued", field="query.cursor") from None


@v1.get("/memories", response_model=S.MemoryPage, tags=["memories"])
def list_memories(
    state: State, who: Auth,
    namespace: Annotated[str, Query(min_length=1, max_length=128, pattern=S.NAMESPACE_PATTERN)],
    type: Annotated[Optional[list[S.MemoryType]], Query()] = None,
    tag: Annotated[Optional[list[str]], Query()] = None,
    valid: Optional[bool] = None,
    since: Optional[datetime] = None,
    until: Optional[datetime] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
    cursor: Annotated[Optional[str], Query(max_length=1000)] = None,
) -> dict[str, Any]:
    """Memories of one namespace, newest first; follow ``next_cursor`` for the next page."""
    after = decode_cursor(cursor) if cursor else None
    items, last = ops.list_page(state, who, namespace, types=type, tags=tag, valid=valid, since=since, until=until,
                                limit=limit, after=after)
    return {"items": items, "next_cursor": encode_cursor(last) if last else None}


# --------------------------------------------------------------------------- edges
@v1.post("/edges", status_code=201, response_model=S.EdgesAdded, tags=["edges"])
async def add_edges(body: S.EdgeBatchIn, state: State, who: Auth) -> dict[str, Any]:
    """Add typed edges between memories of one namespace (edges already there are skipped)."""
    return await ops.link(state, who, [e.model_dump() for e in body.edges])


@v1.get("/edges", response_model=S.EdgeList, tags=["edges"])
def list_edges(state: State, who: Auth, namespace: Annotated[str, Query(min_length=1, max_length=128, pattern=S.NAMESPACE_PATTERN)],
               memory_id: Annotated[Optional[str], Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)] = None,
               relation: Optional[S.Relation] = None) -> dict[str, Any]:
    who.require(namespace)
    ops.require_namespace(state, namespace)
    frame = state.service.read(lambda: state.service.store.edges(namespace, memory_id=memory_id, relation=relation))
    return {"items": [{k: ops.iso(v) for k, v in r.items()} for r in frame.rows(named=True)]}


@v1.delete("/edges", response_model=S.EdgesAdded, tags=["edges"])
async def delete_edges(state: State, who: Auth, src: Annotated[str, Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)],
                       dst: Annotated[str, Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)],
                       relation: Optional[S.Relation] = None) -> dict[str, Any]:
    """Remove the edges src -> dst (of one relation, or every relation); reported as ``added: -n``."""
    ops.memory_for(state, who, src, write=True)
    n = await ops.queued(state.service.submit_write(W.RemoveEdges(src, dst, relation)))
    return {"added": -n}


# --------------------------------------------------------------------------- namespaces
@v1.post("/namespaces", status_code=201, response_model=S.NamespaceOut, tags=["namespaces"])
async def create_namespace(body: S.NamespaceIn, state: State, who: Auth) -> dict[str, Any]:
    await ops.create_namespace(state, who, body.name, body.description)
    return {"name": body.name}


@v1.get("/namespaces", response_model=S.NamespaceList, tags=["namespaces"])
def list_namespaces(state: State, who: Auth) -> dict[str, Any]:
    """The namespaces this key may read."""
    return {"items": ops.namespaces(state, who)}


@v1.get("/namespaces/{namespace:path}/stats", response_model=S.NamespaceStats, tags=["namespaces"])
def namespace_stats(namespace: NamespacePath, state: State, who: Auth) -> dict[str, Any]:
    return ops.stats(state, who, namespace)


@v1.delete("/namespaces/{namespace:path}", response_model=S.NamespaceDeleted, tags=["namespaces"])
async def delete_namespace(namespace: NamespacePath, state: State, who: Auth) -> dict[str, Any]:
    """Delete a namespace with its memories, edges and index."""
    counts = await ops.delete_namespace(state, who, namespace)
    return {"name": namespace, "memories": counts["memories"]}


# --------------------------------------------------------------------------- search and context
def filters_of(filters: S.Filters | None) -> dict[str, Any] | None:
    return filters.model_dump(exclude_none=True) if filters is not None else None


@v1.post("/search", response_model=S.SearchOut, tags=["search"])
async def search(body: S.SearchIn, state: State, who: Auth) -> JSONResponse:
    """Hybrid search of one namespace with the served configuration."""
    # returned as a response: the dict already has the documented shape (SearchOut), and skipping
    # FastAPI's second validation of it saves about a millisecond per request
    return JSONResponse(await ops.search(state, who, body.query, body.namespace, body.k, filters_of(body.filters),
                                         body.explain))


@v1.post("/context", response_model=S.ContextOut, tags=["search"])
async def context(body: S.ContextIn, state: State, who: Auth) -> JSONResponse:
    """Search, then assemble the results into a zoned context within the token budget."""
    return JSONResponse(await ops.context(state, who, body.query, body.namespace, budget=body.budget, fmt=body.format,
                                          candidates=body.candidates, filters=filters_of(body.filters)))


# --------------------------------------------------------------------------- the chat proxy
@proxy.post("/chat/completions", responses={502: {"model": S.ErrorBody}, 504: {"model": S.ErrorBody}})
async def chat_completions(request: Request, state: State) -> Response:
    """An OpenAI Chat Completions request with memory injected, forwarded to the configured upstream
    with the caller's own credentials; the upstream's answer (or stream) comes back unchanged, with
    X-Lab-Memories and X-Lab-Context-Tokens saying what was injected."""
    return await proxy_forward(request, state)
