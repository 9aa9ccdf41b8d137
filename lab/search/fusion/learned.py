"""Learned fusion: a logistic model over each candidate's fusion features (``FusionConfig.learned``).

The base fusion (the fuser, boosts and the superseded rule) runs first; its score and rank become
features beside each ranked list's rank and presence and the candidate's own features (cosine,
query-term coverage, age, a neighbour's score). The model's probability that the candidate is
relevant is then its fused score. Training lives in ``lab.tune.learn``; this module only reads a
trained model, so search, evaluation, export and serving rank with the same code.

A list whose weight is 0 counts as absent for the model too (its ``rrf:``/``in:`` features are 0),
so switching a signal off, as an explanation's counterfactual does, switches it off everywhere.
"""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig, LearnedFusion
from lab.search.fusion.prepare import PreparedCandidates, rank_order, run_positions

RRF_K = 5.0  # a list's rank feature is 1 / (RRF_K + rank): 0 when the list does not hold the memory
MAX_AGE_HOURS = 1e6  # ages are clipped here before the log: a missing age is "very old", not infinite


def _per_query_max(prep: PreparedCandidates, values: np.ndarray) -> np.ndarray:
    """Per pair, the largest of ``values`` over its query's pairs (pairs are sorted by query)."""
    n = prep.n_pairs
    if n == 0:
        return np.zeros(0)
    starts = np.flatnonzero(np.r_[True, prep.pair_q[1:] != prep.pair_q[:-1]])
    return np.repeat(np.maximum.reduceat(values, starts), np.diff(np.r_[starts, n]))


def feature_matrix(prep: PreparedCandidates, names: tuple[str, ...] | list[str], score: np.ndarray,
                   alive: np.ndarray, row_live: np.ndarray) -> np.ndarray:
    """The (pair x feature) matrix of ``names`` for the base fusion's ``score`` and ``alive`` mask;
    ``row_live`` marks the ranked-list rows whose weight is not 0."""
    live_score = np.where(alive, score, 0.0)
    top = _per_query_max(prep, live_score)
    safe_top = np.where(top > 0, top, 1.0)

    def base_rank() -> np.ndarray:
        order = rank_order(prep.pair_q, np.where(alive, score, -np.inf), prep.pair_m)
        rank = np.empty(prep.n_pairs)
        rank[order] = run_positions(prep.pair_q[order])
        return rank

    def per_list(kind: str, target: str) -> np.ndarray:
        out = np.zeros(prep.n_pairs)
        if target not in prep.signals:
            return out
        rows = prep.rows
        sel = (rows.signal == prep.signals.index(target)) & row_live
        out[rows.pair[sel]] = 1.0 / (RRF_K + rows.rank[sel]) if kind == "rrf" else 1.0
        return out

    base = {
        "base_rel": lambda: live_score / safe_top,
        "base_log_rank": lambda: np.log1p(base_rank()),
        "neighbour": lambda: prep.neighbour_max(live_score) / safe_top,
        "cosine": lambda: prep.feature("_cosine").astype(np.float64),
        "coverage": lambda: prep.feature("_coverage").astype(np.float64),
        "superseded": lambda: (prep.feature("_superseded") > 0).astype(np.float64),
        "log_age": lambda: np.log1p(np.clip(prep.feature("_age_hours"), 0.0, MAX_AGE_HOURS)),
    }
    columns = [base[name]() if name in base else per_list(*name.split(":", 1)) for name in names]
    return np.column_stack(columns) if columns else np.zeros((prep.n_pairs, 0))


def terms(model: LearnedFusion, x: np.ndarray) -> np.ndarray:
    """Each feature's share of the logit, per row of ``x``: coef * (x - mean) / scale."""
    return (x - np.asarray(model.mean)) / np.asarray(model.scale) * np.asarray(model.coef)


def probabilities(prep: PreparedCandidates, config: FusionConfig, score: np.ndarray, alive: np.ndarray,
                  row_live: np.ndarray) -> np.ndarray:
    """Per pair, the model's probability of relevance (demoted like the base score when superseded)."""
    model = config.learned
    assert model is not None
    x = feature_matrix(prep, model.features, score, alive, row_live)
    logit = terms(model, x).sum(axis=1) + model.intercept
    p = 1.0 / (1.0 + np.exp(-np.clip(logit, -50.0, 50.0)))
    if config.superseded == "demote":
        p = np.where(prep.feature("_superseded") > 0, p * config.demote_factor, p)
    return p


def explain(prep: PreparedCandidates, config: FusionConfig, pairs: np.ndarray, score: np.ndarray,
            alive: np.ndarray, row_live: np.ndarray) -> list[dict[str, float]]:
    """For each pair in ``pairs``: every feature's value-weighted share of its logit, and the bias."""
    model = config.learned
    assert model is not None
    t = terms(model, feature_matrix(prep, model.features, score, alive, row_live)[pairs])
    return [{**dict(zip(model.features, (round(float(v), 6) for v in row))), "bias": round(model.intercept, 6)}
            for row in t]
