"""Weighted reciprocal rank fusion: sum of w_s / (k + rank_s) over a memory's lists, rank 1-based."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion.registry import Fuser, RankedLists, register


def rrf(rows: RankedLists, config: FusionConfig) -> np.ndarray:
    """Per row: 1 / (config.k + rank); the row contributes w times it."""
    return 1.0 / (config.k + rows.rank)


register(Fuser("rrf", rrf, description="weighted RRF: w / (k + rank)", uses_k=True, rank_only=True))
