"""The MCP face: memory tools and resources for agents, over the served champion.

Each tool is a thin shell over ``lab.serve.ops``, the operations REST uses: the same permission
checks, the same single committer (a save is committed, indexed and searchable when the tool
returns), the same answers. Errors come back as tool errors whose text names the problem, never
as a crash of the server.

Who is calling: on the HTTP transport, the key the request carried (``lab.mcp.http.KeyGate``
put it in the request's scope); on stdio, the local user, limited by a ``LocalPolicy``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Annotated, Any, Awaitable, Callable, Literal, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field

from lab.errors import LabError
from lab.schema import EDGE_RELATIONS, MEMORY_TYPES
from lab.serve import ops
from lab.serve.app import public_message
from lab.serve.auth import ApiKey
from lab.serve.ops import Caller
from lab.serve.routes import decode_cursor, encode_cursor
from lab.serve.schemas import ID_PATTERN, NAMESPACE_PATTERN
from lab.serve.state import ApiError, AppState
from lab.version import __version__

SCOPE_KEY = "lab.caller"  # where KeyGate leaves the authenticated caller in an HTTP request's scope

MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Relation = Literal[EDGE_RELATIONS]  # type: ignore[valid-type]
NamespaceArg = Annotated[Optional[str], Field(None, min_length=1, max_length=128, pattern=NAMESPACE_PATTERN,
                                              description="namespace, e.g. team-a/notes; default: the server's")]
MemoryIdArg = Annotated[str, Field(min_length=1, max_length=200, pattern=ID_PATTERN, description="a memory id")]
Query = Annotated[str, Field(min_length=1, max_length=4000, description="what to look for, in plain words")]

INSTRUCTIONS = """Long-term memory. Before answering from memory, call memory_search (ranked memories) or
memory_context (an assembled, cited context within a token budget). Before saving a fact, call memory_check: it
shows what is stored already and what may contradict the new text, so you can memory_update instead of saving a
duplicate. Link related memories with memory_link; forget wrong ones with memory_forget."""


class MemoryItem(BaseModel):
    """One memory of a batch (memory_save_many)."""
    model_config = ConfigDict(extra="forbid")
    content: str = Field(min_length=1, max_length=1_000_000)
    id: Optional[str] = Field(None, min_length=1, max_length=200, pattern=ID_PATTERN,
                              description="your own id, starting with the namespace and ':' "
                                          "(e.g. 'notes:meeting-1'; default: one made from the text)")
    title: Optional[str] = Field(None, max_length=10_000)
    tags: Optional[list[str]] = Field(None, max_length=100)
    type: Optional[MemoryType] = None
    created_at: Optional[str] = Field(None, description="ISO 8601 (default: now)")
    importance: Optional[float] = Field(None, ge=0, le=1)
    pinned: Optional[bool] = None
    metadata: Optional[dict[str, Any]] = None


@dataclass(frozen=True)
class LocalPolicy:
    """What a stdio session (the local user) may do: a default namespace, an allow-list of
    namespace patterns ('*', 'team-a/*', 'project-x') and whether it may write."""
    namespace: str | None = None
    allow: tuple[str, ...] = ("*",)
    read_only: bool = False

    def caller(self) -> Caller:
        if self.allow == ("*",) and not self.read_only:
            return Caller(None)
        return Caller(ApiKey("local", "-", "read" if self.read_only else "write", self.allow))


def build_server(state: AppState, local: LocalPolicy | None = None) -> MCPServer:
    """The MCP server over ``state``'s service. ``local``: the stdio policy (None: HTTP, where
    every request carries its caller)."""
    server = MCPServer("lab-memory", title="lab memory", version=__version__, instructions=INSTRUCTIONS,
                       log_level="WARNING")

    def who(ctx: Context) -> Caller:
        request = ctx.request_context.request
        if request is None:  # stdio: the local user
            return (local or LocalPolicy()).caller()
        caller = request.scope.get(SCOPE_KEY)
        if caller is None:  # an HTTP app without its gate: refuse rather than run unauthenticated
            raise ToolError("this MCP endpoint was mounted without lab's key check; no call is allowed")
        return caller

    def namespace_of(caller: Caller, given: str | None) -> str:
        chosen = given or (local.namespace if local else None) or caller.only_namespace()
        if not chosen:
            raise ToolError("namespace: give the namespace to use (this server has no default namespace)")
        return chosen

    def tool(description: str, **annotations: Any) -> Callable:
        """Register ``fn`` as a tool whose lab errors become tool errors naming the problem."""
        def register(fn: Callable[..., Awaitable[dict[str, Any]]]) -> Callable:
            @functools.wraps(fn)
            async def wrapped(*args: Any, **kwargs: Any) -> dict[str, Any]:
                try:
                    return await fn(*args, **kwargs)
                except ToolError:
                    raise
                except ApiError as exc:
                    raise ToolError(exc.message) from None
                except LabError as exc:
                    if exc.http_status >= 500:
                        raise ToolError("the store could not be read or written; the server log has the details") from None
                    raise ToolError(public_message(exc, str(state.service.store.root.resolve()))) from None
            server.add_tool(wrapped, name=fn.__name__, description=description, structured_output=True,
                            annotations=ToolAnnotations(**annotations) if annotations else None)
            return wrapped
        return register

    def in_thread(fn: Callable[[], Any]) -> Awaitable[Any]:
        return anyio.to_thread.run_sync(fn)

    @tool("Save one memory (a fact, preference, event or note). Reports 'created' with the new id, or "
          "'duplicate' with the id of the same text stored before. The memory is searchable as soon as this "
          "returns. The namespace is created if it does not exist.")
    async def memory_save(
        content: Annotated[str, Field(min_length=1, max_length=1_000_000, description="the memory's text")],
        ctx: Context,
        namespace: NamespaceArg = None,
        title: Annotated[Optional[str], Field(None, max_length=10_000)] = None,
        tags: Annotated[Optional[list[str]], Field(None, max_length=100)] = None,
        type: Annotated[Optional[MemoryType], Field(None, description="kind of memory (default semantic)")] = None,
        importance: Annotated[Optional[float], Field(None, ge=0, le=1)] = None,
        pinned: Annotated[Optional[bool], Field(None, description="always a candidate for context")] = None,
        metadata: Optional[dict[str, Any]] = None,
        id: Annotated[Optional[str], Field(None, min_length=1, max_length=200, pattern=ID_PATTERN,
                                           description="your own id for it, starting with the namespace and ':' "
                                                       "(e.g. 'notes:meeting-1'; default: one made from the text)")] = None,
        created_at: Annotated[Optional[str], Field(None, description="ISO 8601, when it happened (default: now)")] = None,
    ) -> dict[str, Any]:
        caller = who(ctx)
        ns = namespace_of(caller, namespace)
        record = {k: v for k, v in {"content": content, "namespace": ns, "title": title, "tags": tags, "type": type,
                                     "importance": importance, "pinned": pinned, "metadata": metadata, "id": id,
                                     "created_at": created_at}.items()
                  if v is not None}
        return (await ops.save(state, caller, [record], create_namespace=True))["one"]

    @tool("Save many memories in one commit (importing notes or a conversation): each is reported 'created' or "
          "'duplicate' with its id, in the order given; all are searchable when this returns. The namespace is "
          "created if it does not exist.")
    async def memory_save_many(
        memories: Annotated[list[MemoryItem], Field(min_length=1, max_length=1000, description="the memories to save")],
        ctx: Context,
        namespace: NamespaceArg = None,
    ) -> dict[str, Any]:
        caller = who(ctx)
        ns = namespace_of(caller, namespace)
        records = [{**m.model_dump(exclude_none=True), "namespace": ns} for m in memories]
        got = await ops.save(state, caller, records, create_namespace=True)
        return {"memories": got["memories"], "version": got["version"]}

    @tool("Search memories: the best matches for a query, ranked, with their scores. explain=true adds each "
          "signal's share of a result's score (vector, bm25, recency, graph, ...).", readOnlyHint=True)
    async def memory_search(
        query: Query, ctx: Context, namespace: NamespaceArg = None,
        k: Annotated[int, Field(10, ge=1, le=200, description="how many results")] = 10,
        types: Annotated[Optional[list[MemoryType]], Field(None, description="only these memory types")] = None,
        tags: Annotated[Optional[list[str]], Field(None, description="only memories with one of these tags")] = None,
        since: Annotated[Optional[str], Field(None, description="ISO 8601, inclusive")] = None,
        until: Annotated[Optional[str], Field(None, description="ISO 8601, exclusive")] = None,
        explain: bool = False,
    ) -> dict[str, Any]:
        caller = who(ctx)
        found = await ops.search(state, caller, query, namespace_of(caller, namespace), k,
                                 {"types": types, "tags": tags, "since": since, "until": until}, explain)
        found["results"] = [shaped(r, explain) for r in found["results"]]
        return found

    @tool("Assemble what memory knows about a query into one context within a token budget, ordered for a "
          "model to read (critical first, then by relevance, recent last), with a citation per memory.",
          readOnlyHint=True)
    async def memory_context(
        query: Query, ctx: Context, namespace: NamespaceArg = None,
        budget: Annotated[Optional[int], Field(None, ge=1, le=1_000_000, description="tokens (default: served)")] = None,
        format: Literal["text", "markdown"] = "markdown",
        candidates: Annotated[int, Field(50, ge=1, le=500, description="search results offered to assembly")] = 50,
    ) -> dict[str, Any]:
        caller = who(ctx)
        got = await ops.context(state, caller, query, namespace_of(caller, namespace), budget=budget, fmt=format,
                                candidates=candidates)
        return {k: got[k] for k in ("query", "namespace", "text", "format", "budget", "used", "zones", "citations",
                                    "took_ms")}

    @tool("Read one memory by id: its text, title, tags, type, dates, importance and whether it is still valid.",
          readOnlyHint=True)
    async def memory_get(id: MemoryIdArg, ctx: Context) -> dict[str, Any]:
        caller = who(ctx)
        return await in_thread(lambda: ops.get(state, caller, id))

    @tool("Change a memory: new content, title or tags are re-indexed before this returns. Give only the fields "
          "to change; valid=false marks it wrong without deleting it; superseded_by names its replacement.")
    async def memory_update(
        id: MemoryIdArg, ctx: Context,
        content: Annotated[Optional[str], Field(None, min_length=1, max_length=1_000_000)] = None,
        title: Annotated[Optional[str], Field(None, max_length=10_000)] = None,
        tags: Annotated[Optional[list[str]], Field(None, max_length=100)] = None,
        type: Optional[MemoryType] = None,
        importance: Annotated[Optional[float], Field(None, ge=0, le=1)] = None,
        pinned: Optional[bool] = None,
        valid: Optional[bool] = None,
        superseded_by: Annotated[Optional[str], Field(None, min_length=1, max_length=200, pattern=ID_PATTERN)] = None,
        metadata: Optional[dict[str, Any]] = None,
    ) -> dict[str, Any]:
        changes = {k: v for k, v in {"content": content, "title": title, "tags": tags, "type": type,
                                      "importance": importance, "pinned": pinned, "valid": valid,
                                      "superseded_by": superseded_by, "metadata": metadata}.items() if v is not None}
        if not changes:
            raise ToolError("give at least one field to change")
        return await ops.update(state, who(ctx), id, changes)

    @tool("Forget a memory. By default it is marked invalid (kept, hidden from search, recoverable with "
          "memory_update valid=true); hard=true removes it for good.", destructiveHint=True)
    async def memory_forget(id: MemoryIdArg, ctx: Context, hard: bool = False) -> dict[str, Any]:
        return {"id": id, **await ops.forget(state, who(ctx), id, hard)}

    @tool("List memories of a namespace, newest first (follow next_cursor for more). Without a namespace (and "
          "no default), lists the namespaces you may read.", readOnlyHint=True)
    async def memory_list(
        ctx: Context, namespace: NamespaceArg = None,
        limit: Annotated[int, Field(20, ge=1, le=1000)] = 20,
        cursor: Annotated[Optional[str], Field(None, max_length=1000)] = None,
        type: Optional[MemoryType] = None,
        tag: Optional[str] = None,
    ) -> dict[str, Any]:
        caller = who(ctx)
        chosen = namespace or (local.namespace if local else None) or caller.only_namespace()
        if not chosen:
            return {"namespaces": await in_thread(lambda: ops.namespaces(state, caller))}
        try:
            after = decode_cursor(cursor) if cursor else None
        except ApiError:
            raise ToolError("cursor: not one this server issued") from None
        items, last = await in_thread(lambda: ops.list_page(
            state, caller, chosen, types=[type] if type else None, tags=[tag] if tag else None, limit=limit,
            after=after))
        return {"namespace": chosen, "items": items, "next_cursor": encode_cursor(last) if last else None}

    @tool("Link two memories with a typed edge (related_to, supersedes, contradicts, derived_from, part_of); "
          "search follows these links and demotes superseded memories.")
    async def memory_link(src: MemoryIdArg, dst: MemoryIdArg, ctx: Context, relation: Relation = "related_to",
                          weight: Annotated[float, Field(1.0, ge=0, le=1e6, allow_inf_nan=False)] = 1.0,
                          ) -> dict[str, Any]:
        return await ops.link(state, who(ctx), [{"src": src, "dst": dst, "relation": relation, "weight": weight}])

    @tool("Before saving: the nearest stored memories to a text, which one it duplicates and which it may "
          "contradict (same subject, a differing number, name or negation), with advice: save, update or skip.",
          readOnlyHint=True)
    async def memory_check(
        content: Annotated[str, Field(min_length=1, max_length=4000, description="the text you mean to save")],
        ctx: Context, namespace: NamespaceArg = None,
        k: Annotated[int, Field(5, ge=1, le=50, description="nearest memories to compare")] = 5,
    ) -> dict[str, Any]:
        caller = who(ctx)
        return await ops.check(state, caller, content, namespace_of(caller, namespace), k)

    @server.resource("lab://namespaces/{namespace}/stats", name="namespace stats", mime_type="application/json",
                     description="memories, chunks, edges and index state of one namespace")
    async def namespace_stats(namespace: str, ctx: Context) -> str:
        import json

        try:
            caller = who(ctx)
            return json.dumps(await in_thread(lambda: ops.stats(state, caller, namespace)))
        except (ApiError, LabError, ToolError) as exc:
            # a ResourceError reaches the client with its message, and is not logged with a
            # traceback as an unexpected failure (one refused read, one short log line at most)
            if isinstance(exc, LabError) and exc.http_status >= 500:
                raise ResourceError("the store could not be read; the server log has the details") from None
            message = exc.message if isinstance(exc, ApiError) else str(exc)
            if isinstance(exc, LabError):
                message = public_message(exc, str(state.service.store.root.resolve()))
            raise ResourceError(message) from None

    @server.resource("lab://status", name="status", mime_type="application/json",
                     description="whether every namespace's index is loaded (searches answer at full speed)")
    async def status() -> str:
        import json

        service = state.service
        out: dict[str, Any] = {"ready": service.ready.is_set()}
        if service.startup_error:
            out["error"] = "indexes failed to load"
        if local is not None:  # the local user may see what is served; an HTTP caller asks /ready with its key
            out["served"] = {**service.served.describe(), "embedding": service.embedding_models()}
        return json.dumps(out)

    if local is not None:  # a static resource has no caller to check: offered where the caller is the local user
        @server.resource("lab://namespaces", name="namespaces", mime_type="application/json",
                         description="the namespaces this session may read")
        async def namespace_list() -> str:
            import json

            return json.dumps(await in_thread(lambda: ops.namespaces(state, local.caller())))

    return server


def shaped(hit: dict[str, Any], explain: bool) -> dict[str, Any]:
    """A search hit for an agent: the memory and its score; with ``explain``, each signal's share of
    the fused score (its contribution over the sum), rounded."""
    out = {k: hit[k] for k in ("memory_id", "rank", "score", "content", "title", "type", "created_at") if k in hit}
    if hit.get("superseded"):
        out["superseded"] = True
    if explain:
        signals = hit.get("signals") or {}
        total = sum(s["contribution"] for s in signals.values()) or 1.0
        out["signals"] = {name: {"rank": s["rank"], "share": round(s["contribution"] / total, 4)}
                          for name, s in sorted(signals.items())}
    return out
