"""The fast paths of the signals agree with brute force: chunk collapse, ordered walks, cosines."""
from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.index.view_index import collapse
from lab.search import signals as sig
from lab.search.view import NamespaceView


def brute_collapse(labels, scores, memory_of, k):
    best: dict[str, float] = {}
    for label, score in zip(labels.tolist(), scores.tolist()):
        mid = memory_of[label]
        best[mid] = max(best.get(mid, -np.inf), score)
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])), max_size=300),
       st.integers(1, 12))
def test_collapse_equals_a_full_fold_even_with_many_ties(hits, k):
    memory_of = [f"m{i % 13:02d}" for i in range(31)]  # several chunks per memory
    labels = np.array([h[0] for h in hits], dtype=np.int64)
    scores = np.array([h[1] for h in hits], dtype=np.float32)
    assert collapse(labels, scores, memory_of, k) == brute_collapse(labels, scores, memory_of, k)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])), max_size=300),
       st.integers(1, 12), st.sets(st.integers(0, 12), max_size=4))
def test_collapse_to_view_positions_names_the_same_memories_in_the_same_order(hits, k, not_in_view):
    """A search collapses to view positions (positions are in id order): the ids' collapse, minus the
    memories the view does not hold, whose labels map to -1."""
    memory_of = [f"m{(i * 7) % 13:02d}" for i in range(31)]  # labels in no id order
    held = sorted({m for m in memory_of} - {f"m{i:02d}" for i in not_in_view})
    positions = np.array([held.index(m) if m in held else -1 for m in memory_of], dtype=np.int64)
    labels = np.array([h[0] for h in hits], dtype=np.int64)
    scores = np.array([h[1] for h in hits], dtype=np.float32)
    keep = positions[labels] >= 0
    want = [(held.index(m), s) for m, s in collapse(labels[keep], scores[keep], memory_of, k)]
    assert collapse(labels, scores, memory_of, k, positions) == want


def view_of(created_s: list[float], access: list[int]) -> NamespaceView:
    n = len(created_s)
    created = np.array(created_s, dtype=np.float64)
    acc = np.array(access, dtype=np.int64)
    return NamespaceView(
        namespace="n", ids=[f"m{i:03d}" for i in range(n)], pos={f"m{i:03d}": i for i in range(n)},
        created_s=created, access=acc, valid=np.ones(n, bool), _types=np.array(["fact"] * n),
        tags=[[] for _ in range(n)], superseded=np.zeros(n, bool), text_lower=None, neighbours={},
        contradicts={}, key=(), by_newest=np.argsort(-created, kind="stable"), by_access=np.argsort(-acc, kind="stable"),
    )


def brute_top(scores: np.ndarray, allowed: np.ndarray, depth: int):
    positions = np.flatnonzero(allowed)
    order = np.lexsort((positions, -scores[positions]))[:depth]
    return positions[order].tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 4), st.booleans()), min_size=1, max_size=120),
       st.integers(1, 15), st.integers(0, 40))
def test_recency_and_frequency_walks_equal_a_full_scan(rows, depth, ref_hours):
    # coarse times and counts: many ties, and memories after the reference time (age 0, score 1)
    created = [h * 3600.0 for h, _, _ in rows]
    view = view_of(created, [a for _, a, _ in rows])
    allowed = np.array([ok for _, _, ok in rows])
    ref = datetime.fromtimestamp(ref_hours * 3600.0, tz=timezone.utc)
    positions, _ = sig.recency(view, allowed, ref, 5.0, depth)
    expected = np.power(0.5, np.maximum(ref.timestamp() - view.created_s, 0) / 3600.0 / 5.0)
    assert positions.tolist() == brute_top(expected, allowed, depth)
    positions, _ = sig.frequency(view, allowed, depth)
    assert positions.tolist() == brute_top(np.log1p(view.access.astype(float)), allowed & (view.access > 0), depth)


def test_walks_of_depth_zero_or_over_nothing_rank_nothing():
    order = np.arange(5)
    allowed = np.ones(5, dtype=bool)
    score = lambda positions: 1.0 / (1.0 + positions)  # noqa: E731  (never increasing along order)
    assert len(sig._walk(order, allowed, score, 0)[0]) == 0
    assert len(sig._walk(order, np.zeros(5, dtype=bool), score, 3)[0]) == 0
    assert len(sig._walk(np.zeros(0, dtype=np.int64), allowed, score, 3)[0]) == 0
    assert sig._walk(order, allowed, score, 3)[0].tolist() == [0, 1, 2]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from(["tim", "time", "John", "new york", "york", "x"]), max_size=4),
                          st.booleans()), min_size=1, max_size=80),
       st.lists(st.sampled_from(["Tim", "tim", "John", "New York", "York", "zed"]), max_size=5),
       st.integers(1, 15))
def test_the_entity_signal_equals_a_scan_and_sort_of_every_memory(rows, entities, depth):
    import polars as pl

    # few words, so many memories tie on how many names they hold; names repeated and differing
    # only in case count once per mention, as a scan per mention counted them
    view = view_of([0.0] * len(rows), [0] * len(rows))
    view.text_lower = pl.Series([" ".join(words).lower() for words, _ in rows])
    allowed = np.array([ok for _, ok in rows])
    counts = np.zeros(len(rows))
    for name in entities:
        counts += np.array([name.lower() in " ".join(words).lower() for words, _ in rows])
    positions, scores = sig.entity(view, allowed, tuple(entities), depth)
    assert positions.tolist() == brute_top(counts, allowed & (counts > 0), depth)
    assert scores.tolist() == counts[positions].tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, "s1", "s2", "s10"]), st.integers(0, 5), st.booleans()),
                max_size=60),
       st.lists(st.integers(0, 70), max_size=40))
def test_episode_arrays_and_label_positions_equal_a_loop_over_every_memory(rows, labels):
    import json

    import polars as pl

    # few times, so turns tie on time and fall back to id order; invalid memories are no turn
    view = view_of([h * 60.0 for _, h, _ in rows], [0] * len(rows))
    view.valid = np.array([ok for _, _, ok in rows], dtype=bool)
    view.rows = pl.DataFrame({"id": view.ids,
                              "metadata": [json.dumps({"session": ep}) if ep else "{}" for ep, _, _ in rows]},
                             schema={"id": pl.String, "metadata": pl.String})
    members: dict[str, list[int]] = {}
    for p in sorted(range(len(rows)), key=lambda p: (view.created_s[p], p)):
        if rows[p][0] is not None and rows[p][2]:
            members.setdefault(rows[p][0], []).append(p)
    ep, turn = np.full(len(rows), -1.0), np.full(len(rows), -1.0)
    before, after = np.full(len(rows), -1), np.full(len(rows), -1)
    for group in members.values():
        ep[group], turn[group] = group[0], np.arange(len(group))
        before[group[1:]], after[group[:-1]] = group[:-1], group[1:]
    assert view.episode_members() == members and view.has_episodes() == bool(members)
    assert [a.tolist() for a in view.episode_turns()] == [ep.tolist(), turn.tolist()]
    assert [a.tolist() for a in view.adjacent_turns()] == [before.tolist(), after.tolist()]
    memory_of = [f"m{i:03d}" for i in labels]  # some beyond the view: no position
    assert view.label_positions(1, memory_of).tolist() == [view.pos.get(m, -1) for m in memory_of]
