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


NEVER_RECENT = np.iinfo(np.int64).max  # age of an item without a time (or with no reference): never recent


@njit(parallel=True, cache=True)
def fill_zones(q_start: np.ndarray, tok: np.ndarray, norm: np.ndarray, ages: np.ndarray, ref_of: np.ndarray,
               working: np.ndarray, pinned: np.ndarray, gold: np.ndarray, srank: np.ndarray, trank: np.ndarray,
               dup_start: np.ndarray, dup_local: np.ndarray, n_gold: np.ndarray, caps: np.ndarray,
               critical_threshold: np.ndarray, recency_threshold: np.ndarray, window: np.ndarray,
               skip: np.ndarray):
    """`assemble`'s routing and greedy zone fill for every (configuration, question), reduced to the
    context metrics. Items are laid out per question in greedy order (score descending, then id).

    Per configuration c: ``caps[c]`` the zone capacities, the two thresholds, ``window[c]`` the
    recent window in microseconds, ``ages[ref_of[c]]`` each item's age against that configuration's
    reference time. ``dup_local[dup_start[k]:dup_start[k + 1]]`` are item k's near-duplicates (by
    position within its question). Pairs with ``skip`` set are left for the caller.

    Returns (context recall, gold share in critical, first gold position (0: none), tokens used),
    each (configurations, questions)."""
    n_conf = caps.shape[0]
    n_q = len(q_start) - 1
    widest = 0
    for q in range(n_q):
        widest = max(widest, q_start[q + 1] - q_start[q])
    recall = np.zeros((n_conf, n_q))
    critical = np.zeros((n_conf, n_q))
    first = np.zeros((n_conf, n_q), dtype=np.int64)
    used = np.zeros((n_conf, n_q), dtype=np.int64)
    for c in prange(n_conf):
        zone = np.empty(widest, dtype=np.int64)
        placed = np.empty(widest, dtype=np.int64)  # zone placed in; -1 not taken; -2 dropped as a duplicate
        age = ages[ref_of[c]]
        for q in range(n_q):
            if skip[c, q]:
                continue
            lo, hi = q_start[q], q_start[q + 1]
            n = hi - lo
            for i in range(n):  # routing, weakest rule first (as `lab.assemble.routing._zones`)
                k = lo + i
                z = 1
                if age[k] != NEVER_RECENT and age[k] <= window[c] and norm[k] >= recency_threshold[c]:
                    z = 2
                if norm[k] >= critical_threshold[c]:
                    z = 0
                if pinned[k]:
                    z = 0
                if working[k]:
                    z = 2
                zone[i] = z
                placed[i] = -1
            space = 0
            for zz in range(3):  # critical, middle (with critical's overflow), recency; unused space carries
                space += caps[c, zz]
                for i in range(n):
                    if placed[i] != -1:
                        continue
                    if zz == 1:
                        if zone[i] > 1:
                            continue
                    elif zone[i] != zz:
                        continue
                    k = lo + i
                    if tok[k] > space:
                        continue
                    duplicate = False
                    for j in range(dup_start[k], dup_start[k + 1]):
                        if placed[dup_local[j]] >= 0:
                            duplicate = True
                            break
                    if duplicate:
                        placed[i] = -2
                        continue
                    placed[i] = zz
                    space -= tok[k]
            # metrics: reading order is critical and middle by (score, time, id), recency by (time, id)
            count = np.zeros(3, dtype=np.int64)
            best_gold = np.full(3, NEVER_RECENT, dtype=np.int64)  # the gold's best order key per zone
            n_found = 0
            n_critical = 0
            total = 0
            for i in range(n):
                z = placed[i]
                if z < 0:
                    continue
                k = lo + i
                count[z] += 1
                total += tok[k]
                if gold[k]:
                    n_found += 1
                    if z == 0:
                        n_critical += 1
                    key = trank[k] if z == 2 else srank[k]
                    if key < best_gold[z]:
                        best_gold[z] = key
            used[c, q] = total
            if n_gold[q] > 0:
                recall[c, q] = n_found / n_gold[q]
                critical[c, q] = n_critical / n_gold[q]
            offset = 0
            for z in range(3):
                if best_gold[z] != NEVER_RECENT:
                    ahead = 0
                    for i in range(n):
                        if placed[i] == z:
                            key = trank[lo + i] if z == 2 else srank[lo + i]
                            if key < best_gold[z]:
                                ahead += 1
                    first[c, q] = offset + ahead + 1
                    break
                offset += count[z]
    return recall, critical, first, used
