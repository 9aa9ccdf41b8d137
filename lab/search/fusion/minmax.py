"""Min-max fusion (MAIA's code): weighted_sum = sum of w_s * (s - min_l) / (max_l - min_l) over a memory's (query, signal) lists."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion.registry import Fuser, RankedLists, register


def minmax_normalise(rows: RankedLists) -> np.ndarray:
    """Per (query, signal) list: 0 at its minimum score, 1 at its maximum; a flat list counts as 1.

    Memoised on ``rows`` (shared with CombMNZ)."""
    def compute() -> np.ndarray:
        lo = np.full(rows.n_lists, np.inf)
        hi = np.full(rows.n_lists, -np.inf)
        np.minimum.at(lo, rows.list_id, rows.score)
        np.maximum.at(hi, rows.list_id, rows.score)
        lo_r, hi_r = lo[rows.list_id], hi[rows.list_id]
        span = hi_r - lo_r
        out = np.ones(len(rows.score))
        ok = span > 0
        out[ok] = (rows.score[ok] - lo_r[ok]) / span[ok]
        return out
    return rows.cached("minmax", compute)


def weighted_sum(rows: RankedLists, config: FusionConfig) -> np.ndarray:
    """Per row: its min-max normalised score. (the row contributes w times it)."""
    return minmax_normalise(rows)


register(Fuser("weighted_sum", weighted_sum, description="sum of w * min-max normalised score"))
