"""What a caller may do with the served store, whatever face it came through (REST, MCP, the chat
proxy): the permission checks, then the service's queues. One implementation of each operation,
so every face has the same auth, the same single committer and the same answers.

Each operation takes the caller and its input model (``lab.serve.contract``) and returns its
output model; it raises ``ApiError`` or a ``LabError``, which each face turns into its own error
form through ``lab.serve.errors.public_error``. The table that names them for the faces is
``lab.serve.operations``.
"""
from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import replace
from datetime import datetime
from typing import Any

from lab.config import FilterConfig, SearchConfig, parse_time
from lab.errors import NotFoundError
from lab.serve import contract as C
from lab.serve import work as W
from lab.serve.caller import Caller
from lab.serve.check import assess
from lab.serve.state import ApiError, AppState
from lab.store.records import content_hash, validate_namespace

MEMORY_FIELDS = ("id", "namespace", "content", "title", "tags", "type", "source", "created_at", "updated_at",
                 "accessed_at", "access_count", "importance", "pinned", "valid", "superseded_by", "metadata")


async def queued(future) -> Any:
    return await asyncio.wrap_future(future)


def iso(value: Any) -> str | None:
    return value.isoformat() if isinstance(value, datetime) else value


def memory_out(row: dict[str, Any]) -> C.Memory:
    out = {k: iso(v) for k, v in row.items() if k in MEMORY_FIELDS}
    out["metadata"] = json.loads(row.get("metadata") or "{}")
    out["tags"] = list(row.get("tags") or [])
    return C.Memory.model_validate(out)


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


def search_config(state: AppState, filters: C.Filters | None) -> SearchConfig:
    """The served configuration with a request's filters (types, tags, since, until, valid_only)."""
    config = state.service.search_config
    given = filters.model_dump(exclude_none=True) if filters is not None else {}
    if not given:
        return config
    for name in ("types", "tags"):
        if name in given:
            given[name] = tuple(given[name])
    return replace(config, filters=replace(config.filters or FilterConfig(), **given))


def encode_cursor(row: dict[str, Any]) -> str:
    raw = json.dumps([row["created_at"].isoformat(), row["id"]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        at, last = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return datetime.fromisoformat(at), str(last)
    except (ValueError, TypeError):
        raise ApiError(422, "cursor: not a cursor this server issued", field="cursor") from None


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


async def save_records(state: AppState, who: Caller, records: list[dict[str, Any]], *,
                       create_namespace: bool = False) -> C.CreatedBatch:
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
    return C.CreatedBatch.model_validate(got)


async def save(state: AppState, who: Caller, body: C.MemoryIn, *, create_namespace: bool = False) -> C.CreatedOne:
    got = await save_records(state, who, [body.record()], create_namespace=create_namespace)
    return C.CreatedOne(**got.memories[0].model_dump(), version=got.version)


async def save_batch(state: AppState, who: Caller, body: C.MemoryBatchIn) -> C.CreatedBatch:
    return await save_records(state, who, [m.record() for m in body.memories])


async def save_many(state: AppState, who: Caller, body: C.NamespaceBatchIn, *,
                    create_namespace: bool = False) -> C.CreatedBatch:
    """Memories of one namespace in one commit."""
    records = [{**m.record(), "namespace": body.namespace} for m in body.memories]
    return await save_records(state, who, records, create_namespace=create_namespace)


async def update(state: AppState, who: Caller, body: C.UpdateIn) -> C.Memory:
    changes = body.changes()
    if not changes:
        raise ApiError(422, "body: give at least one field to change", field="body")
    memory_for(state, who, body.id, write=True)
    return memory_out(await queued(state.service.submit_write(W.Update(body.id, changes))))


async def forget(state: AppState, who: Caller, body: C.ForgetIn) -> C.Deleted:
    memory_for(state, who, body.id, write=True)
    n = await queued(state.service.submit_write(W.Delete(body.id, body.hard)))
    return C.Deleted(id=body.id, deleted=n, hard=body.hard)


async def link_all(state: AppState, who: Caller, body: C.EdgeBatchIn) -> C.EdgesAdded:
    """Add typed edges (both ends must be writable by the caller; edges already there are skipped)."""
    edges = [e.model_dump() for e in body.edges]
    for edge in edges:
        for end in (edge["src"], edge["dst"]):
            memory_for(state, who, end, write=True)
    return C.EdgesAdded(added=await queued(state.service.submit_write(W.AddEdges(tuple(edges)))))


async def link(state: AppState, who: Caller, body: C.EdgeIn) -> C.EdgesAdded:
    return await link_all(state, who, C.EdgeBatchIn(edges=[body]))


async def unlink(state: AppState, who: Caller, body: C.EdgeRemoval) -> C.EdgesAdded:
    """Remove the edges src -> dst (of one relation, or every relation); reported as ``added: -n``."""
    memory_for(state, who, body.src, write=True)
    n = await queued(state.service.submit_write(W.RemoveEdges(body.src, body.dst, body.relation)))
    return C.EdgesAdded(added=-n)


# --------------------------------------------------------------------------- reads
def get(state: AppState, who: Caller, body: C.MemoryRef) -> C.Memory:
    return memory_out(memory_for(state, who, body.id))


def list_memories(state: AppState, who: Caller, body: C.ListIn) -> C.MemoryPage:
    """A page of one namespace's memories, newest first, with the cursor of the next page."""
    who.require(body.namespace)
    require_namespace(state, body.namespace)
    after = decode_cursor(body.cursor) if body.cursor else None
    since = parse_time(body.since, "since") if body.since else None
    until = parse_time(body.until, "until") if body.until else None
    store = state.service.store
    page = state.service.read(lambda: store.list(body.namespace, types=body.type, tags=body.tag, valid=body.valid,
                                                 since=since, until=until, limit=body.limit + 1, after=after))
    rows = page.rows(named=True)
    more = len(rows) > body.limit
    rows = rows[:body.limit]
    return C.MemoryPage(namespace=body.namespace, items=[memory_out(r) for r in rows],
                        next_cursor=encode_cursor(rows[-1]) if more else None)


def list_edges(state: AppState, who: Caller, body: C.EdgeQuery) -> C.EdgeList:
    who.require(body.namespace)
    require_namespace(state, body.namespace)
    frame = state.service.read(lambda: state.service.store.edges(body.namespace, memory_id=body.memory_id,
                                                                 relation=body.relation))
    return C.EdgeList(items=[{k: iso(v) for k, v in r.items()} for r in frame.rows(named=True)])


def namespaces(state: AppState, who: Caller) -> list[str]:
    """The namespaces the caller may read."""
    return [ns for ns in state.service.read(state.service.store.namespaces) if who.can(ns)]


def list_namespaces(state: AppState, who: Caller, body: C.Nothing) -> C.NamespaceList:
    return C.NamespaceList(items=namespaces(state, who))


def stats(state: AppState, who: Caller, body: C.NamespaceRef) -> C.NamespaceStats:
    namespace = body.namespace
    who.require(namespace)
    require_namespace(state, namespace)
    service = state.service

    def collect() -> dict[str, Any]:
        out = service.store.stats(namespace)
        idx = service.retriever.index(namespace)
        out["index"] = {"live_chunks": idx.n_live, "delta": idx.delta_size}
        return out

    got = service.read(collect)
    return C.NamespaceStats(name=namespace, **{k: got.get(k, {}) for k in ("by_type", "by_relation", "index")},
                            **{k: got[k] for k in ("memories", "valid", "pinned", "chunks", "edges")})


async def search(state: AppState, who: Caller, body: C.SearchIn) -> C.SearchOut:
    """Hybrid search of one namespace with the served configuration."""
    who.require(body.namespace)  # an unknown namespace is found out by the reader thread (404)
    started = time.perf_counter()
    config = search_config(state, body.filters)
    response = await queued(state.service.submit_read(
        W.Search(body.query, body.namespace, body.k or config.fusion.top_k, config, body.explain)))
    return C.SearchOut(query=body.query, namespace=body.namespace, config=response.config,
                       intent=response.analysis.intent, results=[r.to_dict() for r in response.results],
                       abstention=response.abstention.to_dict(), took_ms=round((time.perf_counter() - started) * 1000, 3))


async def context(state: AppState, who: Caller, body: C.ContextIn) -> C.ContextOut:
    """Search, then assemble the results into a zoned context within the token budget."""
    who.require(body.namespace)
    started = time.perf_counter()
    assemble = state.service.assemble_config
    if body.budget is not None:
        assemble = replace(assemble, budget=body.budget)
    ctx = await queued(state.service.submit_read(
        W.Context(body.query, body.namespace, body.candidates, search_config(state, body.filters), assemble)))
    data = ctx.to_dict()
    return C.ContextOut(
        query=body.query, namespace=body.namespace, text=ctx.render(body.format), format=body.format,
        **{k: data[k] for k in ("budget", "used", "counter", "zones", "items", "skipped")},
        citations=[{"marker": f"[{i.memory_id}]", "memory_id": i.memory_id, "zone": i.zone, "position": i.position}
                   for i in ctx.items],
        abstention=ctx.abstention.to_dict(), took_ms=round((time.perf_counter() - started) * 1000, 3))


async def check(state: AppState, who: Caller, body: C.CheckIn) -> C.CheckOut:
    """Before a write: the nearest stored memories, which one the text repeats and which it may
    contradict (``lab.serve.check``), so the caller can update instead of duplicate."""
    namespace = body.namespace
    who.require(namespace)
    require_namespace(state, namespace)
    found = await search(state, who, C.SearchIn(query=body.content, namespace=namespace, k=body.k,
                                                filters=C.Filters(valid_only=True)))
    out = assess(body.content, [h.model_dump() for h in found.results])
    stored = state.service.read(lambda: state.service.store.find_by_hash(namespace, content_hash(namespace, body.content)))
    if stored and out["duplicate_of"] is None:  # the same text, ranked below k by the search
        out["duplicate_of"] = stored
        out["advice"] = f"already stored as {stored}: do not save it again"
    return C.CheckOut(namespace=namespace, **out, took_ms=found.took_ms)


# --------------------------------------------------------------------------- namespaces
# a namespace's statistics are read at /v1/namespaces/NAME/stats: a namespace whose last segment
# were "stats" could not be told apart from that path (a DELETE of one would be the other's)
RESERVED_LAST_SEGMENT = "stats"


def check_new_namespace(namespace: str) -> None:
    validate_namespace(namespace)
    if namespace.rsplit("/", 1)[-1] == RESERVED_LAST_SEGMENT:
        raise ApiError(422, f"namespace {namespace!r}: a last segment {RESERVED_LAST_SEGMENT!r} is reserved "
                            f"(/v1/namespaces/NAME/{RESERVED_LAST_SEGMENT} reads a namespace's statistics)",
                       field="name")


async def create_namespace(state: AppState, who: Caller, body: C.NamespaceIn) -> C.NamespaceOut:
    """Create a namespace (409 when it exists)."""
    who.require(body.name, write=True)
    check_new_namespace(body.name)
    await queued(state.service.submit_write(W.CreateNamespace(body.name, body.description)))
    return C.NamespaceOut(name=body.name)


async def delete_namespace(state: AppState, who: Caller, body: C.NamespaceRef) -> C.NamespaceDeleted:
    """Delete a namespace with its memories, edges and index."""
    namespace = body.namespace
    if namespace.rsplit("/", 1)[-1] == RESERVED_LAST_SEGMENT and "/" in namespace:
        raise ApiError(405, f"{namespace.rsplit('/', 1)[0]!r}'s statistics are read-only (GET); a namespace is "
                            "deleted at /v1/namespaces/NAME", headers={"Allow": "GET"})
    who.require(namespace, write=True)
    require_namespace(state, namespace)
    counts = await queued(state.service.submit_write(W.DeleteNamespace(namespace)))
    return C.NamespaceDeleted(name=namespace, memories=counts["memories"])


async def ensure_namespace(state: AppState, who: Caller, namespace: str) -> bool:
    """Create ``namespace`` when it is absent and the caller may write it; True when created."""
    validate_namespace(namespace)
    who.require(namespace, write=True)
    if namespace in state.service.read(state.service.store.namespaces):
        return False
    check_new_namespace(namespace)
    return bool(await queued(state.service.submit_write(W.CreateNamespace(namespace, ""))))
