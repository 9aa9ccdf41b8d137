"""CombMNZ: (sum of w_s * minmax_l(s) over a memory's lists) x hits, the number of nonzero-weight lists holding it."""
from __future__ import annotations

import numpy as np

from lab.config import FusionConfig
from lab.search.fusion.minmax import minmax_normalise
from lab.search.fusion.registry import Fuser, RankedLists, register


def combmnz(rows: RankedLists, config: FusionConfig) -> np.ndarray:
    """Per row: its min-max normalised score (the hits factor is applied per memory by `fuse`). (the row contributes w times it)."""
    return minmax_normalise(rows)


register(Fuser("combmnz", combmnz, multiply_by_hits=True, description="(sum of w * minmax) x hits"))
