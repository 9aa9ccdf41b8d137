"""Distribution-based score fusion: scores normalised over mean +- 3 sigma of their list, clipped."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion import Fuser, RankedLists, register


def dbsf(rows: RankedLists, w: np.ndarray, config: FusionConfig) -> np.ndarray:
    return w * rows.dbsf()


register(Fuser("dbsf", dbsf, description="w * clip((s - (mu - 3 sigma)) / 6 sigma, 0, 1)"))
