"""Candidate generation: every signal's ranked list for a batch of queries, as one table.

The table ``(qid, memory_id, signal, rank, score)`` is the candidate cache: fusion, assembly and
metrics for any query-time configuration run on it without re-embedding or re-searching.
Rows whose signal starts with '_' are features, not ranked lists: ``_coverage`` (share of query
terms in the memory), ``_cosine`` (query vs best chunk), ``_superseded``, ``_age_hours``,
``_episode`` and ``_turn`` (where the memory sits in its episode), and, with memory_id '', the
query's ``_intent``. The turns next to a candidate carry features but no list: only a neighbour
boost (``FusionConfig.neighbour_boost``) can make them results.

Search reads a ``NamespaceSnapshot`` per namespace (its array view and its index), handed over by
the read side: nothing here opens, builds, syncs or saves anything.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping, Sequence

import numpy as np
import polars as pl

from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.index.namespace import NamespaceIndex
from lab.search.analysis import INTENTS, QueryAnalysis, analyze
from lab.search.signal_registry import SIGNALS, SignalInput, view_lists
from lab.search.view import NamespaceView
from lab.store.records import parse_time, validate_namespace

FEATURES = ("_coverage", "_cosine", "_superseded", "_age_hours", "_episode", "_turn", "_intent")
CANDIDATE_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32,
                    "score": pl.Float64}


@dataclass(frozen=True)
class Query:
    qid: str
    text: str
    namespace: str


@dataclass(frozen=True)
class NamespaceSnapshot:
    """What search reads of one namespace at one store version: its array view and its index."""

    view: NamespaceView
    index: NamespaceIndex


def reference_time(config: SearchConfig, nsview: NamespaceView) -> datetime:
    """The search's "now": the configured reference time, else the namespace's latest memory."""
    if config.reference_time:
        return parse_time(config.reference_time, "reference_time")
    return nsview.latest


def query_analysis(text: str, config: SearchConfig, reference: datetime) -> QueryAnalysis:
    """The rule-based analysis a configuration asks for (none when temporal and entities are off)."""
    if config.analysis.temporal != "off" or config.analysis.entities:
        return analyze(text, reference)
    return QueryAnalysis("factual")


def check_queries(queries: Sequence[Query]) -> None:
    for q in queries:
        if not isinstance(q.text, str) or not q.text.strip():
            raise ValidationError(f"query {q.qid!r}: the text must be a non-empty string")
        validate_namespace(q.namespace)
    qids = [q.qid for q in queries]
    if len(set(qids)) != len(qids):
        raise ValidationError("query ids must be unique")


def _rows(out: dict[str, list], qid: str, ids: list[str], signal: str, positions, scores) -> None:
    for rank, (p, s) in enumerate(zip(positions, scores), start=1):
        out["qid"].append(qid)
        out["memory_id"].append(ids[int(p)])
        out["signal"].append(signal)
        out["rank"].append(rank)
        out["score"].append(float(s))


def candidates(
    snapshots: Mapping[str, NamespaceSnapshot],
    queries: Sequence[Query],
    query_vectors: np.ndarray,
    config: SearchConfig,
    *,
    analyses: Sequence[QueryAnalysis] | None = None,
) -> pl.DataFrame:
    """Every enabled signal's top-``depth`` list (plus features) for each query.

    ``snapshots`` holds each queried namespace; ``query_vectors`` the queries' embeddings, in order;
    ``analyses`` the queries' analyses when the caller has them already.
    """
    check_queries(queries)
    missing = sorted({q.namespace for q in queries} - set(snapshots))
    if missing:
        raise ValidationError(f"no snapshot of namespace(s) {missing}")
    if len(query_vectors) != len(queries):
        raise ValidationError(f"{len(queries)} queries but {len(query_vectors)} query vectors")
    out: dict[str, list] = {"qid": [], "memory_id": [], "signal": [], "rank": [], "score": []}
    enabled = [s for name, s in SIGNALS.items() if name in config.signals]
    depth = config.depth
    for i, (q, qvec) in enumerate(zip(queries, query_vectors)):
        snap = snapshots[q.namespace]
        nsview, idx = snap.view, snap.index
        ids = nsview.ids
        ref = reference_time(config, nsview)
        analysis = analyses[i] if analyses is not None else query_analysis(q.text, config, ref)
        allowed = nsview.mask(config.filters)
        if config.analysis.temporal == "filter" and analysis.window is not None:
            w = analysis.window
            allowed = allowed & (nsview.created_s >= w.start.timestamp()) & (nsview.created_s < w.end.timestamp())
        label_pos = nsview.label_positions(id(idx), idx.memory_of)
        allowed_labels = np.zeros(len(label_pos), dtype=bool)
        ok = label_pos >= 0
        allowed_labels[ok] = allowed[label_pos[ok]]
        lists: dict = {}
        signal_input = SignalInput(q.text, qvec, nsview, idx, allowed, allowed_labels, analysis, ref, config,
                                   depth, lists)
        for signal in enabled:
            ranked = signal.fn(signal_input)
            if ranked is not None:
                lists[signal.name] = ranked
        for view in config.views:
            lists.update(view_lists(signal_input, view))
        for name, (positions, scores) in lists.items():
            _rows(out, q.qid, ids, name, positions, scores)
        # features of every candidate, for query-time post-processing
        listed = sorted({int(p) for positions, _ in lists.values() for p in positions})
        pool = listed
        ep_of, turn_of = nsview.episode_turns()
        members = nsview.episode_members()
        if listed and members:
            # the turns just before and after each candidate join the pool (features only, no
            # list): a neighbour boost can then lift an answer next to its question
            episodes = nsview.episodes
            around = set()
            for p in listed:
                if ep_of[p] >= 0:
                    group, t = members[episodes[p]], int(turn_of[p])
                    around.update(group[u] for u in (t - 1, t + 1) if 0 <= u < len(group) and allowed[group[u]])
            pool = sorted(set(listed) | around)
        if pool:
            pool_ids = [ids[p] for p in pool]
            # coverage scales a fused score, which a turn in no list does not have: listed ones only
            terms = set(idx.analyzer.tokens([q.text])[0])
            cover = dict(zip(listed, [len(terms & t) / len(terms) for t in nsview.terms(listed, idx.analyzer.tokens)]
                             if terms else [0.0] * len(listed)))
            cos = idx.best_cosine(qvec, pool_ids)
            age = np.maximum(ref.timestamp() - nsview.created_s[pool], 0.0) / 3600.0
            for p, mid, a in zip(pool, pool_ids, age):
                values = [("_cosine", cos.get(mid, 0.0)), ("_superseded", float(nsview.superseded[p])),
                          ("_age_hours", float(a))]
                if p in cover:
                    values.append(("_coverage", cover[p]))
                if ep_of[p] >= 0:
                    values += [("_episode", ep_of[p]), ("_turn", turn_of[p])]
                for name, value in values:
                    out["qid"].append(q.qid); out["memory_id"].append(mid); out["signal"].append(name)
                    out["rank"].append(0); out["score"].append(float(value))
        out["qid"].append(q.qid); out["memory_id"].append(""); out["signal"].append("_intent")
        out["rank"].append(0); out["score"].append(float(INTENTS.index(analysis.intent)))
    return pl.DataFrame(out, schema=CANDIDATE_SCHEMA)
