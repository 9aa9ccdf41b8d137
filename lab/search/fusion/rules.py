"""The ranking rules fusion applies after the fuser, each written once: the intent-gated weight of a
ranked list, and the per-pair post-processing levers (coverage bonus, neighbour boost, recency
boost, superseded rule).

Each rule is plain Python over numbers *or* numpy arrays. `fuse` calls them with arrays (every pair
of one configuration at once: `fused.base_scores`); the sweep's batch scorer compiles the very same
functions with numba and calls them per (pair, configuration) for thousands of configurations
(`lab.tune.kernels.gold_ranks`), where `select` becomes a scalar choice. numba compiles without
fast-math, so a rule performs the same IEEE operations on both paths and the scores agree bit for
bit; a hypothesis test holds the two equal. `fuse` itself stays numpy: a one-shot search loads no
compiled code for it, and its operations are exactly those it always had.

A new per-pair lever is written here only: the settings it reads (`SETTINGS`, `settings_of`), the
features it reads (`FEATURES`, `features_of`), its step in `before_neighbours` or
`after_neighbours`, and how it can reorder pairs (`ordering_key`, `ordering_dims`: the batch
scorer prunes by them). Levers whose effect on a pair depends on other pairs' ranks (episode decay,
rerank, a learned model) stay in `fused` and keep a configuration on the exact path
(`lab.tune.batch.EXACT_PATH_LEVERS`).
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from lab.config import FusionConfig
from lab.search.analysis import INTENT_WEIGHT_SCALES, INTENTS

# the FusionConfig fields the rules read, in the order of `settings` (a lever table's columns)
SETTINGS = ("intent_gating", "coverage_bonus", "neighbour_boost", "recent_boost", "recent_hours", "superseded",
            "demote_factor", "neighbour_min_lift")
GATED, BONUS, NEIGHBOUR, BOOST, HOURS, MODE, FACTOR, MIN_LIFT = range(len(SETTINGS))
KEEP, DEMOTE, HIDE = 0, 1, 2
SUPERSEDED_MODES = {"keep": KEEP, "demote": DEMOTE, "hide": HIDE}
# a pair's features, as `features_of` lists them (a feature table has one row each)
FEATURES = ("_coverage", "_age_hours", "_superseded", "_adjacency")
COVERAGE, AGE, SUPERSEDED, ADJACENCY = range(4)


def settings(config: FusionConfig) -> tuple[float, ...]:
    """What the rules read of ``config`` (`SETTINGS`), each a number (superseded: its mode's code)."""
    return tuple(float(SUPERSEDED_MODES[config.superseded] if name == "superseded" else getattr(config, name))
                 for name in SETTINGS)


def lever_table(configs: Sequence[FusionConfig]) -> np.ndarray:
    """(configurations, SETTINGS): a row of `settings` per configuration."""
    return np.asarray([settings(c) for c in configs], dtype=np.float64).reshape(len(configs), len(SETTINGS))


def settings_of(levers, c):
    """Configuration ``c``'s row of a lever table, as the tuple `settings` gives (compiled code
    reads scalars in a tuple: an array handed to a compiled call costs a reference count; one
    element per entry of `SETTINGS`)."""
    return (levers[c, 0], levers[c, 1], levers[c, 2], levers[c, 3], levers[c, 4], levers[c, 5], levers[c, 6],
            levers[c, 7])


def feature_columns(feature) -> tuple[np.ndarray, ...]:
    """Every pair's features, a column each, from ``feature(name)`` (`PreparedCandidates.feature`)."""
    return tuple(np.asarray(feature(name), dtype=np.float64) for name in FEATURES)


def feature_table(feature) -> np.ndarray:
    """(FEATURES, pairs): `feature_columns` as one array, as compiled code reads it (`features_of`)."""
    return np.stack(feature_columns(feature))


def features_of(table, p):
    """Pair ``p``'s features from a (FEATURES, pairs) table, as the tuple `feature_columns` gives
    for every pair (one element per entry of `FEATURES`)."""
    return (table[0, p], table[1, p], table[2, p], table[3, p])


def select(cond, a, b):
    """``a`` where ``cond``, else ``b`` (np.where; compiled, a scalar choice: `lab.tune.kernels`)."""
    return np.where(cond, a, b)


def gated_weight(weight, scale, gated):
    """A ranked list's weight under intent gating: scaled by its query's intent when gating is on."""
    return weight * scale if gated else weight


def before_neighbours(score, f, lv):
    """The fused score with the levers a neighbour sees (``f``: the pair's features, ``lv``: the
    configuration's settings): the coverage bonus, multiplicative, so it never outweighs the fused
    score it scales."""
    if lv[BONUS] != 0:
        score = score * (1.0 + lv[BONUS] * f[COVERAGE])
    return score


def masked(score, alive):
    """What a pair lends its neighbours: its score where it is live, else 0."""
    return score * alive


def neighbour_lift(score, alive, prev_value, next_value, f, lv):
    """The neighbour boost: plus the boost times the larger of what the previous and the next turn
    of the pair's episode lend (their `masked` scores before this boost; 0 where there is none). A
    turn next to a live pair becomes live, though no list ranked it. Only in a namespace whose
    adjacent memories are alike enough (its adjacency lift at least the minimum; a minimum of -1
    or less: everywhere); elsewhere neighbours lend nothing."""
    if lv[NEIGHBOUR] == 0:
        return score, alive
    around = select((f[ADJACENCY] >= lv[MIN_LIFT]) | (lv[MIN_LIFT] <= -1.0), np.maximum(prev_value, next_value), 0.0)
    return score + lv[NEIGHBOUR] * around, alive | (around > 0)


def after_neighbours(score, alive, f, lv):
    """The score and liveness after the neighbour boost: the recency boost for pairs younger than
    the recent hours, then the superseded rule (demote by the factor, or hide)."""
    if lv[BOOST] != 1.0:
        score = select(f[AGE] < lv[HOURS], score * lv[BOOST], score)
    if lv[MODE] == DEMOTE:
        score = select(f[SUPERSEDED] > 0, score * lv[FACTOR], score)
    elif lv[MODE] == HIDE:
        alive = alive & (f[SUPERSEDED] == 0)
    return score, alive


def intent_scales(signals: Sequence[str]) -> np.ndarray:
    """(intents + 1, signals): how intent gating scales each signal's weight, one row per intent
    and a last row of ones for queries without an intent (`intent_rows` maps them there)."""
    scales = np.ones((len(INTENTS) + 1, max(len(signals), 1)))
    for i, name in enumerate(INTENTS):
        for j, s in enumerate(signals):
            scales[i, j] = INTENT_WEIGHT_SCALES[name].get(s, 1.0)
    return scales


def intent_rows(intent: np.ndarray) -> np.ndarray:
    """Each query's (or pair's) row of `intent_scales`: its intent, or the row of ones for -1."""
    return np.where(intent < 0, len(INTENTS), intent).astype(np.int64)


def ordering_key(configs: Sequence[FusionConfig], features: Mapping[str, np.ndarray]) -> tuple:
    """Which features can reorder pairs under these configurations, and how: (coverage, recency
    boost directions, superseded, a demote factor above 1). The batch scorer prunes by this key."""
    coverage = any(c.coverage_bonus for c in configs) and "_coverage" in features
    boosts = {c.recent_boost > 1 for c in configs if c.recent_boost != 1.0}
    superseded = any(c.superseded == "hide" or (c.superseded == "demote" and c.demote_factor != 1.0)
                     for c in configs) and "_superseded" in features
    demote_up = any(c.superseded == "demote" and c.demote_factor > 1.0 for c in configs)
    return (bool(coverage), tuple(sorted(boosts)), bool(superseded), demote_up)


def ordering_dims(key: tuple, features: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Per pair, one column per way the levers of ``key`` (`ordering_key`) can reorder pairs, each
    oriented so that higher is never worse under any of those configurations."""
    coverage, boosts, superseded, demote_up = key
    dims = []
    if coverage:
        dims.append(features["_coverage"])
    if boosts and "_age_hours" in features:
        age = features["_age_hours"]
        for up in boosts:  # a boost > 1 favours the young, one < 1 the old; both: ages must match
            dims.append(-age if up else age)
    if superseded:
        sup = features["_superseded"]
        dims.append(sup if demote_up else -sup)
        if demote_up:
            dims.append(-sup)
    return dims
