"""What a caller may do with the served store, whatever face it came through (REST, MCP, the chat
proxy): the permission checks, then the service's queues. One implementation of each operation,
so every face has the same auth, the same single committer and the same answers.

Functions take plain values and the caller, return plain dicts, and raise ``ApiError`` or a
``LabError``; each face maps those to its own error form once.
"""
from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from lab.config import FilterConfig, SearchConfig
from lab.errors import NotFoundError
from lab.serve import work as W
from lab.serve.auth import ApiKey
from lab.serve.check import assess
from lab.serve.state import ApiError, AppState
from lab.store.records import content_hash, validate_namespace

MEMORY_FIELDS = ("id", "namespace", "content", "title", "tags", "type", "source", "created_at", "updated_at",
                 "accessed_at", "access_count", "importance", "pinned", "valid", "superseded_by", "metadata")


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


async def queued(future) -> Any:
    return await asyncio.wrap_future(future)


def iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def memory_out(row: dict[str, Any]) -> dict[str, Any]:
    out = {k: iso(v) for k, v in row.items() if k in MEMORY_FIELDS}
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


def search_config(state: AppState, filters: dict[str, Any] | None) -> SearchConfig:
    """The served configuration with a request's filters (types, tags, since, until, valid_only)."""
    config = state.service.search_config
    given = {k: v for k, v in (filters or {}).items() if v is not None}
    if not given:
        return config
    for name in ("types", "tags"):
        if name in given:
            given[name] = tuple(given[name])
    return replace(config, filters=replace(config.filters or FilterConfig(), **given))


# --------------------------------------------------------------------------- writes
CHOSEN_ID_RULE = "an id you choose starts with its namespace and ':'"


def check_chosen_ids(records: list[dict[str, Any]]) -> None:
    """A caller-chosen id must start with its own namespace and ':' (``team-b:doc-1``).

    Ids are unique across the whole store, so without this a caller could probe another
    namespace's ids (a clash answers differently from a fresh id) and take them first (the
    owner's own saves would then clash). With it, each namespace has an id space only its writers
    reach: the check looks at the id alone, before any lookup, so its answer says nothing about
    what is stored. Ids lab makes itself (``NS:`` + a content hash) already have this form."""
    for i, record in enumerate(records):
        chosen, ns = record.get("id"), record.get("namespace")
        if chosen is None or not isinstance(ns, str):
            continue
        if not isinstance(chosen, str) or not chosen.startswith(ns + ":") or len(chosen) == len(ns) + 1:
            where = "id" if len(records) == 1 else f"memories.{i}.id"
            raise ApiError(422, f"{where}: {chosen!r} is not an id of namespace {ns!r}: {CHOSEN_ID_RULE} "
                                f"(e.g. {ns + ':' + 'my-id'!r}), or leave it out for one made from the text",
                           field=where)


async def save(state: AppState, who: Caller, records: list[dict[str, Any]], *,
               create_namespace: bool = False) -> dict[str, Any]:
    """Save memories in one commit; each reported created or duplicate, with the commit's version.
    With ``create_namespace``, a namespace the caller may write is created when absent (after
    every other check, so a refused save creates nothing)."""
    for ns in sorted({r["namespace"] for r in records}):
        who.require(ns, write=True)
    check_chosen_ids(records)
    for ns in sorted({r["namespace"] for r in records}):
        if create_namespace:
            await ensure_namespace(state, who, ns)
        require_namespace(state, ns)
    state.service.writer.validate(records)  # refused before queueing: a bad record never joins a group
    got = await queued(state.service.submit_write(W.Create(tuple(records))))
    return {**got, "one": {**got["memories"][0], "version": got["version"]}}


async def update(state: AppState, who: Caller, memory_id: str, changes: dict[str, Any]) -> dict[str, Any]:
    if not changes:
        raise ApiError(422, "body: give at least one field to change", field="body")
    memory_for(state, who, memory_id, write=True)
    return memory_out(await queued(state.service.submit_write(W.Update(memory_id, changes))))


async def forget(state: AppState, who: Caller, memory_id: str, hard: bool = False) -> dict[str, Any]:
    memory_for(state, who, memory_id, write=True)
    n = await queued(state.service.submit_write(W.Delete(memory_id, hard)))
    return {"deleted": n, "hard": hard}


async def link(state: AppState, who: Caller, edges: list[dict[str, Any]]) -> dict[str, Any]:
    """Add typed edges (both ends must be writable by the caller; edges already there are skipped)."""
    for edge in edges:
        for end in (edge["src"], edge["dst"]):
            memory_for(state, who, end, write=True)
    return {"added": await queued(state.service.submit_write(W.AddEdges(tuple(edges))))}


# --------------------------------------------------------------------------- reads
def get(state: AppState, who: Caller, memory_id: str) -> dict[str, Any]:
    return memory_out(memory_for(state, who, memory_id))


def list_page(state: AppState, who: Caller, namespace: str, *, types: list[str] | None = None,
              tags: list[str] | None = None, valid: bool | None = None, since: datetime | None = None,
              until: datetime | None = None, limit: int = 50, after: tuple[datetime, str] | None = None,
              ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A page of one namespace's memories, newest first, and the last row when more follow."""
    who.require(namespace)
    require_namespace(state, namespace)
    store = state.service.store
    page = state.service.read(lambda: store.list(namespace, types=types, tags=tags, valid=valid, since=since,
                                                 until=until, limit=limit + 1, after=after))
    rows = page.rows(named=True)
    more = len(rows) > limit
    rows = rows[:limit]
    return [memory_out(r) for r in rows], (rows[-1] if more else None)


def namespaces(state: AppState, who: Caller) -> list[str]:
    """The namespaces the caller may read."""
    return [ns for ns in state.service.read(state.service.store.namespaces) if who.can(ns)]


def stats(state: AppState, who: Caller, namespace: str) -> dict[str, Any]:
    who.require(namespace)
    require_namespace(state, namespace)
    service = state.service

    def collect() -> dict[str, Any]:
        out = service.store.stats(namespace)
        idx = service.retriever.index(namespace)
        out["index"] = {"live_chunks": idx.n_live, "delta": idx.delta_size}
        return out

    got = service.read(collect)
    return {"name": namespace, **{k: got.get(k, {}) for k in ("by_type", "by_relation", "index")},
            **{k: got[k] for k in ("memories", "valid", "pinned", "chunks", "edges")}}


async def search(state: AppState, who: Caller, query: str, namespace: str, k: int | None = None,
                 filters: dict[str, Any] | None = None, explain: bool = False) -> dict[str, Any]:
    """Hybrid search of one namespace with the served configuration."""
    who.require(namespace)  # an unknown namespace is found out by the reader thread (404)
    started = time.perf_counter()
    config = search_config(state, filters)
    response = await queued(state.service.submit_read(
        W.Search(query, namespace, k or config.fusion.top_k, config, explain)))
    return {"query": query, "namespace": namespace, "config": response.config,
            "intent": response.analysis.intent, "results": [r.to_dict() for r in response.results],
            "took_ms": round((time.perf_counter() - started) * 1000, 3)}


async def context(state: AppState, who: Caller, query: str, namespace: str, *, budget: int | None = None,
                  fmt: str = "text", candidates: int = 50, filters: dict[str, Any] | None = None) -> dict[str, Any]:
    """Search, then assemble the results into a zoned context within the token budget."""
    who.require(namespace)
    started = time.perf_counter()
    assemble = state.service.assemble_config
    if budget is not None:
        assemble = replace(assemble, budget=budget)
    ctx = await queued(state.service.submit_read(
        W.Context(query, namespace, candidates, search_config(state, filters), assemble)))
    data = ctx.to_dict()
    return {"query": query, "namespace": namespace, "text": ctx.render(fmt), "format": fmt,
            **{k: data[k] for k in ("budget", "used", "counter", "zones", "items", "skipped")},
            "citations": [{"marker": f"[{i.memory_id}]", "memory_id": i.memory_id, "zone": i.zone,
                           "position": i.position} for i in ctx.items],
            "took_ms": round((time.perf_counter() - started) * 1000, 3)}


async def check(state: AppState, who: Caller, content: str, namespace: str, k: int = 5) -> dict[str, Any]:
    """Before a write: the nearest stored memories, which one the text repeats and which it may
    contradict (``lab.serve.check``), so the caller can update instead of duplicate."""
    who.require(namespace)
    require_namespace(state, namespace)
    found = await search(state, who, content, namespace, k, filters={"valid_only": True})
    out = assess(content, found["results"])
    stored = state.service.read(lambda: state.service.store.find_by_hash(namespace, content_hash(namespace, content)))
    if stored and out["duplicate_of"] is None:  # the same text, ranked below k by the search
        out["duplicate_of"] = stored
        out["advice"] = f"already stored as {stored}: do not save it again"
    return {"namespace": namespace, **out, "took_ms": found["took_ms"]}


# a namespace's statistics are read at /v1/namespaces/NAME/stats: a namespace whose last segment
# were "stats" could not be told apart from that path (a DELETE of one would be the other's)
RESERVED_LAST_SEGMENT = "stats"


def check_new_namespace(namespace: str) -> None:
    validate_namespace(namespace)
    if namespace.rsplit("/", 1)[-1] == RESERVED_LAST_SEGMENT:
        raise ApiError(422, f"namespace {namespace!r}: a last segment {RESERVED_LAST_SEGMENT!r} is reserved "
                            f"(/v1/namespaces/NAME/{RESERVED_LAST_SEGMENT} reads a namespace's statistics)",
                       field="name")


async def create_namespace(state: AppState, who: Caller, namespace: str, description: str = "") -> None:
    """Create a namespace (409 when it exists)."""
    who.require(namespace, write=True)
    check_new_namespace(namespace)
    await queued(state.service.submit_write(W.CreateNamespace(namespace, description)))


async def delete_namespace(state: AppState, who: Caller, namespace: str) -> dict[str, int]:
    """Delete a namespace with its memories, edges and index: the counts removed."""
    if namespace.rsplit("/", 1)[-1] == RESERVED_LAST_SEGMENT and "/" in namespace:
        raise ApiError(405, f"{namespace.rsplit('/', 1)[0]!r}'s statistics are read-only (GET); a namespace is "
                            "deleted at /v1/namespaces/NAME", headers={"Allow": "GET"})
    who.require(namespace, write=True)
    require_namespace(state, namespace)
    return await queued(state.service.submit_write(W.DeleteNamespace(namespace)))


async def ensure_namespace(state: AppState, who: Caller, namespace: str) -> bool:
    """Create ``namespace`` when it is absent and the caller may write it; True when created."""
    validate_namespace(namespace)
    who.require(namespace, write=True)
    if namespace in state.service.read(state.service.store.namespaces):
        return False
    check_new_namespace(namespace)
    return bool(await queued(state.service.submit_write(W.CreateNamespace(namespace, ""))))
