"""The non-index signals: recency, frequency, exact entity match, temporal window, graph walk.

Each returns (positions, scores) best first, positions into the namespace view (ids are sorted,
so ties broken by position are ties broken by memory id).
"""
from __future__ import annotations

from collections import deque
from datetime import datetime

import numpy as np

from lab.config import GraphConfig
from lab.search.analysis import TimeWindow
from lab.search.view import NamespaceView

Ranked = tuple[np.ndarray, np.ndarray]
EMPTY: Ranked = (np.zeros(0, dtype=np.int64), np.zeros(0))


def top(positions: np.ndarray, scores: np.ndarray, depth: int) -> Ranked:
    """The ``depth`` best (position, score) pairs: score descending, then id ascending."""
    if len(positions) == 0:
        return EMPTY
    if len(positions) > 4 * depth:  # cut before the full sort; ties at the cut are resolved below
        cut = np.partition(scores, len(scores) - depth)[len(scores) - depth]
        keep = scores >= cut
        positions, scores = positions[keep], scores[keep]
    order = np.lexsort((positions, -scores))[:depth]
    return positions[order], scores[order]


def _walk(order: np.ndarray, allowed: np.ndarray, score_of, depth: int) -> Ranked:
    """Top ``depth`` along ``order``, a precomputed ordering on which scores never increase.

    Only a prefix is scored: it grows until its last score is below the depth-th best, so every
    tie of the cut is inside it and `top` breaks those ties by id as a full scan would.
    """
    if depth <= 0:
        return EMPTY
    # the allowed ones of a growing head of ``order``: filtering all of it would cost a pass
    # over every memory per query
    m = 2 * depth
    while True:
        head = order[:m]
        prefix = head[allowed[head]]
        exhausted = m >= len(order)
        if exhausted or len(prefix) > depth:
            scores = score_of(prefix)
            if exhausted or scores[-1] < scores[depth - 1]:
                return top(prefix, scores, depth)
        m *= 4


def recency(view: NamespaceView, allowed: np.ndarray, reference: datetime, half_life_hours: float, depth: int) -> Ranked:
    """0.5 ** (age / half-life), age from the reference time (future memories count as age 0)."""
    ref = reference.timestamp()

    def score_of(positions: np.ndarray) -> np.ndarray:
        age_h = np.maximum(ref - view.created_s[positions], 0.0) / 3600.0
        return np.power(0.5, age_h / half_life_hours)

    return _walk(view.by_newest, allowed, score_of, depth)


def frequency(view: NamespaceView, allowed: np.ndarray, depth: int) -> Ranked:
    """log(1 + access count); never-accessed memories are not candidates."""
    return _walk(view.by_access, allowed & (view.access > 0),
                 lambda positions: np.log1p(view.access[positions].astype(np.float64)), depth)


def entity(view: NamespaceView, allowed: np.ndarray, entities: tuple[str, ...], depth: int) -> Ranked:
    """Exact (case-insensitive) substring matches of the query's entities; score = how many match."""
    if not entities or not len(view.ids):
        return EMPTY
    names = tuple(dict.fromkeys(name.lower() for name in entities))
    counts = np.zeros(len(view.ids), dtype=np.int32)
    for hit, times in zip(view.contains_all(names), _multiplicity(entities, names)):
        counts += hit * times if times > 1 else hit
    counts[~allowed] = 0
    return top_counts(counts, depth)


def _multiplicity(entities: tuple[str, ...], names: tuple[str, ...]) -> list[int]:
    """How many of the query's entities each distinct lower-cased name stands for (a name the
    analysis found twice counts twice, as it did when each was scanned on its own)."""
    lowered = [e.lower() for e in entities]
    return [lowered.count(n) for n in names]


def top_counts(counts: np.ndarray, depth: int) -> Ranked:
    """`top` for small non-negative integer scores over every position (0: not a candidate),
    without sorting: the positions of each count, highest count first, are already in id order.
    At a million memories a common name matches a fifth of them, and sorting those cost ~3 ms."""
    picked: list[np.ndarray] = []
    need = depth
    for value in range(int(counts.max(initial=0)), 0, -1):
        if need <= 0:
            break
        at = np.flatnonzero(counts == value)[:need]
        picked.append(at)
        need -= len(at)
    if not picked:
        return EMPTY
    positions = np.concatenate(picked).astype(np.int64)
    return positions, counts[positions].astype(np.float64)


def temporal(view: NamespaceView, allowed: np.ndarray, window: TimeWindow, depth: int) -> Ranked:
    """Memories said or telling of an event inside the query's time window (the event time:
    "yesterday" resolved against when it was said), closest to its middle first."""
    start, end = window.start.timestamp(), window.end.timestamp()
    said, event = view.created_s, view.event_s()
    inside = allowed & (((said >= start) & (said < end)) | ((event >= start) & (event < end)))
    positions = np.flatnonzero(inside)
    middle = (start + end) / 2
    days_off = np.minimum(np.abs(said[positions] - middle), np.abs(event[positions] - middle)) / 86400.0
    return top(positions, 1.0 / (1.0 + days_off), depth)


def dated_evidence(view: NamespaceView, seeds: dict[int, float], depth: int) -> Ranked:
    """For a question asking "when": the first hits (``seeds``: position -> strength) whose text
    holds a time expression, strongest first."""
    is_dated = view.dated()
    kept = [(p, s) for p, s in seeds.items() if is_dated[p]]
    if not kept:
        return EMPTY
    positions = np.asarray([p for p, _ in kept], dtype=np.int64)
    return top(positions, np.asarray([s for _, s in kept]), depth)


def graph(view: NamespaceView, allowed: np.ndarray, seeds: list[tuple[int, float]], config: GraphConfig, depth: int) -> Ranked:
    """Breadth-first from the seeds over typed edges, up to ``max_depth`` hops.

    A reached memory scores seed strength x edge weight x relation weight x decay^(hops-1),
    keeping its best path. Seeds themselves are not candidates of this signal.
    """
    best: dict[int, float] = {}
    seed_set = {p for p, _ in seeds}
    for seed, strength in seeds:
        queue = deque([(seed, strength, 0)])
        seen = {seed}
        while queue:
            node, value, hops = queue.popleft()
            if hops == config.max_depth:
                continue
            for nxt, relation, weight in view.neighbours.get(node, ()):
                if nxt in seen:
                    continue
                seen.add(nxt)
                score = value * weight * config.edge_weights.get(relation, 0.0) * (config.decay ** hops)
                if score <= 0:
                    continue
                if nxt not in seed_set and allowed[nxt] and score > best.get(nxt, 0.0):
                    best[nxt] = score
                queue.append((nxt, score, hops + 1))
    if not best:
        return EMPTY
    positions = np.fromiter(best.keys(), dtype=np.int64, count=len(best))
    scores = np.fromiter(best.values(), dtype=np.float64, count=len(best))
    return top(positions, scores, depth)
