"""Distribution-based score fusion: scores normalised over mean +- 3 sigma of their list, clipped."""
from __future__ import annotations

import polars as pl

from lab.config import FusionConfig
from lab.search.fusion import Fuser, register


def dbsf(ranked: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    mean = pl.col("score").mean().over("qid", "signal")
    std = pl.col("score").std(ddof=0).over("qid", "signal")
    lo, hi = mean - 3 * std, mean + 3 * std
    norm = pl.when(std > 0).then(((pl.col("score") - lo) / (hi - lo)).clip(0.0, 1.0)).otherwise(1.0)
    return ranked.with_columns((pl.col("w") * norm).alias("contribution"))


register(Fuser("dbsf", dbsf, description="w * clip((s - (mu - 3 sigma)) / 6 sigma, 0, 1)"))
