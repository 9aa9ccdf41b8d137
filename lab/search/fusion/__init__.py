"""Fusion: a registry of fusers with one interface, and the vectorised `fuse` over candidates.

The candidate table is encoded once into integer arrays (`prepare`): one slot per
(query, memory) pair and a dense (pair x signal) layout. Fusing under a configuration is then a
handful of numpy gathers and one sort, which is what makes sweeping k and weights over a cached
candidate table cheap. `fuse` accepts either the polars table or its `PreparedCandidates`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import polars as pl

from lab.config import FusionConfig
from lab.errors import ValidationError
from lab.search.analysis import INTENT_WEIGHT_SCALES, INTENTS

FEATURE_DEFAULTS = {"_coverage": 0.0, "_cosine": 0.0, "_superseded": 0.0, "_age_hours": 1e18}


@dataclass
class RankedLists:
    """The ranked-list rows of a prepared candidate table (one row per query, memory and signal)."""

    pair: np.ndarray  # int64: index of the (query, memory) pair
    signal: np.ndarray  # int64: index into PreparedCandidates.signals
    rank: np.ndarray  # float64, 1-based
    score: np.ndarray  # float64, the signal's raw score
    list_id: np.ndarray  # int64: index of the (query, signal) list the row belongs to
    n_lists: int
    _cache: dict[str, np.ndarray] = field(default_factory=dict)

    def _per_list(self, name: str, fn) -> np.ndarray:
        if name not in self._cache:
            self._cache[name] = fn()
        return self._cache[name]

    def minmax(self) -> np.ndarray:
        """Per (query, signal) list: 0 at its minimum score, 1 at its maximum; a flat list counts as 1."""
        def compute() -> np.ndarray:
            lo = np.full(self.n_lists, np.inf)
            hi = np.full(self.n_lists, -np.inf)
            np.minimum.at(lo, self.list_id, self.score)
            np.maximum.at(hi, self.list_id, self.score)
            lo_r, hi_r = lo[self.list_id], hi[self.list_id]
            span = hi_r - lo_r
            out = np.ones(len(self.score))
            ok = span > 0
            out[ok] = (self.score[ok] - lo_r[ok]) / span[ok]
            return out
        return self._per_list("minmax", compute)

    def dbsf(self) -> np.ndarray:
        """Per list: clip((s - (mean - 3 sd)) / (6 sd), 0, 1); a flat list counts as 1."""
        def compute() -> np.ndarray:
            n = np.bincount(self.list_id, minlength=self.n_lists).astype(np.float64)
            mean = np.bincount(self.list_id, self.score, minlength=self.n_lists) / np.maximum(n, 1)
            dev = self.score - mean[self.list_id]
            var = np.bincount(self.list_id, dev * dev, minlength=self.n_lists) / np.maximum(n, 1)
            sd = np.sqrt(var)[self.list_id]
            out = np.ones(len(self.score))
            ok = sd > 0
            out[ok] = np.clip((dev[ok] + 3 * sd[ok]) / (6 * sd[ok]), 0.0, 1.0)
            return out
        return self._per_list("dbsf", compute)


# A fuser maps the ranked-list rows and their weights to each row's contribution; contributions
# are summed per (query, memory).
FuserFn = Callable[[RankedLists, np.ndarray, FusionConfig], np.ndarray]


@dataclass(frozen=True)
class Fuser:
    name: str
    fn: FuserFn
    multiply_by_hits: bool = False  # CombMNZ: times the number of lists that hold the memory
    description: str = ""


FUSERS: dict[str, Fuser] = {}


def register(fuser: Fuser) -> Fuser:
    FUSERS[fuser.name] = fuser
    return fuser


def get_fuser(name: str) -> Fuser:
    if name not in FUSERS:
        raise ValidationError(f"unknown fusion method {name!r}; known: {sorted(FUSERS)}")
    return FUSERS[name]


from lab.search.fusion import combmnz, dbsf, minmax, rrf  # noqa: E402,F401  (they register)

RESULT_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "rank": pl.Int32, "score": pl.Float64}
CONTRIB_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32,
                  "score": pl.Float64, "contribution": pl.Float64}


@dataclass
class PreparedCandidates:
    """A candidate table encoded for repeated fusion. Codes follow sorted string order, so ties
    broken on codes are ties broken on memory ids."""

    qids: pl.Series  # sorted unique query ids
    memory_ids: pl.Series  # sorted unique memory ids
    signals: tuple[str, ...]  # sorted signal names
    pair_q: np.ndarray  # per pair: query code
    pair_m: np.ndarray  # per pair: memory code
    pair_col: np.ndarray  # per pair: its position among its query's pairs
    rows: RankedLists
    features: dict[str, np.ndarray]  # per pair, defaults filled in
    intent: np.ndarray  # per query: index into INTENTS, -1 when unknown
    encodings: dict[str, tuple[pl.Series, np.ndarray]] = field(default_factory=dict, repr=False)

    @property
    def n_pairs(self) -> int:
        return len(self.pair_q)


def _codes(column: pl.Series) -> tuple[pl.Series, np.ndarray]:
    """Sorted distinct values and each row's code (its value's position among them)."""
    if column.null_count() == 0 and column.is_sorted():
        # candidate tables are written query by query: codes are run numbers, no hashing
        change = (column != column.shift(1)).fill_null(True).to_numpy()
        codes = np.cumsum(change, dtype=np.int64) - 1
        return column.filter(pl.Series(change)), codes
    uniques = column.unique().sort()
    return uniques, column.cast(pl.Enum(uniques.to_list())).to_physical().to_numpy().astype(np.int64)


def _dense_unique(keys: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for keys in [0, size): a presence table instead of a
    sort when the key space is small enough (it is for query x memory pairs of an evaluation)."""
    if size > 64_000_000:
        uniq, inverse = np.unique(keys, return_inverse=True)
        return uniq, inverse.astype(np.int64)
    present = np.zeros(size, dtype=bool)
    present[keys] = True
    uniq = np.flatnonzero(present)
    index = np.empty(size, dtype=np.int64)
    index[uniq] = np.arange(len(uniq))
    return uniq, index[keys]


def prepare(candidates: pl.DataFrame, encodings: dict[str, tuple[pl.Series, np.ndarray]] | None = None) -> PreparedCandidates:
    """Encode a candidate table ``(qid, memory_id, signal, rank, score)`` (with feature rows).

    ``encodings`` are the string encodings of an earlier ``prepare`` of the same table (its
    ``encodings`` attribute), e.g. kept on disk beside a cached table: encoding a million strings
    is most of the cost, and the rest is integer work."""
    missing = {"qid", "memory_id", "signal", "rank", "score"} - set(candidates.columns)
    if missing:
        raise ValidationError(f"candidate table lacks column(s) {sorted(missing)}")
    signal = candidates["signal"]
    is_feature = signal.str.starts_with("_")  # computed once: these masks span every row
    is_intent = signal == "_intent"
    ranked = candidates.filter(~is_feature)
    features = candidates.filter(is_feature & ~is_intent)
    intents = candidates.filter(is_intent)
    given = encodings or {}
    used: dict[str, tuple[pl.Series, np.ndarray]] = {}

    def encode(name: str, column) -> tuple[pl.Series, np.ndarray]:
        n = sum(len(c) for c in column) if isinstance(column, list) else len(column)
        got = given.get(name)
        if got is None or len(got[1]) != n:
            got = _codes(pl.concat(column) if isinstance(column, list) else column)
        used[name] = got
        return got

    qids, q_code = encode("qid", [ranked["qid"], features["qid"], intents["qid"]])
    n_rank, n_feat = ranked.height, features.height
    rq, fq, iq = q_code[:n_rank], q_code[n_rank:n_rank + n_feat], q_code[n_rank + n_feat:]
    memory_ids, m_code = encode("memory_id", [ranked["memory_id"], features["memory_id"]])
    rm, fm = m_code[:n_rank], m_code[n_rank:]
    signals, s_code = encode("signal", ranked["signal"])
    n_sig = max(len(signals), 1)
    pair_key, row_pair = _dense_unique(rq * len(memory_ids) + rm, len(qids) * len(memory_ids))
    rank = ranked["rank"].to_numpy().astype(np.float64)
    score = ranked["score"].to_numpy().astype(np.float64)
    slot = row_pair * n_sig + s_code
    if len(slot) and np.bincount(slot, minlength=len(pair_key) * n_sig).max() > 1:
        # the same memory twice in one list (e.g. two chunks): keep its best rank, deterministically
        order = np.lexsort((score * -1, rank, slot))
        first = np.ones(len(order), dtype=bool)
        first[1:] = slot[order][1:] != slot[order][:-1]
        keep = np.sort(order[first])
        row_pair, s_code, rank, score, rq = row_pair[keep], s_code[keep], rank[keep], score[keep], rq[keep]
    # rows ordered by (pair, signal): per-pair sums then add in one fixed order, whatever the input order
    order = np.argsort(row_pair * n_sig + s_code, kind="stable")
    row_pair, s_code, rank, score, rq = row_pair[order], s_code[order], rank[order], score[order], rq[order]
    pair_q = pair_key // max(len(memory_ids), 1)
    pair_m = pair_key % max(len(memory_ids), 1)
    # pairs are sorted by query: a pair's column in a (query x pair) grid, for per-query top-k cuts
    q_start = np.searchsorted(pair_q, np.arange(len(qids)))
    pair_col = np.arange(len(pair_q)) - q_start[pair_q] if len(pair_q) else np.zeros(0, dtype=np.int64)
    rows = RankedLists(pair=row_pair, signal=s_code, rank=rank, score=score,
                       list_id=rq * n_sig + s_code, n_lists=len(qids) * n_sig)
    feats: dict[str, np.ndarray] = {}
    if n_feat:
        f_key = fq * len(memory_ids) + fm
        f_pair = np.searchsorted(pair_key, f_key)
        f_pair_c = np.minimum(f_pair, max(len(pair_key) - 1, 0))
        hit = (f_pair < len(pair_key)) & (pair_key[f_pair_c] == f_key) if len(pair_key) else np.zeros(n_feat, bool)
        f_names = features["signal"]
        f_values = features["score"].to_numpy().astype(np.float64)
        for name, default in FEATURE_DEFAULTS.items():
            sel = hit & (f_names == name).to_numpy()
            if sel.any():
                arr = np.full(len(pair_key), default)
                arr[f_pair_c[sel]] = f_values[sel]
                feats[name] = arr
    intent = np.full(len(qids), -1, dtype=np.int64)
    if intents.height:
        intent[iq] = intents["score"].to_numpy().astype(np.int64)
    return PreparedCandidates(qids, memory_ids, tuple(signals.to_list()), pair_q, pair_m, pair_col, rows, feats, intent,
                              used)


def _row_weights(prep: PreparedCandidates, config: FusionConfig) -> np.ndarray:
    per_signal = np.array([float(config.weights.get(s, 1.0)) for s in prep.signals] or [1.0])
    w = per_signal[prep.rows.signal]
    if config.intent_gating:
        # one row of scales per intent, and a last row of ones for queries without an intent
        scales = np.ones((len(INTENTS) + 1, len(per_signal)))
        for i, name in enumerate(INTENTS):
            for j, s in enumerate(prep.signals):
                scales[i, j] = INTENT_WEIGHT_SCALES[name].get(s, 1.0)
        q_intent = prep.intent[prep.pair_q[prep.rows.pair]]
        w = w * scales[q_intent, prep.rows.signal]  # -1 picks the row of ones
    return w


def _fused_scores(prep: PreparedCandidates, config: FusionConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(per-pair fused score, per-pair alive mask, per-row contribution)."""
    fuser = get_fuser(config.method)
    w = _row_weights(prep, config)
    contribution = np.asarray(fuser.fn(prep.rows, w, config), dtype=np.float64)
    contribution = np.where(w != 0, contribution, 0.0)
    # rows are ordered by (pair, signal), so the sums are bit-identical whatever the input order
    score = np.bincount(prep.rows.pair, contribution, minlength=prep.n_pairs)
    hits = np.bincount(prep.rows.pair, weights=(w != 0), minlength=prep.n_pairs)
    if fuser.multiply_by_hits:
        score = score * hits
    return score, hits > 0, contribution


def _feature(prep: PreparedCandidates, name: str) -> np.ndarray:
    got = prep.features.get(name)
    return got if got is not None else np.full(prep.n_pairs, FEATURE_DEFAULTS[name])


def _order(pair_q: np.ndarray, score: np.ndarray, pair_m: np.ndarray) -> np.ndarray:
    """Indices sorted by query, then score descending, then memory id."""
    return np.lexsort((pair_m, -score, pair_q))


def _ranks(sorted_q: np.ndarray) -> np.ndarray:
    """1-based position inside each query's run of a query-sorted array."""
    n = len(sorted_q)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_q[1:] != sorted_q[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start + 1


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


def fuse_arrays(prep: PreparedCandidates, config: FusionConfig, top_k: int | None = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(pair indices, ranks, scores, per-row contributions), results sorted by query then rank."""
    score, alive, contribution = _fused_scores(prep, config)
    if config.coverage_bonus:
        # multiplicative, so the bonus can never outweigh the fused score it scales
        score = score * (1.0 + config.coverage_bonus * _feature(prep, "_coverage"))
    if config.recent_boost != 1.0:
        score = np.where(_feature(prep, "_age_hours") < config.recent_hours, score * config.recent_boost, score)
    if config.superseded == "demote":
        score = np.where(_feature(prep, "_superseded") > 0, score * config.demote_factor, score)
    elif config.superseded == "hide":
        alive = alive & (_feature(prep, "_superseded") == 0)
    k = config.top_k if top_k == -1 else top_k
    idx = np.flatnonzero(alive)
    if k is not None and len(idx):
        idx = idx[score[idx] >= _cut(prep, score, alive, max(k, config.rerank_depth))[prep.pair_q[idx]]]
    q, m, s = prep.pair_q[idx], prep.pair_m[idx], score[idx]
    order = _order(q, s, m)
    idx, q, m, s = idx[order], q[order], m[order], s[order]
    if config.rerank_depth > 0 and len(idx):
        # the top `depth` of each query are re-ordered by query-memory cosine, above all the rest
        r = _ranks(q)
        starts = np.flatnonzero(r == 1)
        q_max = np.abs(s[starts])[np.searchsorted(q[starts], q)]
        s = np.where(r <= config.rerank_depth, q_max + 1.0 + _feature(prep, "_cosine")[idx], s)
        order = _order(q, s, m)
        idx, q, s = idx[order], q[order], s[order]
    rank = _ranks(q)
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
    w_live = _row_weights(prep, config) != 0
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


def fuse(candidates: pl.DataFrame | PreparedCandidates, config: FusionConfig) -> pl.DataFrame:
    """Pure and vectorised: candidates -> ranked results ``(qid, memory_id, rank, score)``, top_k per query.

    Ties break on (-score, memory_id).
    """
    prep = _as_prepared(candidates)
    idx, rank, score, _ = fuse_arrays(prep, config)
    return _result_frame(prep, idx, rank, score)
