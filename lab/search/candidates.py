"""Candidate generation: every signal's ranked list for a batch of queries, as one table.

The table ``(qid, memory_id, signal, rank, score)`` is the candidate cache: fusion, assembly and
metrics for any query-time configuration run on it without re-embedding or re-searching.
Rows whose signal starts with '_' are features, not ranked lists: ``_coverage`` (share of query
terms in the memory), ``_cosine`` (query vs best chunk), ``_superseded``, ``_age_hours`` and, with
memory_id '', the query's ``_intent``.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Sequence

import numpy as np
import polars as pl

from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.search import signals as sig
from lab.search.analysis import INTENTS, QueryAnalysis, analyze
from lab.search.view import NamespaceView, build_view
from lab.store.records import parse_time, validate_namespace

if TYPE_CHECKING:
    from lab.pipeline import Pipeline

FEATURES = ("_coverage", "_cosine", "_superseded", "_age_hours", "_intent")


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    namespace: str


def view(pipe: "Pipeline", namespace: str) -> NamespaceView:
    """The namespace's array view, rebuilt only when memories, edges or accesses changed."""
    store = pipe.store
    key = (store.memories_version, store._edges.version, store._access.version)
    cache = pipe.__dict__.setdefault("_views", {})
    cached = cache.get(namespace)
    if cached is None or cached.key != key:
        cached = build_view(store.memories(namespace), store.edges(namespace), namespace, key)
        cache[namespace] = cached
    return cached


def reference_time(config: SearchConfig, nsview: NamespaceView) -> datetime:
    if config.reference_time:
        return parse_time(config.reference_time, "reference_time")
    return nsview.latest


def _rows(out: dict[str, list], qid: str, ids: list[str], signal: str, positions, scores) -> None:
    for rank, (p, s) in enumerate(zip(positions, scores), start=1):
        out["qid"].append(qid)
        out["memory_id"].append(ids[int(p)])
        out["signal"].append(signal)
        out["rank"].append(rank)
        out["score"].append(float(s))


def candidates(
    pipe: "Pipeline",
    queries: Sequence[Query],
    config: SearchConfig,
    *,
    query_vectors: np.ndarray | None = None,
) -> pl.DataFrame:
    """Every enabled signal's top-``depth`` list (plus features) for each query."""
    for q in queries:
        if not isinstance(q.text, str) or not q.text.strip():
            raise ValidationError(f"query {q.qid!r}: the text must be a non-empty string")
        validate_namespace(q.namespace)
    qids = [q.qid for q in queries]
    if len(set(qids)) != len(qids):
        raise ValidationError("query ids must be unique")
    for ns in sorted({q.namespace for q in queries}):
        pipe.store.require_namespace(ns)
    if query_vectors is None:
        query_vectors = pipe.embedder.embed([q.text for q in queries])  # also feeds the _cosine feature
    out: dict[str, list] = {"qid": [], "memory_id": [], "signal": [], "rank": [], "score": []}
    enabled = set(config.signals)
    depth = config.depth
    for q, qvec in zip(queries, query_vectors):
        nsview = view(pipe, q.namespace)
        idx = pipe.index(q.namespace)
        ids = nsview.ids
        ref = reference_time(config, nsview)
        analysis = analyze(q.text, ref) if (config.analysis.temporal != "off" or config.analysis.entities) else QueryAnalysis("factual")
        allowed = nsview.mask(config.filters)
        if config.analysis.temporal == "filter" and analysis.window is not None:
            w = analysis.window
            allowed = allowed & (nsview.created_s >= w.start.timestamp()) & (nsview.created_s < w.end.timestamp())
        label_pos = nsview.label_positions(id(idx), idx.memory_of)
        allowed_labels = np.zeros(len(label_pos), dtype=bool)
        ok = label_pos >= 0
        allowed_labels[ok] = allowed[label_pos[ok]]
        lists: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if "vector" in enabled:
            hits = idx.search_vector(qvec, depth, allowed_labels)
            lists["vector"] = (np.array([nsview.pos[m] for m, _ in hits], dtype=np.int64), np.array([s for _, s in hits]))
        if "lexical" in enabled:
            hits = idx.search_lexical(q.text, depth, allowed_labels)
            lists["lexical"] = (np.array([nsview.pos[m] for m, _ in hits], dtype=np.int64), np.array([s for _, s in hits]))
        if "recency" in enabled:
            lists["recency"] = sig.recency(nsview, allowed, ref, config.half_life_hours, depth)
        if "frequency" in enabled:
            lists["frequency"] = sig.frequency(nsview, allowed, depth)
        if "entity" in enabled and config.analysis.entities:
            lists["entity"] = sig.entity(nsview, allowed, analysis.entities, depth)
        if "temporal" in enabled and config.analysis.temporal == "boost" and analysis.window is not None:
            lists["temporal"] = sig.temporal(nsview, allowed, analysis.window, depth)
        if "graph" in enabled:
            seeds: dict[int, float] = {}
            for name in ("vector", "lexical"):
                positions = lists.get(name, sig.EMPTY)[0][: config.graph.seeds]
                for rank, p in enumerate(positions.tolist(), start=1):
                    seeds[p] = max(seeds.get(p, 0.0), 1.0 / rank)
            lists["graph"] = sig.graph(nsview, allowed, sorted(seeds.items()), config.graph, depth)
        for name, (positions, scores) in lists.items():
            _rows(out, q.qid, ids, name, positions, scores)
        # features of every candidate, for query-time post-processing
        pool = sorted({int(p) for positions, _ in lists.values() for p in positions})
        if pool:
            pool_ids = [ids[p] for p in pool]
            terms = set(idx.analyzer.tokens([q.text])[0])
            cover = _coverage(idx, terms, nsview, pool)
            cos = idx.best_cosine(qvec, pool_ids)
            age = np.maximum(ref.timestamp() - nsview.created_s[pool], 0.0) / 3600.0
            for p, mid, c, a in zip(pool, pool_ids, cover, age):
                for name, value in (("_coverage", c), ("_cosine", cos.get(mid, 0.0)),
                                    ("_superseded", float(nsview.superseded[p])), ("_age_hours", float(a))):
                    out["qid"].append(q.qid); out["memory_id"].append(mid); out["signal"].append(name)
                    out["rank"].append(0); out["score"].append(float(value))
        out["qid"].append(q.qid); out["memory_id"].append(""); out["signal"].append("_intent")
        out["rank"].append(0); out["score"].append(float(INTENTS.index(analysis.intent)))
    return pl.DataFrame(out, schema={"qid": pl.String, "memory_id": pl.String, "signal": pl.String,
                                     "rank": pl.Int32, "score": pl.Float64})


def _coverage(idx, terms: set[str], nsview: NamespaceView, pool: list[int]) -> list[float]:
    """Share of the query's analysed terms that occur in each memory (title + content)."""
    if not terms:
        return [0.0] * len(pool)
    cache = nsview.__dict__.setdefault("_terms", {})
    missing = [p for p in pool if p not in cache]
    if missing:
        for p, toks in zip(missing, idx.analyzer.tokens([nsview.text_lower[p] for p in missing])):
            cache[p] = frozenset(toks)
    return [len(terms & cache[p]) / len(terms) for p in pool]
