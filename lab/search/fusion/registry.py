"""The fuser registry: ranked-list rows (`RankedLists`), the `Fuser` interface, `register` and `get_fuser`."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lab.config import FusionConfig
from lab.errors import ValidationError


@dataclass
class RankedLists:
    """The ranked-list rows of a prepared candidate table (one row per query, memory and signal)."""

    pair: np.ndarray  # int64: index of the (query, memory) pair
    signal: np.ndarray  # int64: index into PreparedCandidates.signals
    rank: np.ndarray  # float64, 1-based
    score: np.ndarray  # float64, the signal's raw score
    list_id: np.ndarray  # int64: index of the (query, signal) list the row belongs to
    n_lists: int
    _cache: dict[str, np.ndarray] = field(default_factory=dict)

    def cached(self, name: str, fn: Callable[[], np.ndarray]) -> np.ndarray:
        """``fn()`` computed once per ``name`` for these rows.

        Per-list normalisations depend only on the rows, not on the configuration, so a sweep of
        k and weights over one prepared table computes each of them once."""
        if name not in self._cache:
            self._cache[name] = fn()
        return self._cache[name]


# A fuser maps the ranked-list rows to each row's base value (>= 0, never depending on the weights);
# a row contributes ``weight * base`` and contributions are summed per (query, memory). Keeping the
# weights out of the fusers is what lets a sweep evaluate many weightings in one pass over the same
# base values (lab.tune.batch), bit-identical to `fuse`.
FuserFn = Callable[[RankedLists, FusionConfig], np.ndarray]


@dataclass(frozen=True)
class Fuser:
    name: str
    base: FuserFn
    multiply_by_hits: bool = False  # CombMNZ: times the number of lists that hold the memory
    description: str = ""
    # base values depend on config.k (and nothing else of the config); the others depend on the rows only
    uses_k: bool = False
    # base values depend on the row's rank (and config.k) only: a sweep tabulates them per rank
    rank_only: bool = False


FUSERS: dict[str, Fuser] = {}


def register(fuser: Fuser) -> Fuser:
    """Add ``fuser`` to FUSERS under its name (a later one of the same name replaces it)."""
    FUSERS[fuser.name] = fuser
    return fuser


def get_fuser(name: str) -> Fuser:
    """The registered fuser called ``name``; ValidationError listing the known names otherwise."""
    if name not in FUSERS:
        raise ValidationError(f"unknown fusion method {name!r}; known: {sorted(FUSERS)}")
    return FUSERS[name]
