"""The operations' inputs and outputs (pydantic), one declaration for every face: REST routes and
MCP tools are generated from these models (``lab.serve.operations``), so a limit, a closed set of
values or a field's description is written here once. Inputs are strict: an unknown field is
refused, naming the known ones.

Field limits here are the first line; the store's own validation (``normalize_memory``) is the
second, and its errors name the field the same way.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from lab.config import AssembleConfig
from lab.fields import rule
from lab.schema import EDGE_RELATIONS, MEMORY_TYPES
from lab.serve.settings import PROXY_POSITIONS
from lab.store.records import (ID_RE, MAX_CONTENT_CHARS, MAX_ID_CHARS, MAX_NAMESPACE_CHARS, MAX_NAMESPACE_SEGMENTS,
                               NAMESPACE_RE)

MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Relation = Literal[EDGE_RELATIONS]  # type: ignore[valid-type]
Format = Literal["text", "markdown"]
# the patterns the store's own validation enforces, taken from it (lab.store.records), so the
# OpenAPI document and the MCP tool schemas say what is accepted: a client or a fuzzer generating
# from them meets the same rules
_SEGMENT = NAMESPACE_RE.pattern.removeprefix("^").removesuffix("$")
NAMESPACE_PATTERN = f"^{_SEGMENT}(/{_SEGMENT}){{0,{MAX_NAMESPACE_SEGMENTS - 1}}}$"
ID_PATTERN = ID_RE.pattern
CONTENT_MAX = MAX_CONTENT_CHARS  # characters of one memory's text (the store's own rule)
QUERY_MAX = 4000  # characters of a query (or a text to check)
# tokens of an assembled context: the assembly config's declared bounds (lab.fields)
BUDGET_BOUNDS = {k: v for k, v in rule(AssembleConfig, "budget").pydantic().items() if k != "description"}


def Namespace(description: str = "one to four segments joined by '/': team-a/notes", default: Any = ...) -> Any:
    return Field(default, min_length=1, max_length=MAX_NAMESPACE_CHARS, pattern=NAMESPACE_PATTERN,
                 description=description)


def MemoryId(description: str = "a memory's id", default: Any = ...) -> Any:
    return Field(default, min_length=1, max_length=MAX_ID_CHARS, pattern=ID_PATTERN, description=description)


def Content(description: str = "the memory's text", default: Any = ...) -> Any:
    return Field(default, min_length=1, max_length=CONTENT_MAX, description=description)


TITLE_MAX = 10_000  # characters of a title, a source or a description
TAGS_MAX = 100  # tags on one memory (or in one filter)


def Title(description: str) -> Any:
    return Field(None, max_length=TITLE_MAX, description=description)


def Tags(description: str) -> Any:
    return Field(None, max_length=TAGS_MAX, description=description)


def Importance(description: str) -> Any:
    return Field(None, ge=0, le=1, description=description)


def QueryText(description: str = "what to look for, in plain words", default: Any = ...) -> Any:
    return Field(default, min_length=1, max_length=QUERY_MAX, description=description)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Nothing(Strict):
    """The input of an operation that takes none."""


class Error(BaseModel):
    status: int
    code: str
    message: str
    field: Optional[str] = None


class ErrorBody(BaseModel):
    error: Error


# --------------------------------------------------------------------------- memories
CHOSEN_ID = ("your own id, starting with the namespace and ':' (e.g. 'notes:meeting-1'); "
             "default: one made from the text")


class MemoryFields(Strict):
    """What a memory is saved with, besides its namespace."""
    content: str = Content()
    id: Optional[str] = MemoryId(CHOSEN_ID, None)
    title: Optional[str] = Title("a short title, indexed with the text")
    tags: Optional[list[str]] = Tags("labels to filter by, indexed with the text")
    type: Optional[MemoryType] = Field(None, description="kind of memory (default semantic)")
    source: Optional[str] = Title("where it came from (default api)")
    created_at: Optional[str] = Field(None, description="ISO 8601, when it happened (default: now)")
    importance: Optional[float] = Importance("0 to 1; high values reach the critical zone")
    pinned: Optional[bool] = Field(None, description="always a candidate for context")
    metadata: Optional[dict[str, Any]] = Field(None, description="any JSON object, kept with the memory")

    def record(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class MemoryIn(MemoryFields):
    namespace: str = Namespace()


class MemoryBatchIn(Strict):
    memories: list[MemoryIn] = Field(min_length=1, max_length=1000, description="the memories to save")


class NamespaceBatchIn(Strict):
    """Memories of one namespace, saved in one commit (MCP's memory_save_many)."""
    namespace: str = Namespace()
    memories: list[MemoryFields] = Field(min_length=1, max_length=1000, description="the memories to save")


class Created(BaseModel):
    id: str
    namespace: str
    status: Literal["created", "duplicate"]


class CreatedOne(Created):
    version: str


class CreatedBatch(BaseModel):
    memories: list[Created]
    version: str


class MemoryPatch(Strict):
    # an empty patch changes nothing and is refused (422): the document says so too
    model_config = ConfigDict(extra="forbid", json_schema_extra={"minProperties": 1})

    content: Optional[str] = Content("new text (re-indexed before the answer)", None)
    title: Optional[str] = Title("new title (re-indexed)")
    tags: Optional[list[str]] = Tags("new tags (re-indexed)")
    type: Optional[MemoryType] = Field(None, description="new kind of memory")
    source: Optional[str] = Title("where it came from")
    created_at: Optional[str] = Field(None, description="ISO 8601, when it happened")
    importance: Optional[float] = Importance("0 to 1")
    pinned: Optional[bool] = Field(None, description="always a candidate for context")
    valid: Optional[bool] = Field(None, description="false marks it wrong without deleting it")
    superseded_by: Optional[str] = MemoryId("the id of the memory that replaces it (same namespace)", None)
    metadata: Optional[dict[str, Any]] = Field(None, description="any JSON object, replacing the stored one")

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True, exclude={"id"})


class MemoryRef(Strict):
    id: str = MemoryId()


class UpdateIn(MemoryPatch):
    """A memory's id and the fields to change (REST: the id in the path, the rest the body)."""
    model_config = ConfigDict(extra="forbid")
    id: str = MemoryId()


class ForgetIn(Strict):
    id: str = MemoryId()
    hard: bool = Field(False, description="remove it for good (default: mark it invalid, recoverable)")


class ListIn(Strict):
    namespace: str = Namespace()
    type: Optional[list[MemoryType]] = Field(None, max_length=len(MEMORY_TYPES), description="only these kinds")
    tag: Optional[list[str]] = Tags("only memories with one of these tags")
    valid: Optional[bool] = Field(None, description="only valid (true) or only invalidated (false) memories")
    since: Optional[str] = Field(None, description="ISO 8601, created at or after")
    until: Optional[str] = Field(None, description="ISO 8601, created before")
    limit: int = Field(50, ge=1, le=1000, description="memories per page")
    cursor: Optional[str] = Field(None, max_length=1000, description="next_cursor of the previous page")


class Memory(BaseModel):
    id: str
    namespace: str
    content: str
    title: Optional[str] = None
    tags: list[str] = []
    type: str
    source: Optional[str] = None
    created_at: str
    updated_at: Optional[str] = None
    accessed_at: Optional[str] = None
    access_count: int = 0
    importance: Optional[float] = None
    pinned: bool = False
    valid: bool = True
    superseded_by: Optional[str] = None
    metadata: dict[str, Any] = {}


class MemoryPage(BaseModel):
    namespace: Optional[str] = None
    items: list[Memory]
    next_cursor: Optional[str] = Field(None, description="pass as cursor for the next page; null on the last")


class Deleted(BaseModel):
    id: str
    deleted: int
    hard: bool


# --------------------------------------------------------------------------- edges
class EdgeIn(Strict):
    src: str = MemoryId("the memory the edge starts from")
    dst: str = MemoryId("the memory it points to (same namespace)")
    relation: Relation = Field("related_to", description="what the link means; search demotes superseded memories")
    weight: float = Field(1.0, ge=0, le=1e6, allow_inf_nan=False, description="how strongly the graph signal follows it")


class EdgeQuery(Strict):
    namespace: str = Namespace()
    memory_id: Optional[str] = MemoryId("only edges from or to this memory", None)
    relation: Optional[Relation] = Field(None, description="only edges of this relation")


class EdgeRemoval(Strict):
    src: str = MemoryId("the memory the edges start from")
    dst: str = MemoryId("the memory they point to")
    relation: Optional[Relation] = Field(None, description="only this relation (default: every relation)")


class EdgeBatchIn(Strict):
    edges: list[EdgeIn] = Field(min_length=1, max_length=1000, description="the edges to add")


class Edge(BaseModel):
    src: str
    dst: str
    relation: str
    weight: float
    namespace: str
    created_at: Optional[str] = None


class EdgesAdded(BaseModel):
    added: int


class EdgeList(BaseModel):
    items: list[Edge]


# --------------------------------------------------------------------------- namespaces
class NamespaceIn(Strict):
    name: str = Namespace("the new namespace: one to four segments joined by '/'")
    description: str = Field("", max_length=TITLE_MAX, description="what it holds")


class NamespaceRef(Strict):
    namespace: str = Namespace()


class NamespaceOut(BaseModel):
    name: str


class NamespaceList(BaseModel):
    items: list[str]


class NamespaceDeleted(BaseModel):
    name: str
    memories: int


class NamespaceStats(BaseModel):
    name: str
    memories: int
    valid: int
    pinned: int
    chunks: int
    edges: int
    by_type: dict[str, int] = {}
    by_relation: dict[str, int] = {}
    index: Optional[dict[str, Any]] = None


# --------------------------------------------------------------------------- search and context
class Filters(Strict):
    types: Optional[list[MemoryType]] = Field(None, max_length=len(MEMORY_TYPES), description="only these kinds")
    tags: Optional[list[str]] = Tags("only memories with one of these tags")
    since: Optional[str] = Field(None, description="ISO 8601, inclusive")
    until: Optional[str] = Field(None, description="ISO 8601, exclusive")
    valid_only: Optional[bool] = Field(None, description="leave out invalidated memories")


class SearchIn(Strict):
    query: str = QueryText()
    namespace: str = Namespace()
    k: Optional[int] = Field(None, ge=1, le=200, description="how many results (default: the served top_k)")
    filters: Optional[Filters] = Field(None, description="types, tags, since, until, valid_only")
    explain: bool = Field(False, description="add each signal's rank and share of a result's score")


class SignalOut(BaseModel):
    rank: int
    score: float
    contribution: float


class Hit(BaseModel):
    memory_id: str
    rank: int
    score: float
    content: str
    title: Optional[str] = None
    type: str
    created_at: str
    superseded: bool
    contradicts: list[str]
    pinned: bool
    episode: Optional[str] = None
    signals: dict[str, SignalOut]
    counterfactual: Optional[dict[str, Optional[int]]] = None
    # a learned fuser's explanation: each feature's share of the model's logit, and its bias
    learned: Optional[dict[str, float]] = None


class AbstentionOut(BaseModel):
    """Whether the search says "nothing relevant stored", with its evidence: the best candidate's
    cosine to the query (null: no candidate) and the served threshold (null: never abstains)."""
    abstain: bool
    score: Optional[float] = None
    threshold: Optional[float] = None


class SearchOut(BaseModel):
    query: str
    namespace: str
    config: str
    intent: str
    results: list[Hit]
    abstention: AbstentionOut
    took_ms: float


class ContextIn(Strict):
    query: str = QueryText()
    namespace: str = Namespace()
    budget: Optional[int] = Field(None, **BUDGET_BOUNDS, description="tokens (default: the served budget)")
    format: Format = Field("text", description="how the context is rendered")
    candidates: int = Field(50, ge=1, le=500, description="search results offered to assembly")
    filters: Optional[Filters] = Field(None, description="types, tags, since, until, valid_only")


class CheckIn(Strict):
    content: str = QueryText("the text you mean to save")
    namespace: str = Namespace()
    k: int = Field(5, ge=1, le=50, description="nearest memories to compare")


class CheckOut(BaseModel):
    namespace: str
    duplicate_of: Optional[str] = None
    possible_contradictions: list[dict[str, Any]] = []
    nearest: list[dict[str, Any]] = []
    advice: str
    took_ms: float


class Zone(BaseModel):
    capacity: int
    available: int
    used: int
    items: int
    free: int


class ContextEntry(BaseModel):
    memory_id: str
    zone: str
    position: int
    tokens: int
    score: float
    normalised: float
    text: str
    created_at: Optional[str] = None
    type: str
    reason: str
    truncated: bool
    merged: list[str]
    neighbour_of: Optional[str] = None


class Citation(BaseModel):
    marker: str
    memory_id: str
    zone: str
    position: int


class SkippedOut(BaseModel):
    memory_id: str
    tokens: int
    reason: str
    zone: str


class ContextOut(BaseModel):
    query: str
    namespace: str
    text: str
    format: str
    budget: int
    used: int
    counter: str
    zones: dict[str, Zone]
    items: list[ContextEntry]
    citations: list[Citation]
    skipped: list[SkippedOut]
    abstention: AbstentionOut  # abstain: nothing was assembled
    took_ms: float


# --------------------------------------------------------------------------- operations
class Health(BaseModel):
    status: str
    version: str


class Ready(BaseModel):
    ready: bool
    namespaces: Optional[int] = None
    store_version: Optional[str] = None
    served: Optional[dict[str, Any]] = None
    error: Optional[str] = None


# --------------------------------------------------------------------------- the chat proxy
class ProxyOptions(Strict):
    """The chat proxy's options for one request: the body field ``lab`` or the X-Lab-* headers."""
    namespace: Optional[str] = Namespace("where memory is searched (and saved); default: the key's one", None)
    position: Optional[Literal[PROXY_POSITIONS]] = Field(  # type: ignore[valid-type]
        None, description="where memory is injected (default: the server's proxy_position)")
    budget: Optional[int] = Field(None, **BUDGET_BOUNDS, description="tokens of memory (default: served)")
    save: Optional[bool] = Field(None, description="save the question and the complete answer as memories")
