"""A namespace view moved on by the memories saved, updated and deleted (and the accesses logged)
since it was made, instead of rebuilt whole.

A view is rebuilt from the namespace's every row: at a million memories that cost two seconds, paid
by the first search after each save. The usual write only appends rows (a save of new memories, an
access logged), and the memories table says so (``MemoriesTable.changed_since``). Then the new
memories are put in their places, by id as a build orders them, into copies of the arrays, and
what the old view had worked out is carried over, shifted to the new positions: label maps and
groupings, text matches, time expressions, episode order. An update or a delete of ours rewrites
rows: the memories table says which ids each of our commits wrote (``MemoriesTable.changed_since``).
Memories rewritten where they stand (an update, a soft delete) get their new rows in their places
(``lab.search.view_replace``); others are taken out of the view (``lab.search.view_remove``) and
their current rows put in.
Anything else (an edge, another process's rewrite, a compaction, a change of more than
``INSERT_AT_MOST`` memories) builds the view anew. A moved view
equals a view built from scratch (tests/test_view_insert.py holds it on random sequences). The old
view is never changed: a search still holding it answers from it.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import polars as pl

from lab.search import timex
from lab.search.pending import carried_matches
from lab.search.episode_order import episode_order_inserted
from lab.search.view import NamespaceView, Positions, build_view, text_of
from lab.search.splice import rechunked as _rechunked, spliced as _spliced
from lab.search.view_remove import relabelled, removed_view
from lab.search.view_replace import replaced_view
from lab.store.records import episode_expr
from lab.store.store import Store

INSERT_AT_MOST = 2048  # memories one move takes in; more (a bulk load): the view is built anew


def current_view(store: Store, namespace: str, key: tuple, held: NamespaceView | None) -> NamespaceView:
    """The namespace's view at ``key``: ``held`` itself when current, ``held`` moved on when only
    rows were appended since, else one built from the store."""
    if held is not None and held.key == key:
        return held
    if held is not None and held.source is not None:
        moved = moved_view(held, store, namespace, key)
        if moved is not None:
            return moved
    store.require_namespace(namespace)
    frame, mark = store.memories_table.live_marked(namespace)
    view = build_view(frame, store.edges(namespace), namespace, key)
    view.source = mark
    return view


def moved_view(view: NamespaceView, store: Store, namespace: str, key: tuple) -> NamespaceView | None:
    """``view`` with the memories saved, updated and deleted and the accesses logged since it was
    made; None when anything else changed."""
    if key[1] != view.key[1]:
        return None  # the edges changed
    change = store.memories_table.changed_since(view.source, namespace, INSERT_AT_MOST)
    if change is None:
        return None
    added = change.rows.sort("id")
    if added.height and _edges_touch(store, namespace, added["id"]):
        return None
    moved = _in_place(view, change.gone, added) or _out_and_in(view, change.gone, added)
    if moved is None:
        return None
    if change.accessed.height:
        _accessed(moved, change.accessed)
    moved.key, moved.source = key, change.mark
    return moved


def _in_place(view: NamespaceView, gone: frozenset[str], added: pl.DataFrame) -> NamespaceView | None:
    """``view`` with memories rewritten where they stand (an update, a soft delete: every id
    rewritten comes back in ``added``, sorted by id); None when that is not the change."""
    if not gone or gone != frozenset(added["id"].to_list()):
        return None
    at = [view.pos.get(m) for m in sorted(gone)]
    return None if None in at else replaced_view(view, np.asarray(at, dtype=np.int64), added)


def _out_and_in(view: NamespaceView, gone_ids: frozenset[str], added: pl.DataFrame) -> NamespaceView | None:
    """``view`` with the memories ``gone_ids`` taken out and the rows ``added`` (sorted by id) put in."""
    base = view
    gone = sorted(p for p in (view.pos.get(m) for m in gone_ids) if p is not None)
    if gone:  # rewritten or deleted: out first (a rewritten memory comes back with ``added``)
        base = removed_view(view, np.asarray(gone, dtype=np.int64))
        if base is None:
            return None
    new_ids = added["id"].to_list()
    ins = np.asarray([base.ids.insertion_point(m) for m in new_ids], dtype=np.int64)
    if any(a < len(base.ids) and base.ids[a] == m for a, m in zip(ins.tolist(), new_ids)):
        return None  # an appended row of a memory already here: not a plain insert
    if not new_ids:
        return base if base is not view else _copy(view)
    moved = _inserted(base, added, ins)
    if base is not view:
        relabelled(view, moved, np.asarray(gone, dtype=np.int64))
    return moved


def _edges_touch(store: Store, namespace: str, ids: pl.Series) -> bool:
    """Does any edge of the namespace name one of ``ids``? (An edge saved before its memory
    comes alive with it: the view's edge structures must then be built again.)"""
    edges = store.edges_table.delta.frame()
    if not edges.height:
        return False
    edges = edges.filter(pl.col("namespace") == namespace)
    ids = ids.to_list()
    return bool(edges.filter(pl.col("src").is_in(ids) | pl.col("dst").is_in(ids)).height)


def _copy(view: NamespaceView) -> NamespaceView:
    """A view sharing ``view``'s arrays (never changed in place) and its memos, to be given new keys."""
    return replace(view, _label_maps=dict(view._label_maps), _by_position=dict(view._by_position),
                   _contains=dict(view._contains), _masks=dict(view._masks), _passing=dict(view._passing),
                   _lift={})


def _inserted(view: NamespaceView, added: pl.DataFrame, ins: np.ndarray) -> NamespaceView:
    """``view`` with the memories ``added`` (sorted by id) put before old positions ``ins``."""
    k = len(ins)
    shift = shifter(ins)
    new_pos = ins + np.arange(k)
    ids = view.ids.inserted(added["id"].to_list())
    text = text_of(added)
    created = added["created_at"].dt.epoch("us").to_numpy().astype(np.float64) / 1e6
    access = added["access_count"].to_numpy().astype(np.int64)
    rows = _rechunked(_spliced(view.rows, ins, added))
    moved = NamespaceView(
        namespace=view.namespace, ids=ids, pos=Positions(ids),
        created_s=np.insert(view.created_s, ins, created),
        access=np.insert(view.access, ins, access),
        valid=np.insert(view.valid, ins, added["valid"].to_numpy().astype(bool)),
        tags=(_rechunked(_spliced(view.tags, ins, added["tags"])) if isinstance(view.tags, pl.Series)
              else _list_inserted(view.tags, ins, added["tags"].to_list())),
        superseded=np.insert(view.superseded, ins, added["superseded_by"].is_not_null().to_numpy()),
        text_lower=_rechunked(_spliced(view.text_lower, ins, text)),
        neighbours={int(shift(a)): [(int(shift(b)), r, w) for b, r, w in lst] for a, lst in view.neighbours.items()},
        contradicts={int(shift(a)): {int(shift(b)) for b in s} for a, s in view.contradicts.items()},
        derived_from={int(shift(a)): [int(shift(b)) for b in lst] for a, lst in view.derived_from.items()},
        key=view.key, rows=rows,
        by_newest=None, by_access=None,  # set below, from the new times and counts
    )
    moved.by_newest = _ordered_insert(shift(view.by_newest), moved.created_s, new_pos)
    moved.by_access = _ordered_insert(shift(view.by_access), moved.access, new_pos)
    _carry_memos(view, moved, ins, new_pos, added, text, created)
    return moved


def _carry_memos(view: NamespaceView, moved: NamespaceView, ins: np.ndarray, new_pos: np.ndarray,
                 added: pl.DataFrame, text: pl.Series, created: np.ndarray) -> None:
    """What ``view`` had worked out, shifted to ``moved``'s positions (new memories filled in). Its
    memos are read as copies (``list(...)``, taken whole under the GIL): a search still running on
    ``view`` may be adding to them."""
    shift = shifter(ins)
    for index_id, labels_at in list(view._label_maps.items()):  # labels keep their memory: positions move
        moved._label_maps[index_id] = shift(labels_at)  # (-1, no memory here, is below every position: kept)
    for index_id, (key, (labels, indptr, covered)) in list(view._by_position.items()):
        # the new memories' label runs are empty until their labels are added (NamespaceView._by_label_group)
        moved._by_position[index_id] = (key, (labels, np.insert(indptr, ins, indptr[ins]), np.insert(covered, ins, False)))
    moved._contains = carried_matches(view._contains, lambda hit, needle: np.insert(hit, ins, _matches(text, needle)))
    moved._terms = view._terms  # keyed by id: an old memory's terms stay right
    if view._types is not None:
        types = added["type"].to_numpy().astype(str)
        # a wider type name than any before widens the array (np.insert would cut it to fit)
        moved._types = np.insert(view._types.astype(np.promote_types(view._types.dtype, types.dtype), copy=False),
                                 ins, types)
    carried = {}
    for (filters, without_derived), mask in list(view._masks.items()):  # old memories pass as they did
        fresh = np.insert(mask, ins, moved._mask(filters, without_derived, at=new_pos))
        fresh.setflags(write=False)
        moved._masks[(filters, without_derived)] = carried[id(mask)] = fresh
    for index_id, (mask, memory_of, n, passing) in list(view._passing.items()):
        if id(mask) in carried:  # each label's memory passes as it did: the new labels are added when asked
            moved._passing[index_id] = (carried[id(mask)], memory_of, n, passing)
    if view._episodes is not None:
        moved._episodes = _rechunked(_spliced(view._episodes, ins, added.select(episode_expr()).to_series()))
    if view._order is not None:
        moved._order = episode_order_inserted(view, moved, shift, new_pos)
    if view._dated is not None:
        dated = timex.dated(text)
        moved._dated = np.insert(view._dated, ins, dated)
        if view._event_s is not None:
            moved._event_s = np.insert(view._event_s, ins, timex.event_seconds(text, created, dated))


def _matches(text: pl.Series, needle: str) -> np.ndarray:
    return text.str.contains(needle, literal=True).fill_null(False).to_numpy().astype(bool)


def _accessed(view: NamespaceView, accessed: pl.DataFrame) -> None:
    """Fold newly logged accesses into ``view`` (a fresh copy: new arrays, the old left as they were)."""
    counts = accessed.group_by("memory_id").agg(pl.len().alias("n"), pl.col("accessed_at").max().alias("last"))
    at = [(view.pos.get(m), n, last) for m, n, last in counts.iter_rows()]
    at = sorted((p, n, last) for p, n, last in at if p is not None)
    if not at:
        return
    positions = np.asarray([p for p, _, _ in at], dtype=np.int64)
    view.access = view.access.copy()
    view.access[positions] += np.asarray([n for _, n, _ in at], dtype=np.int64)
    before = view.rows["accessed_at"].gather(pl.Series(positions)).to_list()
    latest = [last if old is None or (last is not None and last > old) else old
              for old, (_, _, last) in zip(before, at)]
    dtype = view.rows.schema["accessed_at"]
    view.rows = view.rows.with_columns(
        pl.Series("access_count", view.access, dtype=view.rows.schema["access_count"]),
        # a clone to scatter into: the old view's frame keeps its own values
        view.rows["accessed_at"].clone().scatter(positions, pl.Series(latest, dtype=dtype)))
    rest = view.by_access[~np.isin(view.by_access, positions)]
    view.by_access = _ordered_insert(rest, view.access, positions)


def shifter(ins: np.ndarray):
    """Old position -> new, with memories put before old positions ``ins`` (sorted)."""
    if len(ins) == 1:  # a single save: two passes over the positions (a compare, an add)
        at = int(ins[0])
        return lambda p: np.add(p, np.asarray(p) >= at)
    if len(ins) <= 8:  # one pass per insert beats a binary search per position at a few of them
        def shift(p):
            p = np.asarray(p)
            out = p.copy()
            for at in ins.tolist():
                out += p >= at
            return out
        return shift
    return lambda p: p + np.searchsorted(ins, p, side="right")


def _ordered_insert(order: np.ndarray, values: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """``order`` (positions by ``values``, largest first, ties by position) with ``positions`` put
    in their places. The binary search reads only the entries it visits: negating or casting the
    whole ``values`` array for it cost more than the search at a million memories."""
    order = np.asarray(order, dtype=np.int64)
    placed = []
    for p in np.asarray(positions).tolist():
        want = (-float(values[p]), p)
        lo, hi = 0, len(order)
        while lo < hi:
            mid = (lo + hi) // 2
            q = int(order[mid])
            if (-float(values[q]), q) < want:
                lo = mid + 1
            else:
                hi = mid
        placed.append((lo, want, p))
    placed.sort()  # two at one spot: in key order, then by position
    return np.insert(order, [at for at, _, _ in placed], [p for _, _, p in placed])


def _list_inserted(old: list, ins: np.ndarray, values: list) -> list:
    out = list(old)
    for at, value in zip(reversed(ins.tolist()), reversed(values)):
        out.insert(at, value)
    return out
