"""Compiled inner loops of the batch scorer (numba): dominance between pairs, and gold ranks per configuration.

Scores are computed with exactly the floating-point operations of `lab.search.fusion.fused` (each
row's ``w * base`` added in (pair, signal) order from 0.0, then the same post-processing products),
and numba compiles without fast-math, so every score, and so every rank, equals `fuse`'s bit for bit.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

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
def _ahead_count(good: np.ndarray, mem: np.ndarray, lo: int, hi: int, p: int, cap: int) -> int:
    """How many pairs of [lo, hi) are always ahead of p (at least as good, smaller id), up to ``cap``."""
    n = 0
    for o in range(lo, hi):
        if mem[o] < mem[p] and _at_least(good, o, p):
            n += 1
            if n >= cap:
                break
    return n


@njit(cache=True)
def dominance(q_start: np.ndarray, pair_q: np.ndarray, good: np.ndarray, mem: np.ndarray, gold: np.ndarray,
              depth: int):
    """For every gold pair: the pairs always ahead of it (count), and the pairs whose order against it
    depends on the configuration (a list), leaving out pairs that can never reach the top ``depth``.

    Returns (always_ahead per gold, comparison offsets per gold, compared pair indices)."""
    n_pairs = len(pair_q)
    capped = np.full(n_pairs, -1, dtype=np.int64)  # memo: pairs always ahead, counted up to depth
    always = np.zeros(len(gold), dtype=np.int64)
    counts = np.zeros(len(gold) + 1, dtype=np.int64)
    for pass_ in range(2):
        if pass_ == 1:
            for i in range(len(gold)):
                counts[i + 1] += counts[i]
            out = np.empty(counts[len(gold)], dtype=np.int64)
        for i in range(len(gold)):
            g = gold[i]
            q = pair_q[g]
            lo, hi = q_start[q], q_start[q + 1]
            at = counts[i]
            for p in range(lo, hi):
                if p == g:
                    continue
                p_ge = _at_least(good, p, g)
                if p_ge and mem[p] < mem[g]:
                    if pass_ == 0:
                        always[i] += 1
                    continue
                if _at_least(good, g, p) and mem[g] < mem[p]:
                    continue  # always behind the gold
                if capped[p] < 0:
                    capped[p] = _ahead_count(good, mem, lo, hi, p, depth)
                if capped[p] >= depth:
                    continue  # can only be ahead of a gold that is out of the top depth anyway
                if pass_ == 0:
                    counts[i + 1] += 1
                else:
                    out[at] = p
                    at += 1
    return always, counts, out


@njit(parallel=True, cache=True)
def gold_ranks(need: np.ndarray, row_start: np.ndarray, row_signal: np.ndarray, row_rank: np.ndarray,
               row_val: np.ndarray, by_rank: bool, rank_tab: np.ndarray, pair_intent: np.ndarray, scale: np.ndarray,
               cov: np.ndarray, age: np.ndarray, sup: np.ndarray, mem: np.ndarray, weights: np.ndarray,
               k_id: np.ndarray, gated: np.ndarray, bonus: np.ndarray, boost: np.ndarray, hours: np.ndarray,
               mode: np.ndarray, factor: np.ndarray, by_hits: bool, count_hits: bool, gold_local: np.ndarray, always: np.ndarray,
               comp_start: np.ndarray, comp_local: np.ndarray, need_q_start: np.ndarray,
               gold_q_start: np.ndarray) -> np.ndarray:
    """(configs, gold) ranks; NOT_FOUND where the gold is not retrieved.

    A row's base value is ``rank_tab[k_id, rank]`` when ``by_rank`` (RRF: it depends on the rank
    and k only), else ``row_val``. ``need``: the pairs to score (the golds and everything compared
    with them), by local index; per local pair: ``cov``, ``age``, ``sup``, ``mem``; ``mode``: 0 keep,
    1 demote, 2 hide. ``need`` and the golds are grouped by query (``need_q_start``,
    ``gold_q_start``: offsets per query). ``count_hits`` False promises that every base value is > 0 (RRF), so a
    pair's sum alone says whether it is live. Configurations are taken in blocks (the innermost loops run over a block, so
    they vectorise); the threads share the blocks."""
    n_c, n_sig = weights.shape
    n_int = scale.shape[0]
    n_g = len(gold_local)
    n_rank = rank_tab.shape[1]
    ranks = np.empty((n_c, n_g), dtype=np.int64)
    n_blocks = (n_c + _BLOCK - 1) // _BLOCK
    for blk in prange(n_blocks):
        c0 = blk * _BLOCK
        nb = min(_BLOCK, n_c - c0)
        # per intent row, signal and configuration: the weight `fuse` uses (w, or w * intent scale)
        wt = np.empty((n_int, n_sig, nb))
        live = np.empty((n_int, n_sig, nb))
        for ii in range(n_int):
            for s in range(n_sig):
                for j in range(nb):
                    c = c0 + j
                    w = weights[c, s] * scale[ii, s] if gated[c] else weights[c, s]
                    wt[ii, s, j] = w
                    live[ii, s, j] = 1.0 if w != 0 else 0.0
        # flat arrays and explicit offsets below: array views inside the hot loops cost a reference
        # count each, which is most of the time
        if by_rank:  # each (weight, rank) product once, as `fuse` computes it: w * (1 / (k + rank))
            tab = np.empty(n_int * n_sig * n_rank * nb)
            for ii in range(n_int):
                for s in range(n_sig):
                    for rk in range(n_rank):
                        at = ((ii * n_sig + s) * n_rank + rk) * nb
                        for j in range(nb):
                            tab[at + j] = wt[ii, s, j] * rank_tab[k_id[c0 + j], rk]
        else:
            tab = np.empty(1)
        wflat = wt.ravel()
        lflat = live.ravel()
        # one query at a time: its pairs' scores fit in cache, and golds only meet their own query's pairs
        width = 1
        for q in range(len(need_q_start) - 1):
            width = max(width, need_q_start[q + 1] - need_q_start[q])
        score = np.empty(width * nb)
        hits = np.empty(width * nb if count_hits else nb)
        count = np.empty(nb, dtype=np.int64)
        sg = np.empty(nb)
        for q in range(len(need_q_start) - 1):
            lo, hi = need_q_start[q], need_q_start[q + 1]
            if gold_q_start[q] == gold_q_start[q + 1]:
                continue
            for u in range(lo, hi):
                p = need[u]
                ii = pair_intent[p]
                so = (u - lo) * nb
                ho = so if count_hits else 0
                for j in range(nb):
                    score[so + j] = 0.0
                    hits[ho + j] = 0.0
                for r in range(row_start[p], row_start[p + 1]):
                    s = row_signal[r]
                    # a zero weight adds +0.0, which changes no sum: `fuse` adds the same zero
                    if by_rank:
                        to = ((ii * n_sig + s) * n_rank + row_rank[r]) * nb
                        for j in range(nb):
                            score[so + j] += tab[to + j]
                    else:
                        v = row_val[r]
                        wo = (ii * n_sig + s) * nb
                        for j in range(nb):
                            score[so + j] += wflat[wo + j] * v
                    if count_hits:
                        wo = (ii * n_sig + s) * nb
                        for j in range(nb):
                            hits[ho + j] += lflat[wo + j]
                for j in range(nb):
                    c = c0 + j
                    acc = score[so + j]
                    # without hit counts, every base is > 0: a pair is live exactly when its sum is
                    alive = hits[ho + j] > 0 if count_hits else acc > 0
                    if by_hits:
                        acc = acc * hits[ho + j]
                    if bonus[c] != 0:
                        acc = acc * (1.0 + bonus[c] * cov[u])
                    if boost[c] != 1.0 and age[u] < hours[c]:
                        acc = acc * boost[c]
                    if sup[u] > 0:
                        if mode[c] == 1:
                            acc = acc * factor[c]
                        elif mode[c] == 2:
                            alive = False
                    score[so + j] = acc if alive else -np.inf
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
    return ranks
