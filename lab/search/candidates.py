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

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from lab.config import ENCODERS, SearchConfig
from lab.errors import ValidationError
from lab.index.encoders import EncoderIndex
from lab.index.namespace import NamespaceIndex
from lab.search.fusion.prepare import FEATURE_DEFAULTS, CandidateCodes
from lab.search.analysis import INTENTS, QueryAnalysis, analyze
from lab.search.signal_registry import SIGNALS, SignalInput, view_lists
from lab.search.sorted_ids import SortedIds
from lab.search.adjacency import adjacency_lift
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
    """What search reads of one namespace at one store version: its array view, its index and
    the extra encoders' indexes the store carries (by list name: "vector@e5")."""

    view: NamespaceView
    index: NamespaceIndex
    encoders: Mapping[str, EncoderIndex] = field(default_factory=dict)


def encoder_alias(list_name: str) -> str:
    """The index.models entry whose encoder ranks ``list_name``."""
    return next(alias for alias, name in ENCODERS.items() if name == list_name)


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


@dataclass(frozen=True)
class Run:
    """One run of candidate rows of one query: a ranked list (ranks 1..n) or a feature (rank 0),
    by view position; or the query's intent (no positions: memory id '')."""

    query: int  # the query's index in its batch
    signal: str
    positions: np.ndarray | None  # int64 view positions (None: the intent row)
    scores: np.ndarray  # float64
    ranked: bool


@dataclass
class CandidateRuns:
    """A batch's candidates as runs over view positions: the candidate table before its ids are
    written out (`table`), or encoded without strings for one namespace (`candidate_codes`)."""

    queries: Sequence[Query]
    views: list[NamespaceView]  # per query: the view its positions index
    runs: list[Run] = field(default_factory=list)

    def add(self, query: int, signal: str, positions, scores, ranked: bool = True) -> None:
        self.runs.append(Run(query, signal, np.asarray(positions, dtype=np.int64),
                             np.asarray(scores, dtype=np.float64), ranked))

    def table(self) -> pl.DataFrame:
        """The candidate table ``(qid, memory_id, signal, rank, score)``, rows in run order."""
        out: dict[str, list] = {"qid": [], "memory_id": [], "signal": [], "rank": [], "score": []}
        for run in self.runs:
            n = len(run.scores)
            out["qid"].extend([self.queries[run.query].qid] * n)
            out["memory_id"].extend([""] if run.positions is None
                                    else self.views[run.query].ids.take(run.positions.tolist()))
            out["signal"].extend([run.signal] * n)
            out["rank"].extend(range(1, n + 1) if run.ranked else [0] * n)
            out["score"].extend(run.scores.tolist())
        return pl.DataFrame(out, schema=CANDIDATE_SCHEMA)


def candidate_codes(runs: CandidateRuns) -> CandidateCodes:
    """The runs of one namespace's batch as the integer codes `prepare` would make of their table,
    without writing out an id: view positions are in id order, so a position's rank among the
    candidates' positions is its memory id's code."""
    views = {id(v) for v in runs.views}
    if len(views) > 1:
        raise ValidationError("candidate codes are made for one namespace's batch; these runs span several")
    qids = [q.qid for q in runs.queries]
    q_code = np.empty(len(qids), dtype=np.int64)
    q_code[np.argsort(np.asarray(qids, dtype=object), kind="stable")] = np.arange(len(qids))
    ranked = [r for r in runs.runs if r.ranked and len(r.scores)]  # an empty list writes no row
    featured = [r for r in runs.runs if not r.ranked and r.positions is not None]
    intents = [r for r in runs.runs if r.positions is None]
    empty = np.zeros(0, dtype=np.int64)
    positions = np.concatenate([r.positions for r in ranked + featured] or [empty])
    uniq = np.unique(positions)
    signals = tuple(sorted({r.signal for r in ranked}))
    s_of = {s: i for i, s in enumerate(signals)}

    def joined(parts: list[np.ndarray], dtype) -> np.ndarray:
        return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype=dtype)

    def codes_of(rs: list[Run]) -> tuple[np.ndarray, np.ndarray]:
        return (joined([np.full(len(r.positions), q_code[r.query]) for r in rs], np.int64),  # type: ignore[arg-type]
                np.searchsorted(uniq, joined([r.positions for r in rs], np.int64)))  # type: ignore[misc]

    rq, rm = codes_of(ranked)
    features = {}
    for name in FEATURE_DEFAULTS:
        of_name = [r for r in featured if r.signal == name]
        if of_name:
            fq, fm = codes_of(of_name)
            features[name] = (fq, fm, joined([r.scores for r in of_name], np.float64))
    view = runs.views[0] if runs.views else None
    memory_ids = pl.Series("memory_id", view.ids.take(uniq.tolist()) if view is not None else [], dtype=pl.String)
    return CandidateCodes(
        pl.Series("qid", sorted(qids), dtype=pl.String), memory_ids, signals, rq, rm,
        joined([np.full(len(r.scores), s_of[r.signal]) for r in ranked], np.int64),
        joined([np.arange(1, len(r.scores) + 1) for r in ranked], np.float64),
        joined([r.scores for r in ranked], np.float64), features,
        np.asarray([q_code[r.query] for r in intents], dtype=np.int64),
        np.asarray([int(r.scores[0]) for r in intents], dtype=np.int64))


def best_cosines(nsview: NamespaceView, idx: NamespaceIndex, qvec: np.ndarray, pool: np.ndarray) -> np.ndarray:
    """Per position in ``pool``: the cosine of the query and the memory's best chunk (0 without one)."""
    labels, indptr = nsview.labels_by_position(id(idx), idx.memory_of, idx.live)
    counts = indptr[pool + 1] - indptr[pool]
    out = np.zeros(len(pool))
    if not counts.sum():
        return out
    seg = np.cumsum(counts) - counts  # where each position's labels start in the gathered run
    gathered = labels[np.repeat(indptr[pool] - seg, counts) + np.arange(counts.sum())]
    sims = idx.cosines(qvec, gathered)
    has = counts > 0
    out[has] = np.maximum.reduceat(sims, seg[has])
    return out


def _feature_rows(out: CandidateRuns, qi: int, q: Query, nsview: NamespaceView, idx: NamespaceIndex, qvec: np.ndarray,
                  ref: datetime, pool: np.ndarray, listed: np.ndarray, ep_of: np.ndarray, turn_of: np.ndarray) -> None:
    """The feature rows of the pooled candidates (columns at a time: a pool runs to hundreds)."""
    features: list[tuple[str, np.ndarray, np.ndarray]] = [  # (name, positions, values)
        ("_cosine", pool, best_cosines(nsview, idx, qvec, pool)),
        ("_superseded", pool, nsview.superseded[pool].astype(np.float64)),
        ("_age_hours", pool, np.maximum(ref.timestamp() - nsview.created_s[pool], 0.0) / 3600.0),
    ]
    if len(listed):
        # coverage scales a fused score, which a turn in no list does not have: listed ones only
        terms = set(idx.analyzer.tokens([q.text])[0])
        cover = ([len(terms & t) / len(terms) for t in nsview.terms(listed.tolist(), idx.analyzer.term_sets)]
                 if terms else [0.0] * len(listed))
        features.append(("_coverage", listed, np.asarray(cover, dtype=np.float64)))
    in_episode = pool[ep_of[pool] >= 0]
    features += [("_episode", in_episode, ep_of[in_episode]), ("_turn", in_episode, turn_of[in_episode])]
    if len(in_episode):  # what the neighbour boost waits for (FusionConfig.neighbour_min_lift)
        lift = adjacency_lift(nsview, idx)
        if lift is not None:
            features.append(("_adjacency", in_episode, np.full(len(in_episode), lift)))
    for name, positions, values in features:
        out.add(qi, name, positions, values, ranked=False)


def _allowed(config: SearchConfig, nsview: NamespaceView, analysis: QueryAnalysis) -> tuple[np.ndarray, np.ndarray]:
    """Which memories of ``nsview`` may be candidates (the filters, a temporal filter's window,
    derived facts left out with "sources_only"), and which facts the derived view ranks."""
    allowed = nsview.mask(config.filters)
    in_window = None
    if config.analysis.temporal == "filter" and analysis.window is not None:
        w = analysis.window
        in_window = (nsview.created_s >= w.start.timestamp()) & (nsview.created_s < w.end.timestamp())
        allowed = allowed & in_window
    # the derived view ranks the facts passing the filters; with "sources_only" nothing else does
    facts = (allowed & nsview.derived_mask if nsview.derived_from and "derived" in config.views
             else allowed)  # (the derived view alone reads it, and ranks nothing without facts)
    if nsview.derived_from and config.derived_facts == "sources_only":
        allowed = nsview.mask(config.filters, without_derived=True)
        allowed = allowed if in_window is None else allowed & in_window
    return allowed, facts


def _feature_pool(nsview: NamespaceView, listed: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """The positions whose features are computed: the listed candidates and, in a store with
    episodes, the allowed turns just before and after each (features only, no list): a neighbour
    boost can then lift an answer next to its question."""
    if not (len(listed) and nsview.has_episodes()):
        return listed
    before, after = nsview.adjacent_turns()
    around = np.concatenate([before[listed], after[listed]])
    around = around[around >= 0]
    return np.union1d(listed, around[allowed[around]])


def candidates(
    snapshots: Mapping[str, NamespaceSnapshot],
    queries: Sequence[Query],
    query_vectors: np.ndarray,
    config: SearchConfig,
    *,
    analyses: Sequence[QueryAnalysis] | None = None,
    encoder_vectors: Mapping[str, Any] | None = None,
) -> pl.DataFrame:
    """Every enabled signal's top-``depth`` list (plus features) for each query, as one table.

    ``snapshots`` holds each queried namespace; ``query_vectors`` the queries' embeddings, in order;
    ``analyses`` the queries' analyses when the caller has them already; ``encoder_vectors`` the
    queries' vectors by each extra encoder the config ranks (``config.encoders``), row i for query i.
    """
    return candidate_runs(snapshots, queries, query_vectors, config, analyses=analyses,
                          encoder_vectors=encoder_vectors).table()


def candidate_runs(
    snapshots: Mapping[str, NamespaceSnapshot],
    queries: Sequence[Query],
    query_vectors: np.ndarray,
    config: SearchConfig,
    *,
    analyses: Sequence[QueryAnalysis] | None = None,
    encoder_vectors: Mapping[str, Any] | None = None,
) -> CandidateRuns:
    """`candidates` as runs over view positions (its arguments are those of `candidates`)."""
    check_queries(queries)
    missing = sorted({q.namespace for q in queries} - set(snapshots))
    if missing:
        raise ValidationError(f"no snapshot of namespace(s) {missing}")
    if len(query_vectors) != len(queries):
        raise ValidationError(f"{len(queries)} queries but {len(query_vectors)} query vectors")
    encoder_vectors = encoder_vectors or {}
    for name in config.encoders:
        if name not in encoder_vectors:
            raise ValidationError(f"config {config.name!r} ranks {name} but no query vectors of that encoder were given")
    out = CandidateRuns(queries, [snapshots[q.namespace].view for q in queries])
    enabled = [s for name, s in SIGNALS.items() if name in config.signals]
    depth = config.depth
    for i, (q, qvec) in enumerate(zip(queries, query_vectors)):
        snap = snapshots[q.namespace]
        nsview, idx = snap.view, snap.index
        ref = reference_time(config, nsview)
        analysis = analyses[i] if analyses is not None else query_analysis(q.text, config, ref)
        allowed, facts = _allowed(config, nsview, analysis)
        allowed_labels = nsview.labels_passing(id(idx), idx.memory_of, allowed)
        lists: dict = {}
        signal_input = SignalInput(q.text, qvec, nsview, idx, allowed, allowed_labels, facts, analysis, ref,
                                   config, depth, lists)
        for signal in enabled:
            ranked = signal.fn(signal_input)
            if ranked is not None:
                lists[signal.name] = ranked
        for view in config.views:
            lists.update(view_lists(signal_input, view))
        for name in config.encoders:
            encoder = snap.encoders.get(name)
            if encoder is None:
                raise ValidationError(f"config {config.name!r} ranks {name}, but the store does not carry that "
                                      f"encoder: add {encoder_alias(name)!r} to its index.models", field="encoders")
            hits = encoder.search(encoder_vectors[name][i], depth, allowed_labels)
            lists[name] = (np.array([nsview.pos[m] for m, _ in hits], dtype=np.int64),
                           np.array([score for _, score in hits], dtype=np.float64))
        for name, (positions, scores) in lists.items():
            out.add(i, name, positions, scores)
        # features of every candidate, for query-time post-processing
        listed = np.unique(np.concatenate([positions for positions, _ in lists.values()] or [np.zeros(0)])
                           ).astype(np.int64)
        pool = _feature_pool(nsview, listed, allowed)
        ep_of, turn_of = nsview.episode_turns()
        if len(pool):
            _feature_rows(out, i, q, nsview, idx, qvec, ref, pool, listed, ep_of, turn_of)
        out.runs.append(Run(i, "_intent", None, np.asarray([float(INTENTS.index(analysis.intent))]), False))
    return out
