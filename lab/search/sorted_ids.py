"""A namespace view's memory ids in sorted order (position -> id) and the reverse lookup (id -> position).

A view moved on by a save (``lab.search.view_insert``) gains a few ids at their sorted places. Copying
a list of a million ids for that (and freeing the old one once no search holds it) cost 15 ms a save.
So the ids are a base list, shared by every view moved on from the one that read it, plus the few
ids inserted since, kept apart with their positions; past ``MERGE_FROM`` of those, one merged list is
made again.
"""
from __future__ import annotations

from bisect import bisect_left
from heapq import merge
from typing import Iterator, Sequence

import numpy as np

MERGE_FROM = 1024  # ids inserted beside the base list before one merged list is made


class SortedIds(Sequence[str]):
    """Sorted memory ids: ``base`` (never changed: other views share it) with ``added`` merged in."""

    __slots__ = ("base", "added", "added_at")

    def __init__(self, base: list[str], added: list[str] | None = None) -> None:
        self.base = base
        self.added = added or []  # sorted; none of them is in base
        # positions of the added ids in the merged order: the base ids before one, plus its rank
        self.added_at = np.asarray([bisect_left(base, m) + i for i, m in enumerate(self.added)], dtype=np.int64)

    def __len__(self) -> int:
        return len(self.base) + len(self.added)

    def __getitem__(self, p):
        if not self.added:
            return self.base[p]
        if isinstance(p, slice):
            return self.tolist()[p]
        if p < 0:
            p += len(self)
        a = int(np.searchsorted(self.added_at, p))  # added ids before position p
        if a < len(self.added) and self.added_at[a] == p:
            return self.added[a]
        return self.base[p - a]

    def take(self, positions: Sequence[int]) -> list[str]:
        """The ids at ``positions`` (a list of ints): one vectorised lookup, not one call each."""
        if not self.added:
            base = self.base
            return [base[p] for p in positions]
        at = np.asarray(positions, dtype=np.int64)
        a = np.searchsorted(self.added_at, at)
        hit = (a < len(self.added)) & (self.added_at[np.minimum(a, len(self.added) - 1)] == at)
        base, added = self.base, self.added
        return [added[j] if h else base[p - j] for p, j, h in zip(at.tolist(), a.tolist(), hit.tolist())]

    def position(self, memory_id: str) -> int | None:
        """Where ``memory_id`` is, or None."""
        b = bisect_left(self.base, memory_id)
        if not self.added:
            return b if b < len(self.base) and self.base[b] == memory_id else None
        a = bisect_left(self.added, memory_id)
        if (b < len(self.base) and self.base[b] == memory_id) or (a < len(self.added) and self.added[a] == memory_id):
            return a + b
        return None

    def insertion_point(self, memory_id: str) -> int:
        """The position ``memory_id`` would take (``bisect_left`` over the merged order)."""
        return bisect_left(self.base, memory_id) + (bisect_left(self.added, memory_id) if self.added else 0)

    def inserted(self, new_ids: list[str]) -> "SortedIds":
        """These ids with ``new_ids`` (sorted, none already here) put in their places; this object unchanged."""
        grown = SortedIds(self.base, list(merge(self.added, new_ids)))
        return SortedIds(grown.tolist()) if len(grown.added) > MERGE_FROM else grown

    def removed(self, gone: set[str]) -> "SortedIds":
        """These ids without those in ``gone`` (each one here); this object unchanged. Ids inserted
        beside the base leave that short list; a base id costs one copy of the base list."""
        added = [m for m in self.added if m not in gone]
        at = sorted(bisect_left(self.base, m) for m in gone if m not in self.added)
        if not at:
            return SortedIds(self.base, added)
        base = list(self.base)
        for p in reversed(at):
            del base[p]
        return SortedIds(base, added)

    def tolist(self) -> list[str]:
        """The merged list (slices of the base between the added ids: copies at C speed)."""
        if not self.added:
            return list(self.base)
        out: list[str] = []
        prev = 0
        for rank, m in zip((self.added_at - np.arange(len(self.added))).tolist(), self.added):
            out.extend(self.base[prev:rank])
            out.append(m)
            prev = rank
        out.extend(self.base[prev:])
        return out

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist()) if self.added else iter(self.base)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SortedIds):
            other = other.tolist()
        return isinstance(other, list) and self.tolist() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SortedIds({len(self)} ids, {len(self.added)} inserted beside the base)"


class Positions:
    """Memory id -> position, by binary search over the view's sorted ids: a view moved on by a
    save (``lab.search.view_insert``) shares nothing to rebuild, where a dictionary of a million
    ids cost 0.4 s a view."""

    __slots__ = ("ids",)

    def __init__(self, ids: SortedIds) -> None:
        self.ids = ids

    def get(self, memory_id: str, default: int | None = None) -> int | None:
        at = self.ids.position(memory_id)
        return default if at is None else at

    def __getitem__(self, memory_id: str) -> int:
        at = self.ids.position(memory_id)
        if at is None:
            raise KeyError(memory_id)
        return at

    def __contains__(self, memory_id: object) -> bool:
        return isinstance(memory_id, str) and self.ids.position(memory_id) is not None

    def __len__(self) -> int:
        return len(self.ids)
