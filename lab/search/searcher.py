"""Search for one query: candidates, fusion, and results with per-signal explanations."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Mapping, Sequence

import numpy as np
import polars as pl

from lab.config import FusionConfig, SearchConfig
from lab.errors import ValidationError
from lab.fields import rule
from lab.search.abstain import Abstention, best_scores_of_codes, decide
from lab.search.analysis import QueryAnalysis
from lab.search.candidates import NamespaceSnapshot, Query, candidate_codes, candidate_runs, query_analysis, reference_time
from lab.search.fusion import RESULT_SCHEMA, PreparedCandidates, explain_learned, fuse_arrays, fuse_detailed
from lab.search.fusion.fused import live_rows
from lab.search.fusion.prepare import prepare_codes
from lab.search.rerank import memory_text, reranked


@dataclass(frozen=True)
class SignalDetail:
    rank: int
    score: float  # the signal's raw score
    contribution: float  # what it added to the fused score (before post-processing)


@dataclass(frozen=True)
class Result:
    memory_id: str
    rank: int
    score: float
    content: str
    title: str
    type: str
    created_at: datetime
    signals: dict[str, SignalDetail]
    superseded: bool = False
    contradicts: tuple[str, ...] = ()  # other results this one is in conflict with
    counterfactual: dict[str, int | None] | None = None  # rank without each signal (None: dropped out)
    pinned: bool = False
    episode: str | None = None  # metadata "episode" (or "session"): adjacent turns share it
    # with a learned fuser, when explained: each feature's share of the model's logit, and its bias
    learned: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "memory_id": self.memory_id, "rank": self.rank, "score": self.score, "type": self.type,
            "title": self.title, "content": self.content, "created_at": self.created_at.isoformat(),
            "superseded": self.superseded, "contradicts": list(self.contradicts),
            "signals": {s: d.__dict__ for s, d in self.signals.items()},
            "pinned": self.pinned, "episode": self.episode,
        }
        if self.counterfactual is not None:
            out["counterfactual"] = self.counterfactual
        if self.learned is not None:
            out["learned"] = self.learned
        return out


@dataclass
class SearchResponse:
    query: str
    namespace: str
    config: str
    analysis: QueryAnalysis
    results: list[Result] = field(default_factory=list)
    # "nothing relevant stored", with its evidence (lab.search.abstain); the results are kept, so a
    # caller can still look at what was found
    abstention: Abstention = Abstention(False, None, None)


@dataclass(frozen=True)
class SearchRequest:
    """One query of a batch: its text, its embedding, how many results, whether to explain them."""

    query: str
    vector: np.ndarray | None = None  # the caller embeds (a retriever fills in what is missing)
    k: int | None = None
    explain: bool = False
    # the query's vectors by the extra encoders the config ranks ("vector@e5": ...), likewise
    encoded: Mapping[str, Any] | None = None


def search(
    snapshot: NamespaceSnapshot,
    query: str,
    query_vector: np.ndarray,
    config: SearchConfig,
    *,
    k: int | None = None,
    explain: bool = False,
    encoded: Mapping[str, Any] | None = None,
) -> SearchResponse:
    """Search one namespace's snapshot: candidates, fusion, and results with per-signal details.

    Pure with respect to the store: it reads the snapshot and writes nothing (recording accesses
    is the write side's business).
    """
    return search_many(snapshot, [SearchRequest(query, query_vector, k, explain, encoded)], config)[0]


def memory_texts(nsview, ids: list[str]) -> dict[str, str]:
    """Memory id -> title and content (what a rerank server reads), for the ids of ``nsview`` asked."""
    present = [m for m in ids if m in nsview.pos]
    rows = nsview.rows_at([nsview.pos[m] for m in present])
    return {m: memory_text(row["title"], row["content"]) for m, row in zip(present, rows)}


def _check(request: SearchRequest) -> None:
    if not isinstance(request.query, str) or not request.query.strip():
        raise ValidationError("query must be a non-empty string")
    problem = None if request.k is None else rule(FusionConfig, "top_k").problem(request.k)
    if problem:  # a request's k is a top_k: the fusion config's rule
        raise ValidationError(f"k {problem}", field="k")


def search_many(snapshot: NamespaceSnapshot, requests: Sequence[SearchRequest], config: SearchConfig) -> list[SearchResponse]:
    """Several queries of one namespace under one configuration, answered together.

    One encoding and one fusion serve the whole batch, so a server answering concurrent requests
    pays their fixed cost once. The candidates stay view positions until the results are picked
    (`candidate_codes`): no candidate table of strings is written out for a search. Fusion ranks
    each query on its own, so every response is the one ``search`` gives for that query alone
    (each request's ``k`` cuts its own ranking), and the one fusing its candidate table gives.
    """
    if not requests:
        return []
    for i, request in enumerate(requests):
        _check(request)
        if request.vector is None:
            raise ValidationError(f"search request {i} ({request.query!r}) has no query vector")
    limit = [r.k or config.fusion.top_k for r in requests]
    # a rerank stage re-orders the fused top n: the fusion ranks at least that deep
    config = replace(config, fusion=replace(config.fusion, top_k=max(max(limit), config.rerank.top_n if config.rerank.server else 0)))
    nsview = snapshot.view
    namespace = nsview.namespace
    ref = reference_time(config, nsview)
    analyses = [query_analysis(r.query, config, ref) for r in requests]
    # zero-padded: string order is request order
    qids = [f"{i:06d}" for i in range(len(requests))]
    encoder_vectors = {}
    for name in config.encoders:
        missing = [i for i, r in enumerate(requests) if not r.encoded or name not in r.encoded]
        if missing:
            raise ValidationError(f"search request {missing[0]} has no {name} query vector (config {config.name!r} ranks it)")
        encoder_vectors[name] = [r.encoded[name] for r in requests]  # type: ignore[index]
    codes = candidate_codes(candidate_runs(
        {namespace: snapshot}, [Query(qid, r.query, namespace) for qid, r in zip(qids, requests)],
        np.asarray([r.vector for r in requests]), config, analyses=analyses, encoder_vectors=encoder_vectors))
    best = best_scores_of_codes(codes)
    cands = prepare_codes(codes)
    per_query, details = _ranked(cands, config, dict(zip(qids, (r.query for r in requests))), nsview)
    for qid, k in zip(qids, limit):
        per_query[qid] = [hit for hit in per_query[qid] if hit[1] <= k]
    counterfactual = _counterfactuals(cands, config, requests, qids, per_query, details)
    learned_shares: dict[tuple[str, str], dict[str, float]] = {}
    if config.fusion.learned is not None:
        keys = [(qid, mid) for qid, r in zip(qids, requests) if r.explain for mid, _, _ in per_query[qid]]
        learned_shares = dict(zip(keys, explain_learned(cands, config.fusion, keys))) if keys else {}
    ids = list(dict.fromkeys(mid for hits in per_query.values() for mid, _, _ in hits))
    rows = dict(zip(ids, nsview.rows_at([nsview.pos[m] for m in ids])))
    episodes = nsview.episodes
    responses = []
    for qid, request, analysis in zip(qids, requests, analyses):
        hits = per_query[qid]
        in_results = {nsview.pos[m] for m, _, _ in hits if m in nsview.pos}
        results = []
        for mid, rank, score in hits:
            row = rows[mid]
            p = nsview.pos.get(mid)
            conflicts = tuple(sorted(nsview.ids[o] for o in nsview.contradicts.get(p, ()) if o in in_results))
            results.append(Result(
                memory_id=mid, rank=rank, score=score, content=row["content"], title=row["title"],
                type=row["type"], created_at=row["created_at"], signals=details.get((qid, mid), {}),
                superseded=bool(nsview.superseded[p]) if p is not None else False, contradicts=conflicts,
                counterfactual=counterfactual.get((qid, mid)) if request.explain else None,
                pinned=bool(row["pinned"]), episode=episodes[p] if p is not None else None,
                learned=learned_shares.get((qid, mid)),
            ))
        responses.append(SearchResponse(request.query, namespace, config.name, analysis, results,
                                        decide(best.get(qid), config.abstain)))
    return responses


def _ranked(cands: PreparedCandidates, config: SearchConfig, queries: dict[str, str], nsview
            ) -> tuple[dict[str, list[tuple[str, int, float]]], dict[tuple[str, str], dict[str, SignalDetail]]]:
    """Per query id its fused (and reranked) results as (memory id, rank, score), and per result
    the signals behind it (the contributions `fuse_detailed` reports for those pairs)."""
    idx, rank, score, contribution = fuse_arrays(cands, config.fusion)
    qid_of, mid_of = cands.qids.to_list(), cands.memory_ids.to_list()
    per_query: dict[str, list[tuple[str, int, float]]] = {q: [] for q in queries}
    for pair, r, s in zip(idx.tolist(), rank.tolist(), score.tolist()):
        per_query[qid_of[cands.pair_q[pair]]].append((mid_of[cands.pair_m[pair]], int(r), float(s)))
    if config.rerank.server:
        run = pl.DataFrame([(q, m, r, s) for q, hits in per_query.items() for m, r, s in hits],
                           schema=RESULT_SCHEMA, orient="row")
        per_query = {q: [] for q in queries}
        for qid, mid, r, s in reranked(run, config.rerank, queries, lambda ids: memory_texts(nsview, ids)).iter_rows():
            per_query[qid].append((mid, int(r), float(s)))
    at, found = cands.pair_index([(q, m) for q, hits in per_query.items() for m, _, _ in hits])
    rows = cands.rows
    sel = np.flatnonzero(np.isin(rows.pair, at[found]) & live_rows(cands, config.fusion))
    details: dict[tuple[str, str], dict[str, SignalDetail]] = {}
    for pair, signal, r, s, c in zip(rows.pair[sel].tolist(), rows.signal[sel].tolist(), rows.rank[sel].tolist(),
                                     rows.score[sel].tolist(), contribution[sel].tolist()):
        key = (qid_of[cands.pair_q[pair]], mid_of[cands.pair_m[pair]])
        details.setdefault(key, {})[cands.signals[signal]] = SignalDetail(int(r), float(s), float(c))
    return per_query, details


def _counterfactuals(cands, config: SearchConfig, requests: Sequence[SearchRequest], qids: list[str],
                     per_query: dict[str, list[tuple[str, int, float]]],
                     details: dict[tuple[str, str], dict[str, SignalDetail]]) -> dict[tuple[str, str], dict[str, int | None]]:
    """For the results of each query that asks to explain: its rank with each of the signals
    behind its results switched off (None: it drops out)."""
    explained = [qid for qid, r in zip(qids, requests) if r.explain]
    if not explained:
        return {}
    signals_of = {qid: sorted({s for mid, _, _ in per_query[qid] for s in details.get((qid, mid), {})})
                  for qid in explained}
    out: dict[tuple[str, str], dict[str, int | None]] = {}
    for signal in sorted({s for names in signals_of.values() for s in names}):
        weights = dict(config.fusion.weights)
        weights[signal] = 0.0
        alt, _ = fuse_detailed(cands, replace(config.fusion, weights=weights), top_k=None)
        alt_rank = {(q, m): r for q, m, r in alt.select("qid", "memory_id", "rank").iter_rows()}
        for qid in explained:
            if signal not in signals_of[qid]:
                continue
            for mid, _, _ in per_query[qid]:
                out.setdefault((qid, mid), {})[signal] = alt_rank.get((qid, mid))
    return out
