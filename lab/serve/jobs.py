"""Queued work of the server's engine: a job (a work item and the future its caller waits on) and
what the engine reports as it works (``Observer``, which the server's metrics implement)."""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


@dataclass
class Job:
    work: Any  # a work item of lab.serve.work: Read for the reader threads, Write for the committer
    future: Future
    size: int = 1  # memories, for grouping creates


class Observer:
    """What the service reports as it works (the server's metrics implement it). A search or
    assembly answered in a batch reports its share of the batch's time."""

    def searched(self, queries: int, seconds: float) -> None: ...
    def assembled(self, seconds: float) -> None: ...
    def embedded(self, queries: int, seconds: float) -> None: ...
    def committed(self, memories: int, seconds: float) -> None: ...
