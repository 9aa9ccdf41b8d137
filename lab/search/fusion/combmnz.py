"""CombMNZ: the sum of weighted min-max normalised scores times the number of lists holding the memory."""
from __future__ import annotations

import polars as pl

from lab.config import FusionConfig
from lab.search.fusion import Fuser, register
from lab.search.fusion.minmax import minmax_norm


def combmnz(ranked: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    return ranked.with_columns((pl.col("w") * minmax_norm()).alias("contribution"))


register(Fuser("combmnz", combmnz, multiply_by_hits=True, description="(sum of w * minmax) x hits"))
