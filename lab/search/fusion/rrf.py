"""Weighted reciprocal rank fusion: sum over signals of w_s / (k + rank_s), rank 1-based."""
from __future__ import annotations

import polars as pl

from lab.config import FusionConfig
from lab.search.fusion import Fuser, register


def rrf(ranked: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    return ranked.with_columns((pl.col("w") / (config.k + pl.col("rank").cast(pl.Float64))).alias("contribution"))


register(Fuser("rrf", rrf, description="weighted RRF: w / (k + rank)"))
