"""Fusion: a registry of fusers with one interface, and the vectorised `fuse` over candidates."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import polars as pl

from lab.config import FusionConfig
from lab.errors import ValidationError
from lab.search.analysis import INTENT_WEIGHT_SCALES, INTENTS

# A fuser maps the ranked-list rows (qid, memory_id, signal, rank, score, w) to the same rows
# with a `contribution` column; contributions are summed per (qid, memory_id).
FuserFn = Callable[[pl.DataFrame, FusionConfig], pl.DataFrame]


@dataclass(frozen=True)
class Fuser:
    name: str
    fn: FuserFn
    multiply_by_hits: bool = False  # CombMNZ: times the number of lists that hold the memory
    description: str = ""


FUSERS: dict[str, Fuser] = {}


def register(fuser: Fuser) -> Fuser:
    FUSERS[fuser.name] = fuser
    return fuser


def get_fuser(name: str) -> Fuser:
    if name not in FUSERS:
        raise ValidationError(f"unknown fusion method {name!r}; known: {sorted(FUSERS)}")
    return FUSERS[name]


from lab.search.fusion import combmnz, dbsf, minmax, rrf  # noqa: E402,F401  (they register)

RESULT_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "rank": pl.Int32, "score": pl.Float64}


def _weights(ranked: pl.DataFrame, features: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    weights = pl.DataFrame(
        {"signal": list(config.weights), "w": [float(v) for v in config.weights.values()]},
        schema={"signal": pl.String, "w": pl.Float64},
    )
    ranked = ranked.join(weights, on="signal", how="left").with_columns(pl.col("w").fill_null(1.0))
    if config.intent_gating:
        intents = features.filter(pl.col("signal") == "_intent").select(
            "qid", pl.col("score").cast(pl.Int32).alias("_i")
        )
        scales = pl.DataFrame(
            [(i, s, f) for i, name in enumerate(INTENTS) for s, f in INTENT_WEIGHT_SCALES[name].items()],
            schema={"_i": pl.Int32, "signal": pl.String, "_scale": pl.Float64}, orient="row",
        )
        ranked = (
            ranked.join(intents, on="qid", how="left")
            .join(scales, on=["_i", "signal"], how="left")
            .with_columns((pl.col("w") * pl.col("_scale").fill_null(1.0)).alias("w"))
            .drop("_i", "_scale")
        )
    return ranked.filter(pl.col("w") != 0)


def fuse_detailed(
    candidates: pl.DataFrame, config: FusionConfig, *, top_k: int | None = -1
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ranked results, per-signal contributions). ``top_k=-1`` uses config.top_k, None keeps all."""
    fuser = get_fuser(config.method)
    is_feature = pl.col("signal").str.starts_with("_")
    ranked = candidates.filter(~is_feature)
    features = candidates.filter(is_feature)
    ranked = _weights(ranked, features, config)
    contrib = fuser.fn(ranked, config).select("qid", "memory_id", "signal", "rank", "score", "contribution")
    # a fixed summation order makes fused scores bit-identical whatever the input row order
    contrib = contrib.sort("qid", "memory_id", "signal")
    fused = contrib.group_by("qid", "memory_id").agg(
        pl.col("contribution").sum().alias("score"), pl.len().alias("_hits")
    )
    if fuser.multiply_by_hits:
        fused = fused.with_columns(pl.col("score") * pl.col("_hits"))
    fused = fused.drop("_hits")
    needed = [name for name, on in (
        ("_coverage", bool(config.coverage_bonus)), ("_age_hours", config.recent_boost != 1.0),
        ("_superseded", config.superseded != "keep"), ("_cosine", config.rerank_depth > 0),
    ) if on]
    # join only the features this configuration uses: most sweeps need one or two of them
    present: set[str] = set()
    if needed and features.height:
        wanted = features.filter(pl.col("signal").is_in(needed))
        for name in needed:
            column = wanted.filter(pl.col("signal") == name).select("qid", "memory_id", pl.col("score").alias(name))
            if column.height:
                fused = fused.join(column, on=["qid", "memory_id"], how="left")
                present.add(name)

    def feature(name: str, default: float) -> pl.Expr:
        return pl.col(name).fill_null(default) if name in present else pl.lit(default)

    post = pl.col("score")
    if config.coverage_bonus:
        # multiplicative, so the bonus can never outweigh the fused score it scales
        post = post * (1.0 + config.coverage_bonus * feature("_coverage", 0.0))
    if config.recent_boost != 1.0:
        post = pl.when(feature("_age_hours", 1e18) < config.recent_hours).then(post * config.recent_boost).otherwise(post)
    if config.superseded == "demote":
        post = pl.when(feature("_superseded", 0.0) > 0).then(post * config.demote_factor).otherwise(post)
    fused = fused.with_columns(post.alias("score"))
    if config.superseded == "hide":
        fused = fused.filter(feature("_superseded", 0.0) == 0)
    if config.rerank_depth > 0:
        fused = _rerank(fused, config.rerank_depth, feature("_cosine", 0.0))
    fused = fused.sort(["qid", "score", "memory_id"], descending=[False, True, False]).with_columns(
        pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("qid").alias("rank")
    )
    k = config.top_k if top_k == -1 else top_k
    if k is not None:
        fused = fused.filter(pl.col("rank") <= k)
    return fused.select(list(RESULT_SCHEMA)), contrib


def _rerank(fused: pl.DataFrame, depth: int, cosine: pl.Expr) -> pl.DataFrame:
    """Re-order each query's top ``depth`` by query-memory cosine; they stay above the rest."""
    fused = fused.sort(["qid", "score", "memory_id"], descending=[False, True, False]).with_columns(
        pl.int_range(1, pl.len() + 1).over("qid").alias("_r")
    )
    top_max = fused.group_by("qid").agg(pl.col("score").max().alias("_max"))
    fused = fused.join(top_max, on="qid")
    # reranked items get scores above every non-reranked one: max + 1 + cosine
    return fused.with_columns(
        pl.when(pl.col("_r") <= depth).then(pl.col("_max").abs() + 1.0 + cosine).otherwise(pl.col("score")).alias("score")
    ).drop("_r", "_max")


def fuse(candidates: pl.DataFrame, config: FusionConfig) -> pl.DataFrame:
    """Pure and vectorised: candidates -> ranked results ``(qid, memory_id, rank, score)``, top_k per query.

    Ties break on (-score, memory_id).
    """
    return fuse_detailed(candidates, config)[0]
