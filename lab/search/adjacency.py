"""How much more alike a namespace's adjacent memories are than random pairs of them: the evidence
the neighbour boost waits for (``FusionConfig.neighbour_min_lift``).

In a conversation a question and its answer sit next to each other, and the turns of an episode
talk about one thing: adjacent turns are more alike than two turns drawn at random. Where memories
are independent events (a user's notes, a benchmark of another shape, LoCoMo with its turns
shuffled) they are not, and lifting a memory's neighbours is noise. The lift is the mean cosine of
adjacent valid turns of an episode (as the neighbour boost pairs them) minus the mean cosine of as
many random pairs of the same turns, each memory by its first chunk's vector: in the 'plain' view's
index when the store has one, since a turn's context holds its neighbours' words and would make
neighbours alike by construction. Sampled with a fixed seed, so a view's lift is always the same.
"""
from __future__ import annotations

import numpy as np

from lab.search.view import NamespaceView

PAIRS = 2000  # adjacent pairs (and as many random ones) sampled: the mean to about +-0.01
SEED = 0


def evidence_index(index):
    """The index whose vectors say how alike memories are: the plain view's, when it holds any."""
    plain = getattr(index, "views", {}).get("plain")
    return plain if plain is not None and plain.n_live else index


def adjacency_lift(view: NamespaceView, index) -> float | None:
    """The namespace's adjacency lift (module docstring), memoised per view and index; None when
    the namespace has fewer than two adjacent pairs with vectors."""
    index = evidence_index(index)
    key = (id(index), len(index.memory_of), int(index.n_live))
    if key in view._lift:
        return view._lift[key]
    labels, indptr = view.labels_by_position(id(index), index.memory_of, index.live)
    has = np.diff(indptr) > 0
    _, after = view.adjacent_turns()
    a = np.flatnonzero(after >= 0)
    b = after[a]
    keep = has[a] & has[b]
    a, b = a[keep], b[keep]
    members = view._episode_order()[0]
    members = members[has[members]]
    lift = None
    if len(a) >= 2 and len(members) >= 3:
        rng = np.random.default_rng(SEED)
        if len(a) > PAIRS:
            pick = np.sort(rng.choice(len(a), PAIRS, replace=False))
            a, b = a[pick], b[pick]
        ra, rb = members[rng.integers(0, len(members), len(a))], members[rng.integers(0, len(members), len(a))]
        ra, rb = ra[ra != rb], rb[ra != rb]
        if len(ra):
            lift = _mean_cosine(index, labels, indptr, a, b) - _mean_cosine(index, labels, indptr, ra, rb)
    view._lift[key] = lift
    return lift


def _mean_cosine(index, labels: np.ndarray, indptr: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    """Mean cosine of the pairs (a[i], b[i]) of positions, each by its first chunk's vector."""
    va = index.chunk_vectors(labels[indptr[a]])
    vb = index.chunk_vectors(labels[indptr[b]])
    return float(np.mean(np.sum(np.asarray(va, dtype=np.float64) * np.asarray(vb, dtype=np.float64), axis=1)))
