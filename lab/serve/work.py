"""The server's work items: one dataclass per kind of request, each with the one method that does it.

Routes build them; the service's threads queue and run them. Reads (search, context) are answered
in batches by the searcher; writes run one at a time on the committer, except creates, which it
groups into one commit (group commit).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Union

import numpy as np

from lab.config import AssembleConfig, SearchConfig
from lab.search.searcher import SearchRequest, SearchResponse


class Writes(Protocol):
    """What a write needs: the store's writer (``lab.write.Writer``)."""

    def update(self, memory_id: str, **changes: Any) -> dict[str, Any]: ...
    def delete(self, ids: list[str], *, hard: bool = False) -> int: ...
    def add_edges(self, edges: list[dict[str, Any]]) -> int: ...
    def remove_edges(self, src: str, dst: str, relation: str | None = None) -> int: ...
    def create_namespace(self, name: str, description: str = "") -> bool: ...
    def delete_namespace(self, namespace: str) -> dict[str, int]: ...


# --------------------------------------------------------------------------- reads
@dataclass(frozen=True)
class Search:
    query: str
    namespace: str
    k: int
    config: SearchConfig  # the served configuration, with the request's filters
    explain: bool = False

    def request(self, vector: np.ndarray) -> SearchRequest:
        return SearchRequest(self.query, vector, self.k, self.explain)

    def finish(self, retriever: Any, response: SearchResponse) -> SearchResponse:
        return response


@dataclass(frozen=True)
class Context:
    query: str
    namespace: str
    candidates: int  # results searched for, before assembly
    config: SearchConfig
    assemble: AssembleConfig  # the served assembly settings, with the request's token budget

    def request(self, vector: np.ndarray) -> SearchRequest:
        return SearchRequest(self.query, vector, self.candidates, False)

    def finish(self, retriever: Any, response: SearchResponse) -> Any:
        """The search's results assembled into a context (``lab.assemble.Context``)."""
        return retriever.assemble_response(response, self.namespace, self.assemble, self.config)


Read = Union[Search, Context]


# --------------------------------------------------------------------------- writes
@dataclass(frozen=True)
class Create:
    """Memories to save; the committer groups creates into one commit."""

    records: tuple[dict[str, Any], ...]

    @property
    def size(self) -> int:
        return len(self.records)


@dataclass(frozen=True)
class Update:
    id: str
    changes: dict[str, Any]

    def run(self, writer: Writes) -> Any:
        return writer.update(self.id, **self.changes)


@dataclass(frozen=True)
class Delete:
    id: str
    hard: bool = False

    def run(self, writer: Writes) -> Any:
        return writer.delete([self.id], hard=self.hard)


@dataclass(frozen=True)
class AddEdges:
    edges: tuple[dict[str, Any], ...]

    def run(self, writer: Writes) -> Any:
        return writer.add_edges(list(self.edges))


@dataclass(frozen=True)
class RemoveEdges:
    src: str
    dst: str
    relation: str | None = None

    def run(self, writer: Writes) -> Any:
        return writer.remove_edges(self.src, self.dst, self.relation)


@dataclass(frozen=True)
class CreateNamespace:
    name: str
    description: str = ""

    def run(self, writer: Writes) -> Any:
        return writer.create_namespace(self.name, self.description)


@dataclass(frozen=True)
class DeleteNamespace:
    name: str

    def run(self, writer: Writes) -> Any:
        return writer.delete_namespace(self.name)


Write = Union[Create, Update, Delete, AddEdges, RemoveEdges, CreateNamespace, DeleteNamespace]
