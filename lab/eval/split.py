"""The overfitting guard: questions split into tune and validation parts, by group, seeded.

Where a dataset has several conversations (namespaces), whole conversations go to one side, so a
configuration chosen on tune is judged on conversations it never saw; otherwise questions are
split one by one. The same seed gives the same split.
"""
from __future__ import annotations

import numpy as np
import polars as pl

MIN_GROUPS = 3  # fewer namespaces than this: split by question


def split_questions(questions: pl.DataFrame, share: float, seed: int = 0) -> pl.DataFrame:
    """(qid, group, part) with part "tune" or "validation"; about ``share`` of questions validate."""
    q = questions.select("qid", "namespace").sort("qid")
    by_namespace = q["namespace"].n_unique() >= MIN_GROUPS
    q = q.with_columns((pl.col("namespace") if by_namespace else pl.col("qid")).alias("group"))
    if share <= 0 or q.height < 2:
        return q.select("qid", "group", pl.lit("tune").alias("part"))
    sizes = q.group_by("group").len().sort("group")
    order = np.random.default_rng(seed).permutation(sizes.height)
    target = share * q.height
    chosen, taken = [], 0
    for i in order.tolist():
        if len(chosen) == sizes.height - 1:  # tune always keeps at least one group
            break
        size = int(sizes["len"][i])
        if abs(taken + size - target) < abs(taken - target):  # only groups that bring the share closer
            chosen.append(sizes["group"][i])
            taken += size
    return q.select("qid", "group", pl.when(pl.col("group").is_in(chosen)).then(pl.lit("validation"))
                    .otherwise(pl.lit("tune")).alias("part"))
