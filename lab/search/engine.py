"""Search for one query: candidates, fusion, and results with per-signal explanations."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

import polars as pl

from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.search.analysis import QueryAnalysis, analyze
from lab.search.candidates import Query, candidates, reference_time, view
from lab.search.fusion import fuse_detailed, prepare

if TYPE_CHECKING:
    from lab.pipeline import Pipeline


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


def episode_of(metadata: str | None) -> str | None:
    """The episode key in a memory's JSON metadata ("episode", else "session"), as a string."""
    if not metadata or ("episode" not in metadata and "session" not in metadata):
        return None
    try:
        meta = json.loads(metadata)
    except ValueError:
        return None
    value = meta.get("episode", meta.get("session")) if isinstance(meta, dict) else None
    return None if value is None else str(value)


def episode_key(column: str = "metadata") -> pl.Expr:
    """``episode_of`` as a polars expression over a JSON metadata column, for whole tables."""
    meta = pl.col(column).str
    return pl.coalesce(meta.json_path_match("$.episode"), meta.json_path_match("$.session"))


def search(
    pipe: "Pipeline",
    query: str,
    namespace: str,
    config: SearchConfig,
    *,
    k: int | None = None,
    explain: bool = False,
    record_access: bool = False,
) -> SearchResponse:
    """Search one namespace. Accesses are recorded only when asked (serving), never in evaluation."""
    if not isinstance(query, str) or not query.strip():
        raise ValidationError("query must be a non-empty string")
    if k is not None:
        if k < 1:
            raise ValidationError(f"k must be >= 1, got {k}")
        config = replace(config, fusion=replace(config.fusion, top_k=k))
    cands = prepare(candidates(pipe, [Query("q", query, namespace)], config))
    ranked, contrib = fuse_detailed(cands, config.fusion)
    nsview = view(pipe, namespace)
    analysis = analyze(query, reference_time(config, nsview))
    ids = ranked["memory_id"].to_list()
    rows = {r["id"]: r for r in pipe.store.get_many(ids).iter_rows(named=True)}
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
            pinned=bool(row["pinned"]), episode=episode_of(row["metadata"]),
        ))
    if record_access and ids:
        pipe.store.record_access(ids, context="search")
    return SearchResponse(query, namespace, config.name, analysis, results)
