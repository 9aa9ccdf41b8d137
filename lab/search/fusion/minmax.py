"""Weighted sum of min-max normalised scores (MAIA's code): w_s * (s - min_s) / (max_s - min_s)."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion import Fuser, RankedLists, register


def weighted_sum(rows: RankedLists, w: np.ndarray, config: FusionConfig) -> np.ndarray:
    return w * rows.minmax()


register(Fuser("weighted_sum", weighted_sum, description="sum of w * min-max normalised score"))
