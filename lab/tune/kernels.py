"""Compiled inner loops of the batch scorer (numba): dominance between pairs, and gold ranks per configuration.

Scores are the sums `lab.search.fusion.fused` computes (each row's ``w * base`` added in (pair,
signal) order from 0.0), then the very rules `fuse` applies after the fuser, compiled here from
their one source (`lab.search.fusion.rules`: the intent-gated weight and the post-processing
levers); numba compiles without fast-math, so every score, and so every rank, equals `fuse`'s bit
for bit.

numba's on-disk cache checks only the file of the function it caches, not what that function
calls: `gold_ranks` is therefore made in a closure over the rules' source digest, which numba hashes
into its cache key, so an edited rule recompiles it; the helpers it calls are not cached at all.
"""
from __future__ import annotations

import hashlib
import inspect

import numpy as np
from numba import njit, prange
from numba.extending import overload

from lab.search.fusion import rules

NOT_FOUND = np.iinfo(np.int64).max
_BLOCK = 32  # configurations scored together: the innermost loops, over them, vectorise


@njit(cache=True)
def _at_least(good: np.ndarray, a: int, b: int) -> bool:
    """Pair a is at least as good as pair b on every dimension."""
    for d in range(good.shape[1]):
        if good[a, d] < good[b, d]:
            return False
    return True


@njit(cache=True)
def _lends_at_least(good: np.ndarray, a: int, b: int, prev: np.ndarray, nxt: np.ndarray) -> bool:
    """Under a neighbour boost, pair a is lent at least what pair b is, whatever the configuration:
    each of b's neighbouring turns has a neighbouring turn of a at least as good on every dimension
    (what a turn lends is its score before the boost, monotone in those dimensions, or 0 when it is
    not live, and a turn at least as good is live when the other is). Without ``prev``/``nxt``
    (empty: no neighbour boost) nothing is lent, and this holds."""
    if len(prev) == 0:
        return True
    for side in range(2):
        n = prev[b] if side == 0 else nxt[b]
        if n < 0:
            continue
        if not ((prev[a] >= 0 and _at_least(good, prev[a], n)) or (nxt[a] >= 0 and _at_least(good, nxt[a], n))):
            return False
    return True


@njit(cache=True)
def _always_ahead(good: np.ndarray, mem: np.ndarray, a: int, b: int, prev: np.ndarray, nxt: np.ndarray) -> bool:
    """Pair a is ranked ahead of pair b under every configuration pruned together: at least as good
    on every dimension, lent at least as much by its neighbours, and its memory id first (ties)."""
    return mem[a] < mem[b] and _at_least(good, a, b) and _lends_at_least(good, a, b, prev, nxt)


@njit(cache=True)
def _ahead_count(good: np.ndarray, mem: np.ndarray, lo: int, hi: int, p: int, cap: int,
                 prev: np.ndarray, nxt: np.ndarray) -> int:
    """How many pairs of [lo, hi) are always ahead of p, up to ``cap``."""
    n = 0
    for o in range(lo, hi):
        if _always_ahead(good, mem, o, p, prev, nxt):
            n += 1
            if n >= cap:
                break
    return n


@njit(cache=True, parallel=True)
def dominance(q_start: np.ndarray, pair_q: np.ndarray, good: np.ndarray, mem: np.ndarray, gold: np.ndarray,
              depth: int, prev: np.ndarray, nxt: np.ndarray):
    """For every gold pair: the pairs always ahead of it (count), and the pairs whose order against it
    depends on the configuration (a list), leaving out pairs that can never reach the top ``depth``.
    ``prev``/``nxt``: each pair's neighbouring turns (pair indices, -1: none) when the configurations
    have a neighbour boost, else empty.

    Returns (always_ahead per gold, comparison offsets per gold, compared pair indices).

    The golds are shared among the threads: each writes only its own gold's counts and slice of
    the output. The memo of pairs always ahead is shared too; two threads may both fill an entry,
    with the same value."""
    n_pairs = len(pair_q)
    capped = np.full(n_pairs, -1, dtype=np.int64)  # memo: pairs always ahead, counted up to depth
    always = np.zeros(len(gold), dtype=np.int64)
    counts = np.zeros(len(gold) + 1, dtype=np.int64)
    out = np.empty(0, dtype=np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for i in range(len(gold)):
                counts[i + 1] += counts[i]
            out = np.empty(counts[len(gold)], dtype=np.int64)
        for i in prange(len(gold)):
            g = gold[i]
            q = pair_q[g]
            lo, hi = q_start[q], q_start[q + 1]
            at = counts[i]
            for p in range(lo, hi):
                if p == g:
                    continue
                if _always_ahead(good, mem, p, g, prev, nxt):
                    if pass_ == 0:
                        always[i] += 1
                    continue
                if _always_ahead(good, mem, g, p, prev, nxt):
                    continue  # always behind the gold
                if capped[p] < 0:
                    capped[p] = _ahead_count(good, mem, lo, hi, p, depth, prev, nxt)
                if capped[p] >= depth:
                    continue  # can only be ahead of a gold that is out of the top depth anyway
                if pass_ == 0:
                    counts[i + 1] += 1
                else:
                    out[at] = p
                    at += 1
    return always, counts, out


@overload(rules.select)
def _scalar_select(cond, a, b):
    """`rules.select` on one pair: a choice, not an array."""
    return lambda cond, a, b: a if cond else b


def _inlined(rule):
    """A rule compiled into its caller's loop, as if written there."""
    return njit(inline="always")(rule)


settings_of, features_of, gated_weight = (_inlined(rules.settings_of), _inlined(rules.features_of),
                                          _inlined(rules.gated_weight))
before_neighbours, masked = _inlined(rules.before_neighbours), _inlined(rules.masked)
neighbour_lift, after_neighbours = _inlined(rules.neighbour_lift), _inlined(rules.after_neighbours)


def source_digest(*modules) -> int:
    """A number that changes with the source of ``modules`` (a closure constant of the cached kernels)."""
    text = "".join(inspect.getsource(m) for m in modules)
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


@njit
def _block_weights(weights, scales, levers, rank_tab, k_id, by_rank, c0, nb):
    """For configurations [c0, c0 + nb): per (intent row, signal, configuration) the weight `fuse`
    uses (`rules.gated_weight`) and 1.0 where it is not 0; when ``by_rank``, each (weight, rank)
    product once, as `fuse` computes it: w * (1 / (k + rank)). Flat, configurations innermost."""
    n_int, n_sig, n_rank = scales.shape[0], weights.shape[1], rank_tab.shape[1]
    wt = np.empty(n_int * n_sig * nb)
    live = np.empty(n_int * n_sig * nb)
    for ii in range(n_int):
        for s in range(n_sig):
            for j in range(nb):
                w = gated_weight(weights[c0 + j, s], scales[ii, s], levers[c0 + j, rules.GATED] != 0)
                wt[(ii * n_sig + s) * nb + j] = w
                live[(ii * n_sig + s) * nb + j] = 1.0 if w != 0 else 0.0
    tab = np.empty(n_int * n_sig * n_rank * nb if by_rank else 1)
    if by_rank:
        for ii in range(n_int):
            for s in range(n_sig):
                for rk in range(n_rank):
                    at = ((ii * n_sig + s) * n_rank + rk) * nb
                    for j in range(nb):
                        tab[at + j] = wt[(ii * n_sig + s) * nb + j] * rank_tab[k_id[c0 + j], rk]
    return wt, live, tab


@njit
def _score_query(lo, hi, need, rows, pair_intent, weighting, feats, levers, near, c0, nb, flags, buf):
    """Scores of need positions [lo, hi) (one query) under configurations [c0, c0 + nb), -inf where
    dead, pair-major (``(u - lo) * nb + j``), in the buffer returned: each row's ``w * base`` added in
    (pair, signal) order from 0.0 (as `fuse` sums), then the levers of `lab.search.fusion.rules`.
    With neighbour boosts (``near`` not empty) every pair's first stage is kept before any pair
    reads its neighbours'."""
    row_start, row_signal, row_rank, row_val = rows
    wt, live, tab, n_sig, n_rank = weighting
    by_rank, by_hits, count_hits = flags
    score, hits, values, alive_at, lifted = buf
    two_stage = len(near[0]) > 0
    for u in range(lo, hi):
        p = need[u]
        ii = pair_intent[p]
        so = (u - lo) * nb
        for j in range(nb):
            score[so + j] = 0.0
        if count_hits:
            for j in range(nb):
                hits[so + j] = 0.0
        for r in range(row_start[p], row_start[p + 1]):
            wo = (ii * n_sig + row_signal[r]) * nb
            # a zero weight adds +0.0, which changes no sum: `fuse` adds the same zero
            if by_rank:
                to = ((ii * n_sig + row_signal[r]) * n_rank + row_rank[r]) * nb
                for j in range(nb):
                    score[so + j] += tab[to + j]
            else:
                v = row_val[r]
                for j in range(nb):
                    score[so + j] += wt[wo + j] * v
            if count_hits:
                for j in range(nb):
                    hits[so + j] += live[wo + j]
        f = features_of(feats, u)
        for j in range(nb):
            lv = settings_of(levers, c0 + j)
            acc = score[so + j]
            # without hit counts, every base is > 0: a pair is live exactly when its sum is
            alive = hits[so + j] > 0 if count_hits else acc > 0
            if by_hits:
                acc = acc * hits[so + j]
            acc = before_neighbours(acc, f, lv)
            if two_stage:
                score[so + j], alive_at[so + j], values[so + j] = acc, alive, masked(acc, alive)
            else:
                acc, alive = after_neighbours(acc, alive, f, lv)
                score[so + j] = acc if alive else -np.inf
    if not two_stage:
        return score
    prev, nxt = near
    for u in range(lo, hi):
        if prev[u] < -1:  # a turn only lent from (batch.LENDS_ONLY): never ranked, its lift unread
            continue
        so = (u - lo) * nb
        po = (prev[u] - lo) * nb if prev[u] >= 0 else -1
        no = (nxt[u] - lo) * nb if nxt[u] >= 0 else -1
        f = features_of(feats, u)
        for j in range(nb):
            lv = settings_of(levers, c0 + j)
            acc, alive = neighbour_lift(score[so + j], alive_at[so + j], values[po + j] if po >= 0 else 0.0,
                                        values[no + j] if no >= 0 else 0.0, f, lv)
            acc, alive = after_neighbours(acc, alive, f, lv)
            lifted[so + j] = acc if alive else -np.inf
    return lifted


@njit
def _rank_golds(score, q, lo, c0, nb, golds, mem, count, sg, ranks):
    """Ranks of query ``q``'s golds under configurations [c0, c0 + nb): one plus the pairs always
    ahead, plus the compared pairs scoring higher, or equal with a smaller memory id."""
    gold_local, always, comp_start, comp_local, _, gold_q_start = golds
    for i in range(gold_q_start[q], gold_q_start[q + 1]):
        g = gold_local[i]
        go = (g - lo) * nb
        for j in range(nb):
            count[j] = always[i]
            sg[j] = score[go + j]
        for t in range(comp_start[i], comp_start[i + 1]):
            v = comp_local[t]
            vo = (v - lo) * nb
            if mem[v] < mem[g]:  # wins ties
                for j in range(nb):
                    count[j] += score[vo + j] >= sg[j]
            else:
                for j in range(nb):
                    count[j] += score[vo + j] > sg[j]
        for j in range(nb):
            ranks[c0 + j, i] = NOT_FOUND if sg[j] == -np.inf else count[j] + 1


def _gold_ranks(digest: int):
    """`gold_ranks`, a closure over ``digest`` (`source_digest` of the rules)."""

    @njit(parallel=True, cache=True)
    def gold_ranks(need, rows, pair_intent, scales, weights, k_id, rank_tab, levers, feats, near, mem, golds, flags):
        """(configs, gold) ranks; NOT_FOUND where the gold is not retrieved.

        ``rows``: per prepared pair the offsets of its ranked-list rows, and per row its signal, rank and
        base value; ``pair_intent``: each pair's row of ``scales`` (`rules.intent_scales`). ``flags``:
        (by rank, multiply by hits, count hits). A row's base value is ``rank_tab[k_id, rank]`` when by
        rank (RRF: it depends on the rank and k only), else its own; not counting hits promises that
        every base value is > 0 (RRF), so a pair's sum alone says whether it is live.
        ``need``: the pairs to score (the golds and everything compared with them), grouped by query;
        per need position: ``feats`` (`rules.FEATURES`), ``mem`` and ``near`` (the need positions of its
        previous and next turn, -1: none; two empty arrays when no configuration has a neighbour boost).
        ``levers``: `rules.lever_table`, a row per configuration. ``golds``: each gold's need position,
        the pairs always ahead of it, offsets into the compared need positions and those positions, and
        offsets per query of its need positions and of its golds. Configurations are taken in blocks (the
        innermost loops run over a block, so they vectorise); the threads share the blocks."""
        _ = digest  # in the closure: numba's cache key
        need_q_start, gold_q_start = golds[4], golds[5]
        n_c, n_sig = weights.shape
        ranks = np.empty((n_c, len(golds[0])), dtype=np.int64)
        # one query at a time: its pairs' scores fit in cache, and golds only meet their own query's pairs
        width = 1
        for q in range(len(need_q_start) - 1):
            width = max(width, need_q_start[q + 1] - need_q_start[q])
        for blk in prange((n_c + _BLOCK - 1) // _BLOCK):
            c0 = blk * _BLOCK
            nb = min(_BLOCK, n_c - c0)
            wt, live, tab = _block_weights(weights, scales, levers, rank_tab, k_id, flags[0], c0, nb)
            weighting = (wt, live, tab, n_sig, rank_tab.shape[1])
            # flat buffers and explicit offsets: array views inside the hot loops cost a reference count
            # each; (scores, hit counts, what pairs lend neighbours, liveness, scores after the boost)
            size = width * nb
            buf = (np.empty(size), np.empty(size), np.empty(size), np.empty(size, dtype=np.bool_), np.empty(size))
            count = np.empty(nb, dtype=np.int64)
            sg = np.empty(nb)
            for q in range(len(need_q_start) - 1):
                if gold_q_start[q] == gold_q_start[q + 1]:
                    continue
                lo, hi = need_q_start[q], need_q_start[q + 1]
                score = _score_query(lo, hi, need, rows, pair_intent, weighting, feats, levers, near, c0, nb, flags,
                                     buf)
                _rank_golds(score, q, lo, c0, nb, golds, mem, count, sg, ranks)
        return ranks

    return gold_ranks


gold_ranks = _gold_ranks(source_digest(rules))
