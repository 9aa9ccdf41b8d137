"""A namespace view's episode order (``NamespaceView._episode_order``) with memories put in or taken
out: what a save, a delete, or a rewrite that keeps a memory where it stands, moves it by."""
from __future__ import annotations

from bisect import bisect_left, bisect_right

import numpy as np

from lab.search.view import NamespaceView


def episode_order_inserted(view: NamespaceView, moved: NamespaceView, shift, new_pos: np.ndarray):
    """``view``'s episode order (``NamespaceView._episode_order``) with the new memories that have an
    episode and are valid put in their places: episodes by key, turns by (created_at, position)."""
    members, starts = view._order
    members = shift(members)
    episodes = moved.episodes
    for p in new_pos.tolist():
        episode = episodes[p]
        if episode is None or not moved.valid[p]:
            continue
        keys = episodes.gather(members[starts]).to_list() if len(starts) else []
        g = bisect_left(keys, episode)
        if g < len(keys) and keys[g] == episode:
            a = int(starts[g])
            b = int(starts[g + 1]) if g + 1 < len(starts) else len(members)
            turns = [(float(moved.created_s[m]), int(m)) for m in members[a:b].tolist()]
            at = a + bisect_right(turns, (float(moved.created_s[p]), p))
            members = np.insert(members, at, p)
            starts = np.where(np.arange(len(starts)) > g, starts + 1, starts)
        else:  # a new episode: a group of its own, in key order
            at = int(starts[g]) if g < len(starts) else len(members)
            members = np.insert(members, at, p)
            starts = np.insert(np.where(np.arange(len(starts)) >= g, starts + 1, starts), g, at)
    return members, starts.astype(np.int64)


def episode_order_without(order: tuple[np.ndarray, np.ndarray], stays: np.ndarray,
                          renumber: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """An episode order without the members whose ``stays`` (per member) is False; the members left
    renumbered through ``renumber`` (old position -> new) when given."""
    members, starts = order
    group = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(members)]).astype(np.int64))
    members, group = members[stays], group[stays]
    if renumber is not None:
        members = renumber[members]
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if len(members) else np.zeros(0, dtype=np.int64)
    return members, starts.astype(np.int64)
