"""Many fusion configurations per vectorised pass over one prepared candidate table.

A sweep scores thousands of query-time configurations (k, weights, intent gating, coverage bonus,
neighbour and recency boosts, superseded handling) on the same cached candidates. Metrics at
cutoffs up to K only need the rank of each gold memory, and that rank only needs the pairs that can
ever be ahead of it. Two exact reductions make a configuration cost a fraction of a millisecond:

* **Dominance pruning.** Pair p' is always ranked ahead of pair p (for every non-negative weighting
  and k, for every fuser whose per-row base value is monotone in the row and not negative) when p'
  is at least as good as p on every signal and on every lever feature in play
  (`rules.ordering_dims`), its memory id sorts first (so a tie on score also goes its way), and,
  under a neighbour boost, each neighbouring turn of p has a neighbouring turn of p' at least as
  good (so p' is lent at least what p is). A pair with K or more such pairs ahead of it can never
  reach the top K, so it is dropped before any configuration is scored.
* **Gold ranks by counting.** A gold pair's rank is one plus the number of live pairs of its query
  that score higher, or equal with a smaller memory id: the same order `fuse` sorts by.

Scores are the sums `fuse` computes (``w * base`` per row, summed in signal order), then the very
rules `fuse` applies after the fuser (`lab.search.fusion.rules`, compiled), so ranks are
bit-identical to it; a hypothesis test holds `BatchScorer` equal to `fuse` + `retrieval_metrics`.
Configurations outside that domain (`EXACT_PATH_LEVERS`: a rerank depth, an episode decay, a
learned model) are scored one by one through `fuse` by `BatchScorer.evaluate`, so callers never
need to know which path ran.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import polars as pl

from lab.config import FusionConfig
from lab.errors import ValidationError
from lab.search.fusion import PreparedCandidates, RankedLists, fuse_arrays, get_fuser, rules

BATCH_METRICS: tuple[str, ...] = ("recall", "ndcg", "hit", "mrr")
LENDS_ONLY = -2  # as a turn's previous turn in `_Comparisons.near`: scored for what it lends, never ranked


def metric_names(ks: Sequence[int]) -> list[str]:
    """Column names `BatchScorer` reports for cutoffs ``ks`` (mrr is cut at the largest)."""
    return [f"{m}@{k}" for m in ("recall", "ndcg", "hit") for k in ks] + [f"mrr@{max(ks)}"]


# The settings that keep a configuration on the exact path (scored through `fuse`), as a sweep file
# names them: each makes a pair's score depend on other pairs' in a way the compiled scorer does not
# replay: an episode decay (a pair's factor is its place among its episode's live candidates), a
# rerank (the top of the whole ranking re-ordered) and a learned model (features such as a pair's
# base rank span its whole query).
EXACT_PATH_LEVERS = ("rerank_depth", "episode_decay", "learned")


def exact_path_reasons(config: FusionConfig) -> list[str]:
    """The settings of ``config`` that keep it out of the vectorised domain (scored through `fuse`
    instead), named as a sweep file names them; empty when it is batchable."""
    reasons = []
    if config.rerank_depth:
        reasons.append(f"fusion.rerank_depth {config.rerank_depth}")
    if config.episode_decay:
        reasons.append(f"fusion.episode_decay {config.episode_decay:g}")
    if config.learned is not None:
        reasons.append("fusion.learned (a learned model)")
    return reasons


def batchable(config: FusionConfig) -> bool:
    """Whether ``config`` is inside the vectorised domain (else it is scored through `fuse`)."""
    return not exact_path_reasons(config)


@dataclass
class _Comparisons:
    """Per gold pair: the pairs always ahead of it, and those to compare under each configuration."""
    need: np.ndarray  # pairs to score (golds and compared pairs), prepared pair indices
    gold_local: np.ndarray  # each gold's position in ``need``
    gold_rel: np.ndarray
    gold_q: np.ndarray  # each gold's prepared query code
    always: np.ndarray  # pairs always ahead of each gold
    comp_start: np.ndarray  # offsets into comp_local, one more than golds
    comp_local: np.ndarray  # compared pairs, as positions in ``need``
    need_q_start: np.ndarray  # offsets of each prepared query's pairs in ``need``
    gold_q_start: np.ndarray  # offsets of each prepared query's golds
    mem: np.ndarray  # memory code of each pair in ``need`` (ties go to the smaller)
    features: np.ndarray  # (rules.FEATURES, need): what the levers read of each pair in ``need``
    # need positions of each one's previous and next turn (-1: none; LENDS_ONLY as the previous: a
    # turn only lent from, never ranked); empty without a neighbour boost
    near: tuple[np.ndarray, np.ndarray]

    def golds(self) -> tuple[np.ndarray, ...]:
        """The gold side as `gold_ranks` takes it."""
        return (self.gold_local, self.always, self.comp_start, self.comp_local, self.need_q_start, self.gold_q_start)


class BatchScorer:
    """Scores fusion configurations on one prepared candidate table against gold, many at a time.

    ``questions``: every question id of the evaluation (the means run over all of them; a question
    without candidates or gold scores 0, as in `lab.eval.runner.evaluate`).
    """

    def __init__(self, prepared: PreparedCandidates, qrels: pl.DataFrame, questions: Sequence[str],
                 ks: Sequence[int] = (5, 10)) -> None:
        if not ks or any(int(k) < 1 for k in ks):
            raise ValidationError(f"cutoffs must be integers >= 1, got {list(ks)}")
        self.prep = prepared
        self.ks = tuple(sorted({int(k) for k in ks}))
        self.depth = max(self.ks)
        self.metrics = metric_names(self.ks)
        self.questions = sorted(set(questions))
        q_index = {q: i for i, q in enumerate(self.questions)}
        rel = qrels.filter(pl.col("relevance") >= 1).select(pl.col("qid").cast(pl.String),
                                                             pl.col("memory_id").cast(pl.String), "relevance")
        rel = rel.filter(pl.col("qid").is_in(self.questions))
        n_q = len(self.questions)
        self.n_rel = np.zeros(n_q)
        self.idcg = np.zeros((len(self.ks), n_q))
        for qid, gains in rel.group_by("qid").agg(pl.col("relevance").sort(descending=True)).iter_rows():
            i = q_index[qid]
            g = np.asarray(gains, dtype=np.float64)
            self.n_rel[i] = len(g)
            for j, k in enumerate(self.ks):
                top = g[:k]
                self.idcg[j, i] = float(np.sum(top / np.log2(np.arange(2, len(top) + 2))))
        # prepared query code -> evaluation question index (-1: a query not evaluated)
        self.q_eval = np.asarray([q_index.get(q, -1) for q in prepared.qids.to_list()], dtype=np.int64)
        # gold relevance of each prepared pair (0: not gold)
        self.pair_rel = np.zeros(prepared.n_pairs)
        if rel.height:
            at, ok = prepared.pair_index(rel.select("qid", "memory_id").iter_rows())
            self.pair_rel[at[ok]] = rel["relevance"].cast(pl.Float64).to_numpy()[ok]
        # a pair no list ranked (a turn next to a candidate) is dead unless a neighbour boost lifts it
        self._listed = np.bincount(prepared.rows.pair, minlength=prepared.n_pairs) > 0
        self._pruned: dict[tuple, _Comparisons] = {}
        self._rows: tuple[np.ndarray, ...] | None = None
        self._base_cache: dict[tuple[str, float], np.ndarray] = {}
        self._intent_scales = rules.intent_scales(prepared.signals)

    # ------------------------------------------------------------------ public
    def evaluate(self, configs: Sequence[FusionConfig]) -> dict[str, np.ndarray]:
        """Per-question metrics for every configuration: {metric: (configs, questions) array}."""
        out = {m: np.zeros((len(configs), len(self.questions))) for m in self.metrics}
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(configs):
            get_fuser(c.method)  # unknown methods fail here, naming the known ones
            key = ("batch", c.method, *self._ordering_key(c)) if batchable(c) else ("single",)
            groups.setdefault(key, []).append(i)
        for key, idx in groups.items():
            if key[0] == "single":
                for i in idx:
                    got = self._evaluate_single(configs[i])
                    for m in self.metrics:
                        out[m][i] = got[m]
                continue
            pruned = self._comparisons(configs[idx[0]].method, key[2:])
            step = 4096  # configurations per compiled pass: bounds the (configs x gold) rank table
            for start in range(0, len(idx), step):
                part = idx[start:start + step]
                got = self._evaluate_batch([configs[i] for i in part], pruned)
                for m in self.metrics:
                    out[m][part] = got[m]
        return out

    def reference(self, config: FusionConfig) -> dict[str, np.ndarray]:
        """One configuration through `fuse` and plain counting: the yardstick the batch path is held to."""
        return self._evaluate_single(config)

    # ------------------------------------------------------------------ pruning
    def _ordering_key(self, config: FusionConfig) -> tuple:
        """How ``config``'s levers can reorder pairs: configurations with equal keys share their
        comparisons. A neighbour boost lends a pair its neighbours' scores: those configurations
        are pruned with the neighbours compared too."""
        return (bool(config.neighbour_boost), *rules.ordering_key([config], self.prep.features))

    def _comparisons(self, method: str, key: tuple) -> _Comparisons:
        fuser = get_fuser(method)
        cache_key = (method if not fuser.uses_k else "rank-based", *key)
        if cache_key not in self._pruned:
            self._pruned[cache_key] = self._prune(method, key[1:], neighbours=key[0])
        return self._pruned[cache_key]

    def _prune(self, method: str, key: tuple, neighbours: bool = False) -> _Comparisons:
        from lab.tune.kernels import dominance  # heavy: numba

        fuser = get_fuser(method)
        prep, rows = self.prep, self.prep.rows
        n_sig = max(len(prep.signals), 1)
        row_of = np.full((prep.n_pairs, n_sig), -1, dtype=np.int64)
        row_of[rows.pair, rows.signal] = np.arange(len(rows.pair))
        # per pair and dimension, "goodness": higher is never worse under any configuration here;
        # an absent signal is worse than any rank (it adds nothing and does not make the pair live)
        if fuser.uses_k:
            good_rows = -rows.rank  # 1 / (k + rank) falls with rank for every k >= 0
        else:
            good_rows = fuser.base(rows, FusionConfig(method=method))
        if len(good_rows) == 0:  # pairs with features only: every dimension is -inf below
            good_rows = np.zeros(1)
        dims_list = [np.where(row_of[:, s] >= 0, good_rows[np.maximum(row_of[:, s], 0)], -np.inf)
                     for s in range(n_sig)] + rules.ordering_dims(key, prep.features)
        good = np.ascontiguousarray(np.stack(dims_list, axis=1), dtype=np.float64)
        # a pair no list ranked is live only when a neighbour lends it a score
        gold = np.flatnonzero((self.pair_rel > 0) & (self._listed | neighbours))
        q_start = np.searchsorted(prep.pair_q, np.arange(len(prep.qids) + 1)).astype(np.int64)
        none = np.zeros(0, dtype=np.int64)
        prev, nxt = prep.adjacent() if neighbours else (none, none)
        always, comp_start, comp = dominance(q_start, prep.pair_q.astype(np.int64), good,
                                             prep.pair_m.astype(np.int64), gold.astype(np.int64), self.depth,
                                             np.ascontiguousarray(prev, dtype=np.int64),
                                             np.ascontiguousarray(nxt, dtype=np.int64))
        # golds with depth or more pairs always ahead can never count: drop them and their lists
        live = always < self.depth
        keep_comp = np.repeat(live, np.diff(comp_start))
        comp = comp[keep_comp]
        comp_start = np.r_[0, np.cumsum(np.diff(comp_start)[live])].astype(np.int64)
        gold, always = gold[live], always[live]
        if not neighbours:
            need, inverse = np.unique(np.r_[gold, comp], return_inverse=True)
            return self._laid_out(need, gold, inverse[:len(gold)], always, comp_start, inverse[len(gold):],
                                  (none, none))
        # the turns next to every scored pair are scored too (their first stage is what they lend);
        # a turn no list ranked lends nothing (its first stage is 0 and not live), exactly what a
        # missing neighbour lends, so it is left out
        scored = np.r_[gold, comp]
        around = np.r_[prev[scored], nxt[scored]]
        around = around[around >= 0]
        need = np.unique(np.r_[scored, around[self._listed[around]]])
        local = np.full(prep.n_pairs, -1, dtype=np.int64)
        local[need] = np.arange(len(need))
        near = (np.where(prev[need] >= 0, local[np.maximum(prev[need], 0)], -1),
                np.where(nxt[need] >= 0, local[np.maximum(nxt[need], 0)], -1))
        # a turn scored only for what it lends is never ranked: -2 spares it the second stage
        lends_only = np.ones(len(need), dtype=bool)
        lends_only[local[scored]] = False
        near[0][lends_only] = LENDS_ONLY
        return self._laid_out(need, gold, local[gold], always, comp_start, local[comp], near)

    def _laid_out(self, need, gold, gold_local, always, comp_start, comp_local, near) -> _Comparisons:
        prep, i64 = self.prep, np.int64
        n_q = len(prep.qids)
        return _Comparisons(
            need.astype(i64), gold_local.astype(i64), self.pair_rel[gold], prep.pair_q[gold], always.astype(i64),
            comp_start.astype(i64), comp_local.astype(i64),
            np.searchsorted(prep.pair_q[need], np.arange(n_q + 1)).astype(i64),
            np.searchsorted(prep.pair_q[gold], np.arange(n_q + 1)).astype(i64), prep.pair_m[need].astype(i64),
            np.ascontiguousarray(rules.feature_table(prep.feature)[:, need]),
            (np.ascontiguousarray(near[0], dtype=i64), np.ascontiguousarray(near[1], dtype=i64)))

    # ------------------------------------------------------------------ scoring
    def _row_arrays(self) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
        """((row offsets per pair, row signal, row rank), intent row per pair) as the kernel takes them."""
        if self._rows is None:
            prep, rows = self.prep, self.prep.rows
            self._rows = ((np.searchsorted(rows.pair, np.arange(prep.n_pairs + 1)).astype(np.int64),
                           rows.signal.astype(np.int64), rows.rank.astype(np.int64)),
                          rules.intent_rows(prep.intent[prep.pair_q]))
        return self._rows

    def _base(self, config: FusionConfig) -> np.ndarray:
        fuser = get_fuser(config.method)
        key = (config.method, config.k if fuser.uses_k else 0.0)
        if key not in self._base_cache:
            self._base_cache[key] = np.asarray(fuser.base(self.prep.rows, config), dtype=np.float64)
        return self._base_cache[key]

    def _evaluate_batch(self, configs: Sequence[FusionConfig], cmp: _Comparisons) -> dict[str, np.ndarray]:
        from lab.tune.kernels import gold_ranks  # heavy: numba

        prep = self.prep
        fuser = get_fuser(configs[0].method)
        rows = prep.rows
        if fuser.rank_only:  # base values from the rank alone: one small table per k
            ks = sorted({c.k for c in configs})
            n_rank = int(rows.rank.max()) + 1 if len(rows.rank) else 1
            table_rows = RankedLists(pair=np.zeros(n_rank, np.int64), signal=np.zeros(n_rank, np.int64),
                                     rank=np.arange(n_rank, dtype=np.float64).clip(1), score=np.zeros(n_rank),
                                     list_id=np.zeros(n_rank, np.int64), n_lists=1)
            rank_tab = np.stack([np.asarray(fuser.base(table_rows, replace(configs[0], k=k)), dtype=np.float64)
                                 for k in ks])
            k_id = np.asarray([ks.index(c.k) for c in configs], dtype=np.int64)
            row_val = np.zeros(1)
        else:
            rank_tab = np.zeros((1, 1))
            k_id = np.zeros(len(configs), dtype=np.int64)
            row_val = self._base(configs[0])
        (row_start, row_signal, row_rank), pair_intent = self._row_arrays()
        weights = np.asarray([[float(c.weights.get(s, 1.0)) for s in prep.signals] or [1.0] for c in configs])
        flags = (bool(fuser.rank_only), bool(fuser.multiply_by_hits),
                 bool(fuser.multiply_by_hits or not fuser.rank_only))
        lists = (row_start, row_signal, row_rank, np.asarray(row_val, dtype=np.float64))
        ranks = gold_ranks(cmp.need, lists, pair_intent, self._intent_scales, weights, k_id, rank_tab,
                           rules.lever_table(configs), cmp.features, cmp.near, cmp.mem, cmp.golds(), flags)
        return self._metrics_from_ranks(ranks, self.q_eval[cmp.gold_q], cmp.gold_rel)

    def _metrics_from_ranks(self, rank: np.ndarray, g_eval: np.ndarray, rel: np.ndarray) -> dict[str, np.ndarray]:
        """Per-question metrics from each gold pair's rank ((configs, gold); huge = not retrieved)."""
        n_c, n_q = rank.shape[0], len(self.questions)
        order = np.argsort(g_eval, kind="stable")
        order = order[g_eval[order] >= 0]
        rank, g_eval, rel = rank[:, order], g_eval[order], rel[order]
        out = {m: np.zeros((n_c, n_q)) for m in self.metrics}
        if len(g_eval) == 0:
            return out
        starts = np.flatnonzero(np.r_[True, g_eval[1:] != g_eval[:-1]])
        qs = g_eval[starts]
        gain = rel[None, :] / np.log2(np.minimum(rank, 1 << 62).astype(np.float64) + 1.0)
        for j, k in enumerate(self.ks):
            inside = rank <= k
            n_hit = np.add.reduceat(inside.astype(np.float64), starts, axis=1)
            out[f"recall@{k}"][:, qs] = n_hit / self.n_rel[qs]
            dcg = np.add.reduceat(np.where(inside, gain, 0.0), starts, axis=1)
            out[f"ndcg@{k}"][:, qs] = dcg / self.idcg[j, qs]
            out[f"hit@{k}"][:, qs] = (n_hit > 0).astype(np.float64)
        first = np.minimum.reduceat(rank, starts, axis=1)
        out[f"mrr@{self.depth}"][:, qs] = np.where(first <= self.depth, 1.0 / np.maximum(first, 1), 0.0)
        return out

    def _evaluate_single(self, config: FusionConfig) -> dict[str, np.ndarray]:
        idx, rank, _, _ = fuse_arrays(self.prep, replace(config, top_k=self.depth), self.depth)
        return self.score_fused(idx, rank)

    def score_fused(self, idx: np.ndarray, rank: np.ndarray) -> dict[str, np.ndarray]:
        """Per-question metrics (``self.questions`` order) of a fused run given as prepared pair
        indices and their ranks (`fuse_arrays`' first two outputs, cut at ``depth`` or deeper)."""
        prep = self.prep
        gold = self.pair_rel[idx] > 0
        g_idx = idx[gold]
        ranks = rank[gold].astype(np.int64)[None, :]
        return {m: v[0] for m, v in self._metrics_from_ranks(ranks, self.q_eval[prep.pair_q[g_idx]],
                                                             self.pair_rel[g_idx]).items()}
