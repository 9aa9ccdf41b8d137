"""The namespaces a process keeps open: their array views and indexes, at most ``cap`` of each,
the least recently used closed first.

A store of many small namespaces (one per user or agent) would otherwise hold every namespace
ever searched until the process ends: a server's memory would grow with the namespace count, not
with what it serves. Closing one only forgets it here; the store is the truth, and the next use
loads the namespace's snapshot again. A search already holding a closed namespace's view and
index keeps them (references, not copies) and answers from them."""
from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, Iterator, TypeVar

from lab.errors import ValidationError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LeastRecentlyUsed(Generic[K, V]):
    """A mapping of at most ``cap`` entries: reading one (``get``, ``[]``) or setting one makes it
    the most recent; setting one past the cap closes the least recent. ``keys``, ``values`` and
    ``items`` are copies (safe to iterate while reading). Not locked: its owners hold their own
    lock around it."""

    def __init__(self, cap: int) -> None:
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValidationError(f"open_namespaces must be a whole number >= 1, got {cap!r}", field="open_namespaces")
        self.cap = cap
        self.closed = 0  # how many were closed for room, over the owner's life
        self._entries: OrderedDict[K, V] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._entries))

    def keys(self) -> list[K]:
        return list(self._entries)

    def values(self) -> list[V]:
        return list(self._entries.values())

    def items(self) -> list[tuple[K, V]]:
        return list(self._entries.items())

    def __getitem__(self, key: K) -> V:
        value = self._entries[key]
        self._entries.move_to_end(key)
        return value

    def get(self, key: K, default: V | None = None) -> V | None:
        if key not in self._entries:
            return default
        return self[key]

    def __setitem__(self, key: K, value: V) -> None:
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.cap:
            self._entries.popitem(last=False)
            self.closed += 1

    def pop(self, key: K, default: V | None = None) -> V | None:
        return self._entries.pop(key, default)

    def clear(self) -> None:
        self._entries.clear()
