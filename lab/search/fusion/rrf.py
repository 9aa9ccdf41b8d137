"""Weighted reciprocal rank fusion: sum of w_s / (k + rank_s) over a memory's lists, rank 1-based."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion.registry import Fuser, RankedLists, register


def rrf(rows: RankedLists, w: np.ndarray, config: FusionConfig) -> np.ndarray:
    """Per row: w / (config.k + rank)."""
    return w / (config.k + rows.rank)


register(Fuser("rrf", rrf, description="weighted RRF: w / (k + rank)"))
