"""Distribution-based score fusion: sum of w_s * clip((s - (mu_l - 3 sd_l)) / (6 sd_l), 0, 1) over a memory's (query, signal) lists."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion.registry import Fuser, RankedLists, register


def dbsf_normalise(rows: RankedLists) -> np.ndarray:
    """Per list: clip((s - (mean - 3 sd)) / (6 sd), 0, 1); a flat list counts as 1.

    sd is the population standard deviation (divided by n). Memoised on ``rows``."""
    def compute() -> np.ndarray:
        n = np.bincount(rows.list_id, minlength=rows.n_lists).astype(np.float64)
        mean = np.bincount(rows.list_id, rows.score, minlength=rows.n_lists) / np.maximum(n, 1)
        dev = rows.score - mean[rows.list_id]
        var = np.bincount(rows.list_id, dev * dev, minlength=rows.n_lists) / np.maximum(n, 1)
        sd = np.sqrt(var)[rows.list_id]
        out = np.ones(len(rows.score))
        ok = sd > 0
        out[ok] = np.clip((dev[ok] + 3 * sd[ok]) / (6 * sd[ok]), 0.0, 1.0)
        return out
    return rows.cached("dbsf", compute)


def dbsf(rows: RankedLists, config: FusionConfig) -> np.ndarray:
    """Per row: its distribution-normalised score. (the row contributes w times it)."""
    return dbsf_normalise(rows)


register(Fuser("dbsf", dbsf, description="w * clip((s - (mu - 3 sigma)) / 6 sigma, 0, 1)"))
