"""A namespace view with some of its memories rewritten in their places: what an update or a soft
delete moves a view by.

An update or a soft delete rewrites a memory's row; its id, and so its position, stays. Taking it
out and putting it back (``lab.search.view_remove``, then ``lab.search.view_insert``) shifted every
position-valued array of the view twice, and at a million memories that was most of the search right
after the write. Here the per-memory arrays are copied with the new values at those positions, the
row frame and text columns are spliced around them (``lab.search.splice``), and what depends only on
positions (label maps, the time and access orders when neither changed, edges) is shared. Memos of
a memory's text or fields are worked out again at its position alone; the episode order takes it out
and puts it back in its episode. When a rewrite moved a memory in time or in access count, the caller
falls back to out-and-in.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from lab.search import timex
from lab.search.episode_order import episode_order_inserted, episode_order_without
from lab.search.pending import carried_matches
from lab.search.splice import rechunked, replaced
from lab.search.view import NamespaceView, text_of
from lab.store.records import episode_expr


def replaced_view(view: NamespaceView, at: np.ndarray, added: pl.DataFrame) -> NamespaceView | None:
    """``view`` with the memories at positions ``at`` (sorted) rewritten by ``added`` (their new rows,
    sorted by id, so in the same order); a new view, ``view`` unchanged. None when a rewrite changed
    a memory's time or access count, or an edge names one of them."""
    created = added["created_at"].dt.epoch("us").to_numpy().astype(np.float64) / 1e6
    access = added["access_count"].to_numpy().astype(np.int64)
    if not (np.array_equal(view.created_s[at], created) and np.array_equal(view.access[at], access)):
        return None  # the time and access orders would move: out and in again
    if not set(at.tolist()).isdisjoint(view.neighbours):
        return None
    text = text_of(added)
    rewritten = set(added["id"].to_list())
    moved = replace(
        view,
        valid=_set(view.valid, at, added["valid"].to_numpy().astype(bool)),
        superseded=_set(view.superseded, at, added["superseded_by"].is_not_null().to_numpy()),
        tags=(rechunked(replaced(view.tags, at, added["tags"])) if isinstance(view.tags, pl.Series)
              else _list_set(view.tags, at, added["tags"].to_list())),
        text_lower=rechunked(replaced(view.text_lower, at, text)),
        rows=rechunked(replaced(view.rows, at, added)),
        _label_maps=dict(view._label_maps), _by_position=dict(view._by_position),
        _contains={}, _masks={}, _passing={}, _lift={},
        _terms={m: t for m, t in list(view._terms.items()) if m not in rewritten},
        _episodes=None, _members=None, _derived_mask=None, _episode_turns=None, _order=None, _adjacent=None,
        _dated=None, _event_s=None, _types=None,
    )
    _carry_memos(view, moved, at, added, text, created)
    return moved


def _set(values: np.ndarray, at: np.ndarray, new: np.ndarray) -> np.ndarray:
    out = values.copy()
    out[at] = new
    return out


def _list_set(values: list, at: np.ndarray, new: list) -> list:
    out = list(values)
    for p, value in zip(at.tolist(), new):
        out[p] = value
    return out


def _carry_memos(view: NamespaceView, moved: NamespaceView, at: np.ndarray, added: pl.DataFrame,
                 text: pl.Series, created: np.ndarray) -> None:
    """``view``'s memos with the rewritten positions worked out again (read as copies: a search
    still running on ``view`` may be adding to them)."""
    moved._contains = carried_matches(view._contains, lambda hit, needle: _set(
        hit, at, text.str.contains(needle, literal=True).fill_null(False).to_numpy().astype(bool)))
    if view._types is not None:
        types = added["type"].to_numpy().astype(str)
        moved._types = _set(view._types.astype(np.promote_types(view._types.dtype, types.dtype), copy=False),
                            at, types)
    for key, mask in list(view._masks.items()):  # after the fields they read: valid, tags, types
        fresh = _set(mask, at, moved._mask(*key, at=at))
        fresh.setflags(write=False)
        moved._masks[key] = fresh
    if view._episodes is not None:
        moved._episodes = rechunked(replaced(view._episodes, at, added.select(episode_expr()).to_series()))
    if view._order is not None:
        moved._order = _episode_order_replaced(view, moved, at)
    if view._dated is not None:
        dated = timex.dated(text)
        moved._dated = _set(view._dated, at, dated)
        if view._event_s is not None:
            moved._event_s = _set(view._event_s, at, timex.event_seconds(text, created, dated))


def _episode_order_replaced(view: NamespaceView, moved: NamespaceView, at: np.ndarray):
    """The episode order without the rewritten positions, then with those that are valid and have an
    episode put back in their places (``lab.search.episode_order.episode_order_inserted``)."""

    moved._order = episode_order_without(view._order, ~np.isin(view._order[0], at))
    return episode_order_inserted(moved, moved, lambda p: np.asarray(p), at)
