"""CombMNZ: the sum of weighted min-max normalised scores times the number of lists holding the memory."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion import Fuser, RankedLists, register


def combmnz(rows: RankedLists, w: np.ndarray, config: FusionConfig) -> np.ndarray:
    return w * rows.minmax()


register(Fuser("combmnz", combmnz, multiply_by_hits=True, description="(sum of w * minmax) x hits"))
