"""Weighted reciprocal rank fusion: sum over signals of w_s / (k + rank_s), rank 1-based."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion import Fuser, RankedLists, register


def rrf(rows: RankedLists, w: np.ndarray, config: FusionConfig) -> np.ndarray:
    return w / (config.k + rows.rank)


register(Fuser("rrf", rrf, description="weighted RRF: w / (k + rank)"))
