"""A namespace view without some of its memories: what an update or a delete moves a view by.

An update takes the memory out and puts its new row in (``lab.search.view_insert``); a delete only
takes it out. The arrays are copied without the memories' positions and what the view had worked out
is carried over, shifted down: label maps, text matches, filter masks, time expressions, episode
order. The row frame and the text columns are slices around the positions taken out
(``lab.search.splice``), not copies. Memos that depend on the index's labels being unchanged (the label grouping, the per-label
filter masks) are left to be made again. A memory an edge names is not taken out this way: the
view is then built anew (its edge structures would move too).
"""
from __future__ import annotations

import numpy as np
import polars as pl

from lab.search.episode_order import episode_order_without
from lab.search.sorted_ids import Positions
from lab.search.pending import carried_matches
from lab.search.splice import without
from lab.search.view import NamespaceView


def removed_view(view: NamespaceView, gone: np.ndarray) -> NamespaceView | None:
    """``view`` without the memories at positions ``gone`` (sorted, unique); a new view, ``view``
    unchanged (a search may still hold it). None when an edge names one of them."""
    gone_set = set(gone.tolist())
    if not gone_set.isdisjoint(view.neighbours):  # every edge's ends are keys there (walks go both ways)
        return None
    n = len(view.ids)
    keep = np.ones(n, dtype=bool)
    keep[gone] = False
    new_pos = np.cumsum(keep) - 1  # old position -> new (for the positions kept)
    new_pos[~keep] = -1
    ids = view.ids.removed({view.ids[p] for p in gone.tolist()})
    shift = lambda p: int(new_pos[p])  # noqa: E731  (edge ends: never a removed position, checked above)
    moved = NamespaceView(
        namespace=view.namespace, ids=ids, pos=Positions(ids),
        created_s=view.created_s[keep], access=view.access[keep], valid=view.valid[keep],
        tags=without(view.tags, gone) if isinstance(view.tags, pl.Series) else [t for t, k in zip(view.tags, keep) if k],
        superseded=view.superseded[keep], text_lower=without(view.text_lower, gone),
        neighbours={shift(a): [(shift(b), r, w) for b, r, w in lst] for a, lst in view.neighbours.items()},
        contradicts={shift(a): {shift(b) for b in s} for a, s in view.contradicts.items()},
        derived_from={shift(a): [shift(b) for b in lst] for a, lst in view.derived_from.items()},
        key=view.key, rows=without(view.rows, gone),
        by_newest=_order_without(view.by_newest, keep, new_pos),
        by_access=_order_without(view.by_access, keep, new_pos),
    )
    _carry_memos(view, moved, keep, new_pos, gone)
    return moved


def _order_without(order: np.ndarray, keep: np.ndarray, new_pos: np.ndarray) -> np.ndarray:
    """An ordering of positions without the removed ones, renumbered (ties stay in position order)."""
    return new_pos[order[keep[order]]]


def _carry_memos(view: NamespaceView, moved: NamespaceView, keep: np.ndarray, new_pos: np.ndarray,
                 gone: np.ndarray) -> None:
    """What ``view`` had worked out, without the removed positions. Its memos are read as copies
    (``list(...)``): a search still running on ``view`` may be adding to them."""
    for index_id, labels_at in list(view._label_maps.items()):
        # a label of a removed memory now names no memory here (-1), as a rebuilt map says
        moved._label_maps[index_id] = np.where(labels_at >= 0, new_pos[np.maximum(labels_at, 0)], -1)
    moved._contains = carried_matches(view._contains, lambda hit, needle: np.delete(hit, gone))  # gone: small, keep: not
    for key, mask in list(view._masks.items()):
        fresh = mask[keep]
        fresh.setflags(write=False)
        moved._masks[key] = fresh
    # terms are memoised by id: the memories taken out may come back with another text (an update)
    gone_ids = set(view.ids.take(gone.tolist()))
    moved._terms = {m: t for m, t in list(view._terms.items()) if m not in gone_ids}
    if view._types is not None:
        moved._types = view._types[keep]
    if view._episodes is not None:
        moved._episodes = without(view._episodes, gone)
    if view._order is not None:
        moved._order = episode_order_without(view._order, keep[view._order[0]], new_pos)
    if view._dated is not None:
        moved._dated = view._dated[keep]
        if view._event_s is not None:
            moved._event_s = view._event_s[keep]


def relabelled(before: NamespaceView, moved: NamespaceView, gone: np.ndarray) -> None:
    """Labels that named a memory taken out of ``before`` name it again in ``moved`` where it came
    back (an update, a soft delete): their chunks are still its chunks, as a rebuilt map says."""
    for index_id, labels_at in list(moved._label_maps.items()):
        old = before._label_maps.get(index_id)
        if old is None:
            continue
        at = np.flatnonzero(np.isin(old, gone))
        if not len(at):
            continue
        fixed = labels_at.copy()
        fixed[at] = [moved.pos.get(m, -1) for m in before.ids.take(old[at].tolist())]
        moved._label_maps[index_id] = fixed
