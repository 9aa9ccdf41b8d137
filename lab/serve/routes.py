"""The REST routes: parse, check permission, call the service, shape the answer. No domain logic.

Writes, searches and context requests are queued to the service's threads and awaited; other
reads run in the request thread pool with the store to themselves (``service.read``).
"""
from __future__ import annotations

import asyncio
import base64
import json
import math
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Annotated, Any, Optional

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse

from lab.config import FilterConfig, SearchConfig
from lab.errors import NotFoundError
from lab.serve import schemas as S
from lab.serve import work as W
from lab.serve.auth import ApiKey
from lab.serve.state import ApiError, AppState
from lab.store.records import validate_namespace
from lab.version import __version__

ERRORS = {status: {"model": S.ErrorBody} for status in (400, 401, 403, 404, 409, 413, 422, 429, 500, 503)}


async def get_state(request: Request) -> AppState:
    return request.app.state.lab


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


def secret_of(request: Request) -> str:
    header = request.headers.get("authorization", "")
    return header[7:].strip() if header[:7].lower() == "bearer " else request.headers.get("x-api-key", "")


def identify(state: AppState, request: Request) -> ApiKey | None:
    """The key the request carries, when it is valid (no rate limit taken, no error raised)."""
    secret = secret_of(request)
    return state.keys.find(secret) if secret else None


def _take(state: AppState, who: str) -> None:
    wait = state.limiter.take(who)
    if wait > 0:
        state.metrics.rate_limited.inc()
        raise ApiError(429, f"rate limit of {state.settings.rate:g} requests/s (burst {state.settings.burst}) "
                            "exceeded; retry later", headers={"Retry-After": str(max(1, math.ceil(wait)))})


async def caller(request: Request) -> Caller:  # async: a few microseconds, no thread-pool hop
    """Authenticate (when auth is on) and take a token from the caller's rate-limit bucket.

    A request without a valid key takes its token from its client address's bucket first, so
    guessing keys is rate-limited like any other request."""
    state: AppState = request.app.state.lab
    address = f"addr:{request.client.host if request.client else '-'}"
    key = None
    if state.auth_on:
        secret = secret_of(request)
        key = state.keys.find(secret) if secret else None
        if key is None:
            _take(state, "failed-" + address)
            if not secret:
                raise ApiError(401, "an API key is required: send 'Authorization: Bearer KEY' or 'X-API-Key: KEY'",
                               headers={"WWW-Authenticate": "Bearer"})
            raise ApiError(401, "the API key is not valid", headers={"WWW-Authenticate": "Bearer"})
    _take(state, f"key:{key.name}" if key else address)
    return Caller(key)


State = Annotated[AppState, Depends(get_state)]
MemoryIdPath = Annotated[str, Path(min_length=1, max_length=200, pattern=S.ID_PATTERN)]
NamespacePath = Annotated[str, Path(min_length=1, max_length=128, pattern=S.NAMESPACE_PATTERN)]
Auth = Annotated[Caller, Depends(caller)]
operations = APIRouter(tags=["operations"])
v1 = APIRouter(prefix="/v1", responses=ERRORS)


async def queued(future) -> Any:
    return await asyncio.wrap_future(future)


def iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def memory_out(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: iso(v) for k, v in row.items() if k in S.Memory.model_fields}
    out["metadata"] = json.loads(row.get("metadata") or "{}")
    out["tags"] = list(row.get("tags") or [])
    return out


def require_namespace(state: AppState, namespace: str) -> None:
    """404 for a namespace that does not exist (named, without listing the others)."""
    validate_namespace(namespace)
    if namespace not in state.service.read(state.service.store.namespaces):
        raise NotFoundError(f"unknown namespace {namespace!r} (create it with POST /v1/namespaces)")


def memory_for(state: AppState, who: Caller, memory_id: str, write: bool = False) -> dict[str, Any]:
    """The memory, if the caller may see it; one not visible to the caller is 404, as if absent."""
    row = state.service.read(lambda: state.service.store.get(memory_id))
    if not who.can(row["namespace"]):
        raise NotFoundError(f"no memory with id {memory_id!r}")
    who.require(row["namespace"], write)
    return row


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


def document_routes(app: Any) -> None:
    """/openapi.json and /docs behind the key check (``create_app`` with auth on)."""
    from fastapi.openapi.docs import get_swagger_ui_html

    @app.get("/openapi.json", include_in_schema=False)
    def openapi_document(who: Auth) -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    def swagger(who: Auth) -> Any:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=app.title)


# --------------------------------------------------------------------------- memories
@v1.post("/memories", status_code=201, response_model=S.CreatedOne, tags=["memories"])
async def create_memory(body: S.MemoryIn, state: State, who: Auth) -> dict[str, Any]:
    """Save one memory; acknowledged once committed, and searchable from then on."""
    return (await create(state, who, [body]))["one"]


@v1.post("/memories/batch", status_code=201, response_model=S.CreatedBatch, tags=["memories"])
async def create_memories(body: S.MemoryBatchIn, state: State, who: Auth) -> dict[str, Any]:
    """Save several memories in one commit; each is reported created or duplicate (already stored)."""
    got = await create(state, who, body.memories)
    return {"memories": got["memories"], "version": got["version"]}


async def create(state: AppState, who: Caller, memories: list[S.MemoryIn]) -> dict[str, Any]:
    for ns in sorted({m.namespace for m in memories}):
        who.require(ns, write=True)
        require_namespace(state, ns)
    records = [m.record() for m in memories]
    state.service.writer.validate(records)  # 422 before queueing: a bad record never joins a group
    got = await queued(state.service.submit_write(W.Create(tuple(records))))
    return {**got, "one": {**got["memories"][0], "version": got["version"]}}


@v1.get("/memories/{memory_id:path}", response_model=S.Memory, tags=["memories"])
def get_memory(memory_id: MemoryIdPath, state: State, who: Auth) -> dict[str, Any]:
    return memory_out(memory_for(state, who, memory_id))


@v1.patch("/memories/{memory_id:path}", response_model=S.Memory, tags=["memories"])
async def patch_memory(memory_id: MemoryIdPath, body: S.MemoryPatch, state: State, who: Auth) -> dict[str, Any]:
    """Change fields; a new content, title or tags re-embeds the memory before this returns."""
    changes = body.changes()
    if not changes:
        raise ApiError(422, "body: give at least one field to change", field="body")
    memory_for(state, who, memory_id, write=True)
    return memory_out(await queued(state.service.submit_write(W.Update(memory_id, changes))))


@v1.delete("/memories/{memory_id:path}", response_model=S.Deleted, tags=["memories"])
async def delete_memory(memory_id: MemoryIdPath, state: State, who: Auth,
                        hard: Annotated[bool, Query(description="remove it for good (default: mark invalid)")] = False,
                        ) -> dict[str, Any]:
    memory_for(state, who, memory_id, write=True)
    n = await queued(state.service.submit_write(W.Delete(memory_id, hard)))
    return {"deleted": n, "hard": hard}


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
    who.require(namespace)
    require_namespace(state, namespace)
    after = decode_cursor(cursor) if cursor else None
    store = state.service.store
    page = state.service.read(lambda: store.list(namespace, types=type, tags=tag, valid=valid, since=since,
                                                 until=until, limit=limit + 1, after=after))
    rows = page.rows(named=True)
    more = len(rows) > limit
    rows = rows[:limit]
    return {"items": [memory_out(r) for r in rows], "next_cursor": encode_cursor(rows[-1]) if more else None}


# --------------------------------------------------------------------------- edges
@v1.post("/edges", status_code=201, response_model=S.EdgesAdded, tags=["edges"])
async def add_edges(body: S.EdgeBatchIn, state: State, who: Auth) -> dict[str, Any]:
    """Add typed edges between memories of one namespace (edges already there are skipped)."""
    for edge in body.edges:
        for end in (edge.src, edge.dst):
            memory_for(state, who, end, write=True)
    n = await queued(state.service.submit_write(W.AddEdges(tuple(e.model_dump() for e in body.edges))))
    return {"added": n}


@v1.get("/edges", response_model=S.EdgeList, tags=["edges"])
def list_edges(state: State, who: Auth, namespace: Annotated[str, Query(min_length=1, max_length=128, pattern=S.NAMESPACE_PATTERN)],
               memory_id: Annotated[Optional[str], Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)] = None,
               relation: Optional[S.Relation] = None) -> dict[str, Any]:
    who.require(namespace)
    require_namespace(state, namespace)
    frame = state.service.read(lambda: state.service.store.edges(namespace, memory_id=memory_id, relation=relation))
    return {"items": [{k: iso(v) for k, v in r.items()} for r in frame.rows(named=True)]}


@v1.delete("/edges", response_model=S.EdgesAdded, tags=["edges"])
async def delete_edges(state: State, who: Auth, src: Annotated[str, Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)],
                       dst: Annotated[str, Query(min_length=1, max_length=200, pattern=S.ID_PATTERN)],
                       relation: Optional[S.Relation] = None) -> dict[str, Any]:
    """Remove the edges src -> dst (of one relation, or every relation); reported as ``added: -n``."""
    memory_for(state, who, src, write=True)
    n = await queued(state.service.submit_write(W.RemoveEdges(src, dst, relation)))
    return {"added": -n}


# --------------------------------------------------------------------------- namespaces
@v1.post("/namespaces", status_code=201, response_model=S.NamespaceOut, tags=["namespaces"])
async def create_namespace(body: S.NamespaceIn, state: State, who: Auth) -> dict[str, Any]:
    who.require(body.name, write=True)
    await queued(state.service.submit_write(W.CreateNamespace(body.name, body.description)))
    return {"name": body.name}


@v1.get("/namespaces", response_model=S.NamespaceList, tags=["namespaces"])
def list_namespaces(state: State, who: Auth) -> dict[str, Any]:
    """The namespaces this key may read."""
    return {"items": [ns for ns in state.service.read(state.service.store.namespaces) if who.can(ns)]}


@v1.get("/namespaces/{namespace:path}/stats", response_model=S.NamespaceStats, tags=["namespaces"])
def namespace_stats(namespace: NamespacePath, state: State, who: Auth) -> dict[str, Any]:
    who.require(namespace)
    require_namespace(state, namespace)
    service = state.service

    def stats() -> dict[str, Any]:
        out = service.store.stats(namespace)
        idx = service.retriever.index(namespace)
        out["index"] = {"live_chunks": idx.n_live, "delta": idx.delta_size}
        return out

    got = service.read(stats)
    return {"name": namespace, **{k: got.get(k, {}) for k in ("by_type", "by_relation", "index")},
            **{k: got[k] for k in ("memories", "valid", "pinned", "chunks", "edges")}}


@v1.delete("/namespaces/{namespace:path}", response_model=S.NamespaceDeleted, tags=["namespaces"])
async def delete_namespace(namespace: NamespacePath, state: State, who: Auth) -> dict[str, Any]:
    """Delete a namespace with its memories, edges and index."""
    who.require(namespace, write=True)
    require_namespace(state, namespace)
    counts = await queued(state.service.submit_write(W.DeleteNamespace(namespace)))
    return {"name": namespace, "memories": counts["memories"]}


# --------------------------------------------------------------------------- search and context
def search_config(state: AppState, filters: S.Filters | None) -> SearchConfig:
    config = state.service.search_config
    if filters is None:
        return config
    given = filters.model_dump(exclude_none=True)
    for name in ("types", "tags"):
        if name in given:
            given[name] = tuple(given[name])
    return replace(config, filters=replace(config.filters or FilterConfig(), **given))


@v1.post("/search", response_model=S.SearchOut, tags=["search"])
async def search(body: S.SearchIn, state: State, who: Auth) -> JSONResponse:
    """Hybrid search of one namespace with the served configuration."""
    who.require(body.namespace)  # an unknown namespace is found out by the reader thread (404)
    started = time.perf_counter()
    config = search_config(state, body.filters)
    response = await queued(state.service.submit_read(
        W.Search(body.query, body.namespace, body.k or config.fusion.top_k, config, body.explain)))
    # returned as a response: the dict already has the documented shape (SearchOut), and skipping
    # FastAPI's second validation of it saves about a millisecond per request
    return JSONResponse({"query": body.query, "namespace": body.namespace, "config": response.config,
                         "intent": response.analysis.intent, "results": [r.to_dict() for r in response.results],
                         "took_ms": round((time.perf_counter() - started) * 1000, 3)})


@v1.post("/context", response_model=S.ContextOut, tags=["search"])
async def context(body: S.ContextIn, state: State, who: Auth) -> JSONResponse:
    """Search, then assemble the results into a zoned context within the token budget."""
    who.require(body.namespace)
    started = time.perf_counter()
    assemble = state.service.assemble_config
    if body.budget is not None:
        assemble = replace(assemble, budget=body.budget)
    ctx = await queued(state.service.submit_read(
        W.Context(body.query, body.namespace, body.candidates, search_config(state, body.filters), assemble)))
    data = ctx.to_dict()
    return JSONResponse({"query": body.query, "namespace": body.namespace, "text": ctx.render(body.format), "format": body.format,
            **{k: data[k] for k in ("budget", "used", "counter", "zones", "items", "skipped")},
            "citations": [{"marker": f"[{i.memory_id}]", "memory_id": i.memory_id, "zone": i.zone,
                           "position": i.position} for i in ctx.items],
            "took_ms": round((time.perf_counter() - started) * 1000, 3)})
