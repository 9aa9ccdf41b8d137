"""Search for one query: candidates, fusion, and results with per-signal explanations."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np
import polars as pl

from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.search.analysis import QueryAnalysis
from lab.search.candidates import NamespaceSnapshot, Query, candidates, query_analysis, reference_time
from lab.search.fusion import fuse_detailed, prepare


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
        return out


@dataclass
class SearchResponse:
    query: str
    namespace: str
    config: str
    analysis: QueryAnalysis
    results: list[Result] = field(default_factory=list)


def search(
    snapshot: NamespaceSnapshot,
    query: str,
    query_vector: np.ndarray,
    config: SearchConfig,
    *,
    k: int | None = None,
    explain: bool = False,
) -> SearchResponse:
    """Search one namespace's snapshot: candidates, fusion, and results with per-signal details.

    Pure with respect to the store: it reads the snapshot and writes nothing (recording accesses
    is the write side's business).
    """
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query must be a non-empty string")
    if k is not None:
        if k < 1:
            raise ValidationError(f"k must be >= 1, got {k}")
        config = replace(config, fusion=replace(config.fusion, top_k=k))
    nsview = snapshot.view
    namespace = nsview.namespace
    analysis = query_analysis(query, config, reference_time(config, nsview))
    cands = prepare(candidates({namespace: snapshot}, [Query("q", query, namespace)], np.asarray([query_vector]),
                               config, analyses=[analysis]))
    ranked, contrib = fuse_detailed(cands, config.fusion)
    ids = ranked["memory_id"].to_list()
    rows = dict(zip(ids, nsview.rows_at([nsview.pos[m] for m in ids])))
    episodes = nsview.episodes
    details: dict[str, dict[str, SignalDetail]] = {}
    for mid, signal, rank, score, c in contrib.filter(pl.col("memory_id").is_in(ids)).select(
        "memory_id", "signal", "rank", "score", "contribution"
    ).iter_rows():
        details.setdefault(mid, {})[signal] = SignalDetail(int(rank), float(score), float(c))
    counterfactual: dict[str, dict[str, int | None]] = {}
    if explain:
        for signal in sorted({s for d in details.values() for s in d}):
            weights = dict(config.fusion.weights)
            weights[signal] = 0.0
            alt, _ = fuse_detailed(cands, replace(config.fusion, weights=weights), top_k=None)
            alt_rank = dict(zip(alt["memory_id"].to_list(), alt["rank"].to_list()))
            for mid in ids:
                counterfactual.setdefault(mid, {})[signal] = alt_rank.get(mid)
    in_results = {nsview.pos[m] for m in ids if m in nsview.pos}
    results = []
    for mid, rank, score in ranked.select("memory_id", "rank", "score").iter_rows():
        row = rows[mid]
        p = nsview.pos.get(mid)
        conflicts = tuple(sorted(nsview.ids[o] for o in nsview.contradicts.get(p, ()) if o in in_results))
        results.append(Result(
            memory_id=mid, rank=int(rank), score=float(score), content=row["content"], title=row["title"],
            type=row["type"], created_at=row["created_at"], signals=details.get(mid, {}),
            superseded=bool(nsview.superseded[p]) if p is not None else False, contradicts=conflicts,
            counterfactual=counterfactual.get(mid) if explain else None,
            pinned=bool(row["pinned"]), episode=episodes[p] if p is not None else None,
        ))
    return SearchResponse(query, namespace, config.name, analysis, results)
