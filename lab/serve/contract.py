"""Request and response bodies of the REST API (pydantic): strict, unknown fields refused.

Field limits here are the first line; the store's own validation (``normalize_memory``) is the
second, and its errors name the field the same way.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from lab.schema import EDGE_RELATIONS, MEMORY_TYPES

MemoryType = Literal[MEMORY_TYPES]  # type: ignore[valid-type]
Relation = Literal[EDGE_RELATIONS]  # type: ignore[valid-type]
Text = Field(min_length=1, max_length=1_000_000)
# the patterns the store's own validation enforces (lab.store.records), so the OpenAPI document
# says what is accepted: a client or a fuzzer generating from it meets the same rules
NAMESPACE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,3}$"
ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@#/+-]{0,199}$"
Namespace = Field(min_length=1, max_length=128, pattern=NAMESPACE_PATTERN,
                  description="one to four segments joined by '/': team-a/notes")
MemoryId = Field(min_length=1, max_length=200, pattern=ID_PATTERN)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Error(BaseModel):
    status: int
    code: str
    message: str
    field: Optional[str] = None


class ErrorBody(BaseModel):
    error: Error


# --------------------------------------------------------------------------- memories
class MemoryIn(Strict):
    content: str = Text
    namespace: str = Namespace
    id: Optional[str] = Field(None, min_length=1, max_length=200, pattern=ID_PATTERN,
                              description="your own id, starting with the namespace and ':' "
                                          "(e.g. 'notes:meeting-1'; default: one made from the text)")
    title: Optional[str] = Field(None, max_length=10_000)
    tags: Optional[list[str]] = Field(None, max_length=100)
    type: Optional[MemoryType] = None
    source: Optional[str] = Field(None, max_length=10_000)
    created_at: Optional[str] = Field(None, description="ISO 8601; default: now")
    importance: Optional[float] = Field(None, ge=0, le=1)
    pinned: Optional[bool] = None
    metadata: Optional[dict[str, Any]] = None

    def record(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class MemoryBatchIn(Strict):
    memories: list[MemoryIn] = Field(min_length=1, max_length=1000)


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

    content: Optional[str] = Field(None, min_length=1, max_length=1_000_000)
    title: Optional[str] = Field(None, max_length=10_000)
    tags: Optional[list[str]] = Field(None, max_length=100)
    type: Optional[MemoryType] = None
    source: Optional[str] = Field(None, max_length=10_000)
    created_at: Optional[str] = None
    importance: Optional[float] = Field(None, ge=0, le=1)
    pinned: Optional[bool] = None
    valid: Optional[bool] = None
    superseded_by: Optional[str] = Field(None, min_length=1, max_length=200, pattern=ID_PATTERN)
    metadata: Optional[dict[str, Any]] = None

    def changes(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


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
    items: list[Memory]
    next_cursor: Optional[str] = Field(None, description="pass as ?cursor= for the next page; null on the last")


class Deleted(BaseModel):
    deleted: int
    hard: bool


# --------------------------------------------------------------------------- edges
class EdgeIn(Strict):
    src: str = MemoryId
    dst: str = MemoryId
    relation: Relation = "related_to"
    weight: float = Field(1.0, ge=0, le=1e6, allow_inf_nan=False)


class EdgeBatchIn(Strict):
    edges: list[EdgeIn] = Field(min_length=1, max_length=1000)


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
    name: str = Namespace
    description: str = Field("", max_length=10_000)


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
    types: Optional[list[MemoryType]] = Field(None, max_length=len(MEMORY_TYPES))
    tags: Optional[list[str]] = Field(None, max_length=100)
    since: Optional[str] = Field(None, description="ISO 8601, inclusive")
    until: Optional[str] = Field(None, description="ISO 8601, exclusive")
    valid_only: Optional[bool] = None


class SearchIn(Strict):
    query: str = Field(min_length=1, max_length=4000)
    namespace: str = Namespace
    k: Optional[int] = Field(None, ge=1, le=200, description="default: the served configuration's top_k")
    filters: Optional[Filters] = None
    explain: bool = False


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


class SearchOut(BaseModel):
    query: str
    namespace: str
    config: str
    intent: str
    results: list[Hit]
    took_ms: float


class ContextIn(Strict):
    query: str = Field(min_length=1, max_length=4000)
    namespace: str = Namespace
    budget: Optional[int] = Field(None, ge=1, le=1_000_000, description="tokens; default: the served configuration's")
    format: Literal["text", "markdown"] = "text"
    candidates: int = Field(50, ge=1, le=500, description="search results offered to assembly")
    filters: Optional[Filters] = None


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
