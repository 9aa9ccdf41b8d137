"""Encoding a candidate table once into integer arrays (`prepare` -> `PreparedCandidates`) for repeated fusion."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from lab.errors import ValidationError
from lab.search.fusion.registry import RankedLists

# a pair without a feature row gets these; a huge age means "not recent" for the recency boost
FEATURE_DEFAULTS = {"_coverage": 0.0, "_cosine": 0.0, "_superseded": 0.0, "_age_hours": 1e18,
                    # a memory's episode (a number naming it within its namespace) and its turn in it
                    "_episode": -1.0, "_turn": -1.0,
                    # the namespace's adjacency lift (lab.search.adjacency); a table made without
                    # it reads as adjacent enough: the neighbour boost applies as it always did
                    "_adjacency": 1.0}


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

    _adjacent: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def n_pairs(self) -> int:
        return len(self.pair_q)

    def pair_index(self, keys) -> tuple[np.ndarray, np.ndarray]:
        """(pair index, found) for each (qid, memory_id) in ``keys``; a key that is not a pair
        has found False (and an index that means nothing)."""
        q_code = {q: i for i, q in enumerate(self.qids.to_list())}
        m_code = {m: i for i, m in enumerate(self.memory_ids.to_list())}
        n_m = max(len(m_code), 1)
        want = np.array([q_code[q] * n_m + m_code[m] if q in q_code and m in m_code else -1 for q, m in keys],
                        dtype=np.int64)
        if self.n_pairs == 0:
            return np.zeros(len(want), dtype=np.int64), np.zeros(len(want), dtype=bool)
        pair_key = self.pair_q * n_m + self.pair_m  # sorted: pairs are ordered by query, then memory
        at = np.clip(np.searchsorted(pair_key, want), 0, self.n_pairs - 1)
        return at, (want >= 0) & (pair_key[at] == want)

    def neighbour_values(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per pair, ``values`` at the previous and at the next turn of its episode among its
        query's pairs (0 where there is no such turn)."""
        prev, nxt = self.adjacent()
        return (np.where(prev >= 0, values[np.maximum(prev, 0)], 0.0),
                np.where(nxt >= 0, values[np.maximum(nxt, 0)], 0.0))

    def neighbour_max(self, values: np.ndarray) -> np.ndarray:
        """Per pair, the larger of ``values`` at the previous and the next turn of its episode
        among its query's pairs (0 where there is neither)."""
        return np.maximum(*self.neighbour_values(values))

    def feature(self, name: str) -> np.ndarray:
        """Per pair, the feature ``name`` (its default where the table has no such rows)."""
        got = self.features.get(name)
        return got if got is not None else np.full(self.n_pairs, FEATURE_DEFAULTS[name])

    def adjacent(self) -> tuple[np.ndarray, np.ndarray]:
        """Per pair, the pair of the same query holding the previous and the next turn of its
        episode (-1 where there is none among the candidates)."""
        if self._adjacent is None:
            prev = np.full(self.n_pairs, -1, dtype=np.int64)
            nxt = np.full(self.n_pairs, -1, dtype=np.int64)
            ep, turn = self.features.get("_episode"), self.features.get("_turn")
            if ep is not None and turn is not None:
                has = np.flatnonzero(ep >= 0)
                order = has[np.lexsort((turn[has], ep[has], self.pair_q[has]))]
                a, b = order[:-1], order[1:]
                linked = (self.pair_q[a] == self.pair_q[b]) & (ep[a] == ep[b]) & (turn[b] == turn[a] + 1)
                nxt[a[linked]] = b[linked]
                prev[b[linked]] = a[linked]
            self._adjacent = (prev, nxt)
        return self._adjacent


def rank_order(pair_q: np.ndarray, score: np.ndarray, pair_m: np.ndarray) -> np.ndarray:
    """Indices sorted by query, then score descending, then memory id."""
    return np.lexsort((pair_m, -score, pair_q))


def run_positions(sorted_keys: np.ndarray) -> np.ndarray:
    """1-based position inside each run of equal keys of a key-sorted array (a rank per query)."""
    n = len(sorted_keys)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start + 1


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


@dataclass
class CandidateCodes:
    """A candidate table as integer codes, before its pairs are made: what `prepare` makes of a
    table's strings, and what a search over one namespace makes without strings
    (`lab.search.candidates.candidate_codes`). Codes follow sorted order of the names they stand for."""

    qids: pl.Series  # sorted distinct query ids
    memory_ids: pl.Series  # sorted distinct memory ids
    signals: tuple[str, ...]  # sorted ranked-list names
    rq: np.ndarray  # per ranked-list row: query code
    rm: np.ndarray  # memory code
    rs: np.ndarray  # signal code
    rank: np.ndarray  # float64
    score: np.ndarray  # float64
    # per feature name: (query codes, memory codes, values), in row order (a later row wins)
    features: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    iq: np.ndarray  # per intent row: query code
    intents: np.ndarray  # its index into INTENTS


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

    def encode(name: str, column: pl.Series | list[pl.Series]) -> tuple[pl.Series, np.ndarray]:
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
    feats: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    if n_feat:
        f_names = features["signal"]
        f_values = features["score"].to_numpy().astype(np.float64)
        for name in FEATURE_DEFAULTS:
            sel = (f_names == name).to_numpy()
            if sel.any():
                feats[name] = (fq[sel], fm[sel], f_values[sel])
    codes = CandidateCodes(qids, memory_ids, tuple(signals.to_list()), rq, rm, s_code,
                           ranked["rank"].to_numpy().astype(np.float64), ranked["score"].to_numpy().astype(np.float64),
                           feats, iq, intents["score"].to_numpy().astype(np.int64))
    return prepare_codes(codes, used)


def prepare_codes(codes: CandidateCodes, encodings: dict[str, tuple[pl.Series, np.ndarray]] | None = None) -> PreparedCandidates:
    """The integer work of `prepare`: pairs, ranked-list rows in (pair, signal) order, features."""
    qids, memory_ids, signals = codes.qids, codes.memory_ids, codes.signals
    rq, rm, s_code, rank, score = codes.rq, codes.rm, codes.rs, codes.rank, codes.score
    n_rank = len(rq)
    n_m = len(memory_ids)
    n_sig = max(len(signals), 1)
    # pairs: every (query, memory) with a ranked row or a feature row (a turn next to a candidate
    # has features and no list; only a neighbour boost can make it live)
    fkeys = [fq * n_m + fm for fq, fm, _ in codes.features.values()]
    pair_key, inverse = _dense_unique(np.concatenate([rq * n_m + rm, *fkeys]).astype(np.int64),
                                      len(qids) * n_m)
    row_pair = inverse[:n_rank]
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
    pair_q = pair_key // max(n_m, 1)
    pair_m = pair_key % max(n_m, 1)
    # pairs are sorted by query: a pair's column in a (query x pair) grid, for per-query top-k cuts
    q_start = np.searchsorted(pair_q, np.arange(len(qids)))
    pair_col = np.arange(len(pair_q)) - q_start[pair_q] if len(pair_q) else np.zeros(0, dtype=np.int64)
    rows = RankedLists(pair=row_pair, signal=s_code, rank=rank, score=score,
                       list_id=rq * n_sig + s_code, n_lists=len(qids) * n_sig)
    feats: dict[str, np.ndarray] = {}
    at = n_rank
    for (name, (fq, _, values)), fkey in zip(codes.features.items(), fkeys):
        arr = np.full(len(pair_key), FEATURE_DEFAULTS[name])
        arr[inverse[at:at + len(fkey)]] = values
        feats[name] = arr
        at += len(fkey)
    intent = np.full(len(qids), -1, dtype=np.int64)
    if len(codes.iq):
        intent[codes.iq] = codes.intents
    return PreparedCandidates(qids, memory_ids, signals, pair_q, pair_m, pair_col, rows, feats, intent,
                              encodings or {})
