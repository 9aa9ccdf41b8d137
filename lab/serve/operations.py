"""The table of operations: every thing a caller can do with the served store, once. The REST
routes (``lab.serve.routes``) and the MCP tools (``lab.mcp.server``) are generated from it, so an
operation's input, limits, descriptions, output and permission live in one row and its function
(``lab.serve.ops``); a face only says how it is reached (a method and path, a tool name).

A new operation is one function in ``ops`` and one row here; it appears on each face its row names.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import BaseModel

from lab.serve import contract as C
from lab.serve import ops


@dataclass(frozen=True)
class Rest:
    """How REST reaches an operation: ``{name}`` (or ``{name:path}``) in the path is that input
    field; the other fields are the JSON body (POST, PATCH) or query parameters (GET, DELETE)."""
    method: str
    path: str
    status: int = 200
    tag: str = "memories"


@dataclass(frozen=True)
class Mcp:
    """How an agent reaches an operation: a tool, what it is for, its hints (readOnlyHint,
    destructiveHint), keyword options for the function, per-tool defaults of input fields, and
    ``shape``: the answer an agent gets from the output (default: all of it)."""
    tool: str
    description: str
    hints: dict[str, bool] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    shape: Callable[[Any, BaseModel], dict[str, Any]] | None = None


@dataclass(frozen=True)
class Operation:
    name: str
    summary: str
    input: type[BaseModel]
    output: type[BaseModel]
    function: Callable[..., Any]  # (state, caller, input, **options) -> output; async or not
    rest: Rest | None = None
    mcp: Mcp | None = None


def searched(body: C.SearchIn, out: C.SearchOut) -> dict[str, Any]:
    """A search answer for an agent: each hit's memory and score; with ``explain``, each signal's
    share of the fused score (its contribution over the sum), rounded."""
    data = out.model_dump(mode="json", exclude={"results"})
    data["results"] = []
    for hit in out.results:
        one = {k: getattr(hit, k) for k in ("memory_id", "rank", "score", "content", "title", "type", "created_at")}
        if hit.superseded:
            one["superseded"] = True
        if body.explain:
            total = sum(s.contribution for s in hit.signals.values()) or 1.0
            one["signals"] = {name: {"rank": s.rank, "share": round(s.contribution / total, 4)}
                              for name, s in sorted(hit.signals.items())}
        data["results"].append(one)
    return data


def contextual(body: C.ContextIn, out: C.ContextOut) -> dict[str, Any]:
    """A context for an agent: the text and its citations, not every assembled item's details."""
    return out.model_dump(mode="json", include={"query", "namespace", "text", "format", "budget", "used", "zones",
                                                "citations", "abstention", "took_ms"})


OPERATIONS: tuple[Operation, ...] = (
    Operation("create_memory", "Save one memory; acknowledged once committed, and searchable from then on.",
              C.MemoryIn, C.CreatedOne, ops.save, Rest("POST", "/v1/memories", 201),
              Mcp("memory_save", "Save one memory (a fact, preference, event or note). Reports 'created' with the "
                  "new id, or 'duplicate' with the id of the same text stored before. The memory is searchable as "
                  "soon as this returns. The namespace is created if it does not exist.",
                  options={"create_namespace": True})),
    Operation("create_memories", "Save several memories in one commit; each is reported created or duplicate.",
              C.MemoryBatchIn, C.CreatedBatch, ops.save_batch, Rest("POST", "/v1/memories/batch", 201)),
    Operation("save_many", "Save memories of one namespace in one commit.",
              C.NamespaceBatchIn, C.CreatedBatch, ops.save_many, None,
              Mcp("memory_save_many", "Save many memories in one commit (importing notes or a conversation): each "
                  "is reported 'created' or 'duplicate' with its id, in the order given; all are searchable when this "
                  "returns. The namespace is created if it does not exist.", options={"create_namespace": True})),
    Operation("get_memory", "Read one memory.", C.MemoryRef, C.Memory, ops.get,
              Rest("GET", "/v1/memories/{id:path}"),
              Mcp("memory_get", "Read one memory by id: its text, title, tags, type, dates, importance and whether "
                  "it is still valid.", hints={"readOnlyHint": True})),
    Operation("update_memory", "Change fields; a new content, title or tags re-embeds the memory before this returns.",
              C.UpdateIn, C.Memory, ops.update, Rest("PATCH", "/v1/memories/{id:path}"),
              Mcp("memory_update", "Change a memory: new content, title or tags are re-indexed before this returns. "
                  "Give only the fields to change; valid=false marks it wrong without deleting it; superseded_by "
                  "names its replacement.")),
    Operation("forget_memory", "Mark a memory invalid, or remove it for good (hard).", C.ForgetIn, C.Deleted,
              ops.forget, Rest("DELETE", "/v1/memories/{id:path}"),
              Mcp("memory_forget", "Forget a memory. By default it is marked invalid (kept, hidden from search, "
                  "recoverable with memory_update valid=true); hard=true removes it for good.",
                  hints={"destructiveHint": True})),
    Operation("list_memories", "Memories of one namespace, newest first; follow next_cursor for the next page.",
              C.ListIn, C.MemoryPage, ops.list_memories, Rest("GET", "/v1/memories"),
              Mcp("memory_list", "List memories of a namespace, newest first (follow next_cursor for more).",
                  hints={"readOnlyHint": True}, defaults={"limit": 20})),
    Operation("add_edges", "Add typed edges between memories of one namespace (edges already there are skipped).",
              C.EdgeBatchIn, C.EdgesAdded, ops.link_all, Rest("POST", "/v1/edges", 201, "edges")),
    Operation("link", "Link two memories with a typed edge.", C.EdgeIn, C.EdgesAdded, ops.link, None,
              Mcp("memory_link", "Link two memories with a typed edge (related_to, supersedes, contradicts, "
                  "derived_from, part_of); search follows these links and demotes superseded memories.")),
    Operation("list_edges", "The edges of a namespace (of one memory, of one relation).", C.EdgeQuery, C.EdgeList,
              ops.list_edges, Rest("GET", "/v1/edges", tag="edges")),
    Operation("delete_edges", "Remove the edges src -> dst (of one relation, or every relation); reported as "
              "added: -n.", C.EdgeRemoval, C.EdgesAdded, ops.unlink, Rest("DELETE", "/v1/edges", tag="edges")),
    Operation("create_namespace", "Create a namespace.", C.NamespaceIn, C.NamespaceOut, ops.create_namespace,
              Rest("POST", "/v1/namespaces", 201, "namespaces")),
    Operation("list_namespaces", "The namespaces this key may read.", C.Nothing, C.NamespaceList,
              ops.list_namespaces, Rest("GET", "/v1/namespaces", tag="namespaces"),
              Mcp("memory_namespaces", "The namespaces you may read: name one in the other tools when this server "
                  "has no default namespace.", hints={"readOnlyHint": True})),
    Operation("namespace_stats", "Memories, chunks, edges and index state of one namespace.", C.NamespaceRef,
              C.NamespaceStats, ops.stats, Rest("GET", "/v1/namespaces/{namespace:path}/stats", tag="namespaces")),
    Operation("delete_namespace", "Delete a namespace with its memories, edges and index.", C.NamespaceRef,
              C.NamespaceDeleted, ops.delete_namespace,
              Rest("DELETE", "/v1/namespaces/{namespace:path}", tag="namespaces")),
    Operation("search", "Hybrid search of one namespace with the served configuration.", C.SearchIn, C.SearchOut,
              ops.search, Rest("POST", "/v1/search", tag="search"),
              Mcp("memory_search", "Search memories: the best matches for a query, ranked, with their scores. "
                  "explain=true adds each signal's share of a result's score (vector, bm25, recency, graph, ...). "
                  "abstention.abstain=true means nothing relevant is stored: do not answer from these results.",
                  hints={"readOnlyHint": True}, shape=searched)),
    Operation("context", "Search, then assemble the results into a zoned context within the token budget.",
              C.ContextIn, C.ContextOut, ops.context, Rest("POST", "/v1/context", tag="search"),
              Mcp("memory_context", "Assemble what memory knows about a query into one context within a token "
                  "budget, ordered for a model to read (critical first, then by relevance, recent last), with a "
                  "citation per memory. abstention.abstain=true means nothing relevant is stored: the context is "
                  "empty, say you do not know.", hints={"readOnlyHint": True}, defaults={"format": "markdown"},
                  shape=contextual)),
    Operation("check", "Before a write: the nearest stored memories, which one the text repeats and which it may "
              "contradict.", C.CheckIn, C.CheckOut, ops.check, Rest("POST", "/v1/check", tag="search"),
              Mcp("memory_check", "Before saving: the nearest stored memories to a text, which one it duplicates and "
                  "which it may contradict (same subject, a differing number, name or negation), with advice: save, "
                  "update or skip.", hints={"readOnlyHint": True})),
)

BY_NAME = {op.name: op for op in OPERATIONS}
