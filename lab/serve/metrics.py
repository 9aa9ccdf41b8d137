"""Prometheus metrics of one server: requests and latency per route, search, assembly, query
embedding and commit durations, and memories per namespace (read from the store at scrape time)."""
from __future__ import annotations

from typing import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from lab.serve.jobs import Observer

FAST = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5)
SLOW = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Memories:
    """lab_memories{namespace}: counted when scraped, so it is never stale; only the namespaces
    ``visible`` admits are named (a caller never learns of a namespace its key may not read)."""

    def __init__(self, counts: Callable[[], dict[str, int]], visible: Callable[[str], bool]) -> None:
        self.counts, self.visible = counts, visible

    def collect(self):
        family = GaugeMetricFamily("lab_memories", "memories stored, by namespace", labels=["namespace"])
        for ns, n in sorted(self.counts().items()):
            if self.visible(ns):
                family.add_metric([ns], n)
        yield family


class Metrics(Observer):
    """The registry (one per app, so tests can start several) and the service's observer."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("lab_http_requests", "HTTP requests by route, method and status",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("lab_http_request_duration_seconds", "HTTP request latency by route",
                                 ["route", "method"], buckets=FAST, registry=r)
        self.search = Histogram("lab_search_duration_seconds", "search (candidates and fusion), without query embedding",
                                buckets=FAST, registry=r)
        self.search_batch = Histogram("lab_search_batch_size", "queries answered together (one candidate table, one fusion)",
                                      buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.assemble = Histogram("lab_assemble_duration_seconds", "context assembly", buckets=FAST, registry=r)
        self.embed = Histogram("lab_query_embedding_duration_seconds", "one model call embedding a batch of queries",
                               buckets=FAST, registry=r)
        self.embed_batch = Histogram("lab_query_embedding_batch_size", "queries embedded per model call",
                                     buckets=(1, 2, 4, 8, 16, 32, 64), registry=r)
        self.commit = Histogram("lab_commit_duration_seconds", "one group commit of created memories",
                                buckets=SLOW, registry=r)
        self.commit_group = Histogram("lab_commit_group_size", "memories per group commit",
                                      buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=r)
        self.ready = Gauge("lab_ready", "1 once the indexes are loaded", registry=r)
        self.rate_limited = Counter("lab_rate_limited", "requests refused with 429", registry=r)

    def count_memories(self, counts: Callable[[], dict[str, int]]) -> None:
        self._counts = counts

    def exposition(self, visible: Callable[[str], bool]) -> bytes:
        """The text exposition, with memories counted for the namespaces ``visible`` admits."""
        from prometheus_client import generate_latest

        text = generate_latest(self.registry)
        counts = getattr(self, "_counts", None)
        if counts is None:
            return text
        scoped = CollectorRegistry()
        scoped.register(_Memories(counts, visible))
        return text + generate_latest(scoped)

    def searched(self, queries: int, seconds: float) -> None:
        self.search_batch.observe(queries)
        for _ in range(queries):  # the histogram is per search: each its share of the batch
            self.search.observe(seconds / queries)

    def assembled(self, seconds: float) -> None:
        self.assemble.observe(seconds)

    def embedded(self, queries: int, seconds: float) -> None:
        self.embed.observe(seconds)
        self.embed_batch.observe(queries)

    def committed(self, memories: int, seconds: float) -> None:
        self.commit.observe(seconds)
        self.commit_group.observe(memories)
