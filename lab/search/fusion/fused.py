"""Fusing a prepared candidate table under a `FusionConfig`: fused scores, post-processing and per-query ranking."""
from __future__ import annotations

import numpy as np
import polars as pl

from lab.config import FusionConfig
from lab.search.fusion import learned, rules
from lab.search.fusion.prepare import PreparedCandidates, prepare, rank_order, run_positions
from lab.search.fusion.registry import get_fuser

RESULT_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "rank": pl.Int32, "score": pl.Float64}
CONTRIB_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32,
                  "score": pl.Float64, "contribution": pl.Float64}


def _row_weights(prep: PreparedCandidates, config: FusionConfig) -> np.ndarray:
    rows = prep.rows
    per_signal = np.array([float(config.weights.get(s, 1.0)) for s in prep.signals] or [1.0])
    # each row's intent scale, gathered only when gating reads it
    scale = (rules.intent_scales(prep.signals)[rules.intent_rows(prep.intent[prep.pair_q[rows.pair]]), rows.signal]
             if config.intent_gating else 1.0)
    return rules.gated_weight(per_signal[rows.signal], scale, config.intent_gating)


def live_rows(prep: PreparedCandidates, config: FusionConfig) -> np.ndarray:
    """Per ranked-list row: whether its list's weight (after intent gating) is not 0."""
    return _row_weights(prep, config) != 0


def _fused_scores(prep: PreparedCandidates, config: FusionConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-pair fused score, per-pair alive mask, per-row contribution)."""
    fuser = get_fuser(config.method)
    w = _row_weights(prep, config)
    base = fuser.base(prep.rows, config)
    contribution = np.where(w != 0, w * base, 0.0)
    # rows are ordered by (pair, signal), so the sums are bit-identical whatever the input order
    score = np.bincount(prep.rows.pair, contribution, minlength=prep.n_pairs)
    hits = np.bincount(prep.rows.pair, weights=(w != 0), minlength=prep.n_pairs)
    if fuser.multiply_by_hits:
        score = score * hits
    return score, hits > 0, contribution


def _cut(prep: PreparedCandidates, score: np.ndarray, alive: np.ndarray, k: int) -> np.ndarray:
    """Per query, the k-th best alive score (-inf when it has fewer): only pairs at or above it can
    make the top k, so only they need the full sort."""
    n_q = len(prep.qids)
    width = int(prep.pair_col.max()) + 1
    if k >= width:
        return np.full(n_q, -np.inf)
    grid = np.full((n_q, width), -np.inf)
    grid[prep.pair_q[alive], prep.pair_col[alive]] = score[alive]
    return -np.partition(-grid, k - 1, axis=1)[:, k - 1]


def base_scores(prep: PreparedCandidates, config: FusionConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-pair score, per-pair alive mask, per-row contribution) of the base fusion: the fuser,
    then the levers of `rules` (coverage, neighbour and recency boosts, the superseded rule) over
    every pair at once, and the episode decay (no learned model)."""
    score, alive, contribution = _fused_scores(prep, config)
    lv = rules.settings(config)
    f = rules.feature_columns(prep.feature)
    score = rules.before_neighbours(score, f, lv)
    if config.neighbour_boost:
        # from the scores before the boost, so the order of pairs cannot matter
        score, alive = rules.neighbour_lift(score, alive, *prep.neighbour_values(rules.masked(score, alive)), f, lv)
    score, alive = rules.after_neighbours(score, alive, f, lv)
    if config.episode_decay:
        score = score * episode_decay_factors(prep, score, alive, config.episode_decay)
    return score, alive, contribution


def episode_decay_factors(prep: PreparedCandidates, score: np.ndarray, alive: np.ndarray, decay: float) -> np.ndarray:
    """Per pair, ``(1 - decay) ** (n - 1)`` where it is its query's n-th best alive candidate of its
    episode (1 outside episodes and for dead pairs). Decaying by the rank within the episode is
    exactly greedy diversification: an episode's candidates keep their order, so the n-th one
    taken from it is its n-th best, whatever the other episodes hold."""
    factor = np.ones(prep.n_pairs)
    ep = prep.feature("_episode")
    at = np.flatnonzero(alive & (ep >= 0))
    if not len(at):
        return factor
    # by query, episode, score descending, then memory id (codes follow id order): stable ties
    order = at[np.lexsort((prep.pair_m[at], -score[at], ep[at], prep.pair_q[at]))]
    episode = ep[order].astype(np.int64)
    query_episode = prep.pair_q[order].astype(np.int64) * (int(episode.max()) + 1) + episode
    factor[order] = (1.0 - decay) ** (run_positions(query_episode) - 1)
    return factor


def fuse_arrays(prep: PreparedCandidates, config: FusionConfig, top_k: int | None = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pair indices, ranks, scores, per-row contributions), results sorted by query then rank."""
    score, alive, contribution = base_scores(prep, config)
    if config.learned is not None:
        score = learned.probabilities(prep, config, score, alive, live_rows(prep, config))
        if config.episode_decay:  # the model's probability ranks: diversify it, as the base score was
            score = score * episode_decay_factors(prep, score, alive, config.episode_decay)
    k = config.top_k if top_k == -1 else top_k
    idx = np.flatnonzero(alive)
    if k is not None and len(idx):
        idx = idx[score[idx] >= _cut(prep, score, alive, max(k, config.rerank_depth))[prep.pair_q[idx]]]
    q, m, s = prep.pair_q[idx], prep.pair_m[idx], score[idx]
    order = rank_order(q, s, m)
    idx, q, m, s = idx[order], q[order], m[order], s[order]
    if config.rerank_depth > 0 and len(idx):
        # the top `depth` of each query are re-ordered by query-memory cosine, above all the rest
        r = run_positions(q)
        starts = np.flatnonzero(r == 1)
        q_max = np.abs(s[starts])[np.searchsorted(q[starts], q)]
        s = np.where(r <= config.rerank_depth, q_max + 1.0 + prep.feature("_cosine")[idx], s)
        order = rank_order(q, s, m)
        idx, q, s = idx[order], q[order], s[order]
    rank = run_positions(q)
    if k is not None:
        keep = rank <= k
        idx, rank, s = idx[keep], rank[keep], s[keep]
    return idx, rank, s, contribution


def _as_prepared(candidates: pl.DataFrame | PreparedCandidates) -> PreparedCandidates:
    return candidates if isinstance(candidates, PreparedCandidates) else prepare(candidates)


def _result_frame(prep: PreparedCandidates, idx: np.ndarray, rank: np.ndarray, score: np.ndarray) -> pl.DataFrame:
    return pl.DataFrame({
        "qid": prep.qids.gather(prep.pair_q[idx]),
        "memory_id": prep.memory_ids.gather(prep.pair_m[idx]),
        "rank": pl.Series(rank, dtype=pl.Int32),
        "score": pl.Series(score, dtype=pl.Float64),
    }, schema=RESULT_SCHEMA)


def fuse_detailed(
    candidates: pl.DataFrame | PreparedCandidates, config: FusionConfig, *, top_k: int | None = -1
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ranked results, per-signal contributions). ``top_k=-1`` uses config.top_k, None keeps all.

    Contributions are those of the fuser, before post-processing; zero-weight signals are left out.
    """
    prep = _as_prepared(candidates)
    idx, rank, score, contribution = fuse_arrays(prep, config, top_k)
    rows = prep.rows
    w_live = live_rows(prep, config)
    sel = np.flatnonzero(w_live)
    contrib = pl.DataFrame({
        "qid": prep.qids.gather(prep.pair_q[rows.pair[sel]]),
        "memory_id": prep.memory_ids.gather(prep.pair_m[rows.pair[sel]]),
        "signal": pl.Series(prep.signals, dtype=pl.String).gather(rows.signal[sel]) if len(sel) else pl.Series([], dtype=pl.String),
        "rank": pl.Series(rows.rank[sel], dtype=pl.Int32),
        "score": pl.Series(rows.score[sel], dtype=pl.Float64),
        "contribution": pl.Series(contribution[sel], dtype=pl.Float64),
    }, schema=CONTRIB_SCHEMA).sort("qid", "memory_id", "signal")
    return _result_frame(prep, idx, rank, score), contrib


def explain_learned(candidates: pl.DataFrame | PreparedCandidates, config: FusionConfig,
                    keys: list[tuple[str, str]]) -> list[dict[str, float]]:
    """For each (qid, memory_id) in ``keys``: each feature's share of the learned model's logit
    (``config.learned`` must be set; a key not among the candidates gets an empty dict)."""
    prep = _as_prepared(candidates)
    at, found = prep.pair_index(keys)
    score, alive, _ = base_scores(prep, config)
    shares = learned.explain(prep, config, at[found], score, alive, live_rows(prep, config))
    out: list[dict[str, float]] = [{} for _ in keys]
    for i, share in zip(np.flatnonzero(found).tolist(), shares):
        out[i] = share
    return out


def fuse(candidates: pl.DataFrame | PreparedCandidates, config: FusionConfig) -> pl.DataFrame:
    """Pure and vectorised: candidates -> ranked results ``(qid, memory_id, rank, score)``, top_k per query.

    Ties break on (-score, memory_id).
    """
    prep = _as_prepared(candidates)
    idx, rank, score, _ = fuse_arrays(prep, config)
    return _result_frame(prep, idx, rank, score)
