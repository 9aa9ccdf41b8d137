"""Compiled zone routing and greedy fill of the batch assembler (numba), reduced to the context metrics.

The routing is `lab.assemble.routing.zone_of` itself, compiled here from its one source. The greedy
fill replays `assemble`'s (`lab.assemble.fill`) on what the batch assembler computes once per run:
every item's token count and its near-duplicates. `assemble` keeps its own fill because it works
on less: it counts tokens only for items that get that far, truncates an item longer than the
whole budget, and shingles texts only once a near-duplicate is possible; a hypothesis test holds
the two equal (tests/test_batch_assembly.py).

numba's on-disk cache checks only the file of the function it caches, so `fill_zones` is made in a
closure over the routing module's source digest (numba hashes it into the cache key): an edited
rule recompiles it.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange
from numba.extending import overload

from lab.assemble import routing
from lab.tune.kernels import source_digest

NEVER_RECENT = np.iinfo(np.int64).max  # age of an item without a time (or with no reference): never recent


@overload(routing.select)
def _scalar_select(cond, a, b):
    """`routing.select` on one item: a choice, not an array."""
    return lambda cond, a, b: a if cond else b


zone_of = njit(inline="always")(routing.zone_of)


@njit
def _fill(lo, n, zone, tok, space_of, dup_start, dup_local, placed):
    """The greedy fill of one question's items [lo, lo + n), in greedy order (score descending,
    then id): critical, then middle (with critical's overflow), then recency, unused space carrying
    on; an item that does not fit is skipped and smaller ones still tried; one that near-duplicates
    an item already placed is dropped. ``placed``: the zone each went to, -1 not taken, -2 dropped."""
    for i in range(n):
        placed[i] = -1
    space = 0
    for zz in range(3):
        space += space_of[zz]
        for i in range(n):
            if placed[i] != -1 or (zone[i] > 1 if zz == 1 else zone[i] != zz):
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


@njit
def _read(lo, n, placed, tok, gold, srank, trank, n_gold):
    """(context recall, gold share in critical, first gold position (0: none), tokens used) of one
    placement. Reading order: critical and middle by (score, time, id), recency by (time, id)."""
    count = np.zeros(3, dtype=np.int64)
    best_gold = np.full(3, NEVER_RECENT, dtype=np.int64)  # the gold's best order key per zone
    n_found = n_critical = total = 0
    for i in range(n):
        z = placed[i]
        if z < 0:
            continue
        k = lo + i
        count[z] += 1
        total += tok[k]
        if gold[k]:
            n_found += 1
            n_critical += z == 0
            key = trank[k] if z == 2 else srank[k]
            best_gold[z] = min(best_gold[z], key)
    recall = n_found / n_gold if n_gold > 0 else 0.0
    critical = n_critical / n_gold if n_gold > 0 else 0.0
    offset = 0
    for z in range(3):
        if best_gold[z] != NEVER_RECENT:
            ahead = 0
            for i in range(n):
                if placed[i] == z and (trank[lo + i] if z == 2 else srank[lo + i]) < best_gold[z]:
                    ahead += 1
            return recall, critical, offset + ahead + 1, total
        offset += count[z]
    return recall, critical, 0, total


def _fill_zones(digest: int):
    """`fill_zones`, a closure over ``digest`` (`source_digest` of the routing rule)."""

    @njit(parallel=True, cache=True)
    def fill_zones(q_start, tok, norm, ages, ref_of, working, pinned, gold, srank, trank, dup_start, dup_local,
                   n_gold, caps, critical_threshold, recency_threshold, window, skip):
        """`assemble`'s routing and greedy zone fill for every (configuration, question), reduced to
        the context metrics. Items are laid out per question in greedy order (score descending, then id).

        Per configuration c: ``caps[c]`` the zone capacities, the two thresholds, ``window[c]`` the
        recent window in microseconds, ``ages[ref_of[c]]`` each item's age against that configuration's
        reference time. ``dup_local[dup_start[k]:dup_start[k + 1]]`` are item k's near-duplicates (by
        position within its question). Pairs with ``skip`` set are left for the caller.

        Returns (context recall, gold share in critical, first gold position (0: none), tokens used),
        each (configurations, questions)."""
        _ = digest  # in the closure: numba's cache key
        n_conf, n_q = caps.shape[0], len(q_start) - 1
        widest = 0
        for q in range(n_q):
            widest = max(widest, q_start[q + 1] - q_start[q])
        recall = np.zeros((n_conf, n_q))
        critical = np.zeros((n_conf, n_q))
        first = np.zeros((n_conf, n_q), dtype=np.int64)
        used = np.zeros((n_conf, n_q), dtype=np.int64)
        for c in prange(n_conf):
            zone = np.empty(widest, dtype=np.int64)
            placed = np.empty(widest, dtype=np.int64)
            age = ages[ref_of[c]]
            for q in range(n_q):
                if skip[c, q]:
                    continue
                lo, n = q_start[q], q_start[q + 1] - q_start[q]
                for i in range(n):
                    k = lo + i
                    recent = age[k] != NEVER_RECENT and age[k] <= window[c]
                    zone[i] = zone_of(recent, norm[k], working[k], pinned[k], critical_threshold[c],
                                      recency_threshold[c])
                _fill(lo, n, zone, tok, caps[c], dup_start, dup_local, placed)
                recall[c, q], critical[c, q], first[c, q], used[c, q] = _read(lo, n, placed, tok, gold, srank, trank,
                                                                              n_gold[q])
        return recall, critical, first, used

    return fill_zones


fill_zones = _fill_zones(source_digest(routing))
