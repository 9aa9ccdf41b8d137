"""A memoised text match carried to a moved view without copying it: the match of an older view
and the moves made since, applied when a search first asks for it.

A view memoises which memories hold each name a query asked about (`NamespaceView.contains_all`):
up to `CONTAINS_MEMO_BYTES` of per-position arrays, 128 of them at a million memories. A save moves
the view on (`lab.search.view_insert`), and moving every memoised match at once copied each of
them, paid by the search right after the save whether it asked for any name or not. A match is now
moved when asked; one not asked for through `PENDING_AT_MOST` moves is dropped (scanned again when
asked), so a long run of saves never piles up moves for a name nobody asks about.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

PENDING_AT_MOST = 32  # moves a carried match waits through; past that it is dropped (scanned again when asked)

# one move of a per-position match: (the match before it, the needle) -> the match after it
Move = Callable[[np.ndarray, str], np.ndarray]


class PendingMatch:
    """The match of ``needle`` in an older view (``base``) and the ``moves`` made since, in order."""

    __slots__ = ("base", "moves")

    def __init__(self, base: np.ndarray, moves: tuple[Move, ...]) -> None:
        self.base = base
        self.moves = moves

    def resolve(self, needle: str) -> np.ndarray:
        hit = self.base
        for move in self.moves:
            hit = move(hit, needle)
        hit.setflags(write=False)
        return hit


def carried_matches(memo: dict[str, np.ndarray | PendingMatch], move: Move) -> dict[str, np.ndarray | PendingMatch]:
    """``memo`` (needle -> match, or a pending one) for the view ``move`` makes, nothing copied: each
    entry waits for its moves until asked (`resolved`). Read as a copy (``list(...)``): a search still
    running on the old view may be adding to it."""
    out: dict[str, np.ndarray | PendingMatch] = {}
    for needle, hit in list(memo.items()):
        if isinstance(hit, PendingMatch):
            if len(hit.moves) < PENDING_AT_MOST:
                out[needle] = PendingMatch(hit.base, hit.moves + (move,))
        else:
            out[needle] = PendingMatch(hit, (move,))
    return out


def resolved(memo: dict[str, np.ndarray | PendingMatch], needle: str) -> np.ndarray:
    """The match of ``needle`` in ``memo``, its pending moves applied and memoised in its place."""
    hit = memo[needle]
    if isinstance(hit, PendingMatch):
        # two searches may resolve it at once: both get the same array, one of them is kept
        hit = memo[needle] = hit.resolve(needle)
    return hit
