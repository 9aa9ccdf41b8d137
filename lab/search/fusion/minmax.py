"""Weighted sum of min-max normalised scores (MAIA's code): w_s * (s - min_s) / (max_s - min_s)."""
from __future__ import annotations

import polars as pl

from lab.config import FusionConfig
from lab.search.fusion import Fuser, register


def minmax_norm() -> pl.Expr:
    """Per (qid, signal): 0 at the list's minimum, 1 at its maximum; a flat list counts as 1."""
    lo = pl.col("score").min().over("qid", "signal")
    hi = pl.col("score").max().over("qid", "signal")
    return pl.when(hi > lo).then((pl.col("score") - lo) / (hi - lo)).otherwise(1.0)


def weighted_sum(ranked: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    return ranked.with_columns((pl.col("w") * minmax_norm()).alias("contribution"))


register(Fuser("weighted_sum", weighted_sum, description="sum of w * min-max normalised score"))
