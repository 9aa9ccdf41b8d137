"""Retrieval metrics over polars run/qrels tables, bootstrap CIs and paired randomization tests."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np
import polars as pl

from lab.config import DEFAULT_KS  # declared once, at the bottom layer; re-exported here
from lab.errors import ValidationError

METRICS: tuple[str, ...] = ("recall", "hit", "precision", "mrr", "ndcg")
# Resampling draws this many values per chunk at most, so 10,000 questions x 10,000
# resamples stays within ~64 MB instead of materialising a 800 MB index matrix.
_CHUNK_CELLS = 8_000_000


def _require_columns(df: pl.DataFrame, name: str, columns: Iterable[str]) -> None:
    if not isinstance(df, pl.DataFrame):
        raise ValidationError(f"{name} must be a polars DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValidationError(f"{name} lacks column(s) {missing}; it has {df.columns}")


def _require_no_nulls(df: pl.DataFrame, name: str) -> None:
    counts = df.null_count().row(0, named=True)
    bad = {c: n for c, n in counts.items() if n}
    if bad:
        raise ValidationError(f"{name} has null values in {bad}")


def _require_unique(df: pl.DataFrame, name: str, keys: list[str]) -> None:
    # Cheap yes/no first; the group_by that names the offender runs only on failure.
    if not df.height or not df.select(pl.struct(keys).is_duplicated().any()).item():
        return
    dup = df.group_by(keys).len().filter(pl.col("len") > 1).sort(keys)
    if dup.height:
        first = dup.row(0, named=True)
        raise ValidationError(
            f"{name} repeats ({', '.join(keys)}) = {tuple(first[k] for k in keys)!r} "
            f"{first['len']} times ({dup.height} duplicated key(s) in all)"
        )


def _check_ks(ks: Sequence[int]) -> list[int]:
    if isinstance(ks, (int, str)) or not isinstance(ks, Iterable):
        raise ValidationError(f"ks must be a sequence of positive ints, got {ks!r}")
    out = []
    for k in ks:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValidationError(f"every k must be an int >= 1, got {k!r} in ks={ks!r}")
        out.append(int(k))
    if not out:
        raise ValidationError("ks is empty: give at least one cutoff")
    # Sorted and de-duplicated so the column order does not depend on how ks was spelled.
    return sorted(set(out))


def _check_metrics(metrics: Sequence[str]) -> list[str]:
    if isinstance(metrics, str) or not isinstance(metrics, Iterable):
        raise ValidationError(f"metrics must be a sequence of names, got {metrics!r}")
    chosen = list(metrics)
    unknown = [m for m in chosen if m not in METRICS]
    if unknown:
        raise ValidationError(f"unknown metric(s) {unknown}; known: {list(METRICS)}")
    if not chosen:
        raise ValidationError(f"metrics is empty: choose from {list(METRICS)}")
    # Canonical order keeps output columns stable whatever order the caller used.
    return [m for m in METRICS if m in chosen]


def metric_columns(ks: Sequence[int] = DEFAULT_KS, metrics: Sequence[str] = METRICS) -> list[str]:
    """The per-query column names retrieval_metrics produces for these ks and metrics, in order."""
    ks_ = _check_ks(ks)
    cols: list[str] = []
    for m in _check_metrics(metrics):
        cols.extend([m] if m == "mrr" else [f"{m}@{k}" for k in ks_])
    return cols


def _id_table(frame: pl.DataFrame, name: str, int_column: str) -> pl.DataFrame:
    """(qid, memory_id, ``int_column``), checked: columns present, no nulls, an integer column, ids as strings."""
    _require_columns(frame, name, ("qid", "memory_id", int_column))
    out = frame.select("qid", "memory_id", int_column)
    _require_no_nulls(out, name)
    if not out.schema[int_column].is_integer():
        raise ValidationError(f"{name}.{int_column} must be integer, got dtype {out.schema[int_column]}")
    return out.with_columns(pl.col("qid").cast(pl.String), pl.col("memory_id").cast(pl.String))


def _prepare_qrels(qrels: pl.DataFrame) -> pl.DataFrame:
    q = _id_table(qrels, "qrels", "relevance")
    _require_unique(q, "qrels", ["qid", "memory_id"])
    # Judgements below 1 (judged non-relevant) neither count as hits nor add to the ideal DCG.
    return q.filter(pl.col("relevance") >= 1).with_columns(pl.col("relevance").cast(pl.Float64))


def _prepare_run(run: pl.DataFrame) -> pl.DataFrame:
    r = _id_table(run, "run", "rank")
    if r.height and r["rank"].min() < 1:
        bad = r.filter(pl.col("rank") < 1).sort("qid", "rank", "memory_id").row(0, named=True)
        raise ValidationError(
            f"run.rank is 1-based; got rank {bad['rank']} for {bad['qid']!r}/{bad['memory_id']!r}"
        )
    # A memory listed twice for one query would be counted as two hits.
    _require_unique(r, "run", ["qid", "memory_id"])
    # Positions come from rank order, not rank values, so gaps (after filtering) are harmless;
    # equal ranks are broken by memory_id to keep the result deterministic.
    return r.sort("qid", "rank", "memory_id").with_columns(
        pos=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid")
    )


def _gain_sums(ks: list[int], need_ndcg: bool) -> list[pl.Expr]:
    """Per-qid aggregation expressions over hit rows (pos, relevance) for every cutoff."""
    exprs: list[pl.Expr] = []
    for k in ks:
        exprs.append((pl.col("pos") <= k).sum().cast(pl.Float64).alias(f"_hits@{k}"))
        if need_ndcg:
            discounted = pl.col("relevance") / (pl.col("pos").cast(pl.Float64) + 1.0).log(2)
            exprs.append(discounted.filter(pl.col("pos") <= k).sum().alias(f"_dcg@{k}"))
    return exprs


def retrieval_metrics(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    ks: Sequence[int] = DEFAULT_KS,
    metrics: Sequence[str] = METRICS,
) -> pl.DataFrame:
    """Per-query recall@k, hit@k, precision@k, mrr and ndcg@k; one row per qid with a relevant judgement.

    run: qid, memory_id, rank (1-based; order defines the ranking). qrels: qid, memory_id,
    relevance (>= 1 relevant, graded). Queries whose qrels hold no relevance >= 1 are left out
    (every metric would divide by zero); queries absent from the run score 0; run rows of
    queries absent from the qrels are ignored. ndcg uses gain = relevance and a log2(pos+1)
    discount with the ideal DCG taken from the qrels (Järvelin & Kekäläinen, as trec_eval and ranx).
    """
    ks_ = _check_ks(ks)
    chosen = _check_metrics(metrics)
    q = _prepare_qrels(qrels)
    r = _prepare_run(run)

    per_q = q.group_by("qid").agg(pl.len().cast(pl.Float64).alias("_n_rel"))
    # Only retrieved-and-relevant rows affect any of these metrics, so an inner join leaves a
    # table far smaller than the run.
    hits = r.join(q, on=["qid", "memory_id"], how="inner")
    need_ndcg = "ndcg" in chosen
    agg = _gain_sums(ks_, need_ndcg) + [pl.col("pos").min().alias("_first")]
    out = per_q.join(hits.group_by("qid").agg(agg), on="qid", how="left")

    if need_ndcg:
        ideal = q.sort(["qid", "relevance"], descending=[False, True]).with_columns(
            pos=pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid")
        )
        idcg = ideal.group_by("qid").agg(
            [
                (pl.col("relevance") / (pl.col("pos").cast(pl.Float64) + 1.0).log(2))
                .filter(pl.col("pos") <= k)
                .sum()
                .alias(f"_idcg@{k}")
                for k in ks_
            ]
        )
        out = out.join(idcg, on="qid", how="left")

    cols: list[pl.Expr] = []
    for m in chosen:
        if m == "mrr":
            # No hit anywhere in the run -> null first position -> reciprocal rank 0.
            cols.append((1.0 / pl.col("_first").cast(pl.Float64)).fill_null(0.0).alias("mrr"))
            continue
        for k in ks_:
            h = pl.col(f"_hits@{k}").fill_null(0.0)
            if m == "recall":
                expr = h / pl.col("_n_rel")
            elif m == "hit":
                expr = (h > 0).cast(pl.Float64)
            elif m == "precision":
                expr = h / float(k)
            else:  # ndcg; the ideal DCG is > 0 because every kept query has a relevant item
                expr = pl.col(f"_dcg@{k}").fill_null(0.0) / pl.col(f"_idcg@{k}")
            cols.append(expr.alias(f"{m}@{k}"))
    return out.select(pl.col("qid"), *cols).sort("qid")


def _metric_names(per_query: pl.DataFrame) -> list[str]:
    return [c for c, t in per_query.schema.items() if c != "qid" and t.is_numeric()]


def mean_metrics(per_query: pl.DataFrame) -> dict[str, float]:
    """Mean of every numeric metric column of a per-query table (qid excluded)."""
    _require_columns(per_query, "per_query", ("qid",))
    if per_query.height == 0:
        raise ValidationError("per_query has no rows: cannot average metrics over zero questions")
    names = _metric_names(per_query)
    means = per_query.select(pl.col(names).cast(pl.Float64).mean()).row(0, named=True)
    return {n: float(means[n]) for n in names}


def by_category(per_query: pl.DataFrame, categories: pl.DataFrame) -> pl.DataFrame:
    """Mean of each metric per category plus the question count n, sorted by category."""
    _require_columns(per_query, "per_query", ("qid",))
    _require_columns(categories, "categories", ("qid", "category"))
    cats = categories.select(pl.col("qid").cast(pl.String), "category")
    _require_no_nulls(cats, "categories")
    _require_unique(cats, "categories", ["qid"])
    pq = per_query.with_columns(pl.col("qid").cast(pl.String))
    # A question without a category would silently vanish from every group.
    missing = pq.join(cats, on="qid", how="anti").sort("qid")
    if missing.height:
        raise ValidationError(
            f"{missing.height} qid(s) have no category, e.g. {missing['qid'].head(5).to_list()}"
        )
    names = _metric_names(per_query)
    joined = pq.join(cats, on="qid", how="inner")
    return (
        joined.group_by("category")
        .agg(pl.len().alias("n"), *[pl.col(n).cast(pl.Float64).mean() for n in names])
        .sort("category")
    )


def _as_vector(values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValidationError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise ValidationError(f"{name} is empty: need at least one value")
    if not np.all(np.isfinite(arr)):
        first = arr[~np.isfinite(arr)][0]
        raise ValidationError(f"{name} holds non-finite values (NaN or inf), e.g. {first!r}")
    return arr


def _check_resamples(n_resamples: int) -> int:
    if isinstance(n_resamples, bool) or not isinstance(n_resamples, (int, np.integer)) or n_resamples < 1:
        raise ValidationError(f"n_resamples must be an int >= 1, got {n_resamples!r}")
    return int(n_resamples)


def _chunks(n_resamples: int, n: int) -> Iterable[int]:
    size = max(1, _CHUNK_CELLS // n)
    done = 0
    while done < n_resamples:
        step = min(size, n_resamples - done)
        yield step
        done += step


def _resample_counts(n: int, n_resamples: int, seed: int) -> Iterable[np.ndarray]:
    """Seeded blocks of resample counts (resamples x questions): row r says how often each
    question is drawn in resample r. Small matrices are memoised, so every metric and every preset
    evaluated on the same questions share one draw (paired resamples, and no redrawing)."""
    if n * n_resamples <= _CHUNK_CELLS:
        yield _resample_matrix(n, n_resamples, seed)
        return
    rng = np.random.default_rng(seed)
    for step in _chunks(n_resamples, n):
        yield rng.multinomial(n, np.full(n, 1.0 / n), size=step).astype(np.float64)


@lru_cache(maxsize=4)
def _resample_matrix(n: int, n_resamples: int, seed: int) -> np.ndarray:
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(np.float64)
    counts.flags.writeable = False
    return counts


def resample_counts(n: int, n_resamples: int = 1000, seed: int = 0) -> np.ndarray:
    """The whole seeded resample-count matrix `bootstrap_cis` draws (resamples x questions), for a
    caller that bootstraps the same questions many times (an interactive session)."""
    return np.vstack(list(_resample_counts(n, _check_resamples(n_resamples), seed)))


def bootstrap_cis(
    values: np.ndarray, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0,
    counts: np.ndarray | None = None,
) -> list[tuple[float, float, float]]:
    """(mean, low, high) per column of ``values`` (questions x metrics): the sample mean and its
    percentile-bootstrap confidence interval. One matrix of resample counts times the values
    gives every column's resampled means at once (no resampling pass per metric). ``counts``: the
    matrix of `resample_counts` for these arguments, when the caller keeps it."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 2:
        raise ValidationError(f"values must be two-dimensional (questions x metrics), got shape {arr.shape}")
    if arr.shape[0] == 0:
        raise ValidationError("values is empty: need at least one question")
    if not np.all(np.isfinite(arr)):
        raise ValidationError(f"values holds non-finite values (NaN or inf), e.g. {arr[~np.isfinite(arr)][0]!r}")
    n_resamples = _check_resamples(n_resamples)
    if not (0.0 < confidence < 1.0):
        raise ValidationError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    n = arr.shape[0]
    if counts is not None and counts.shape != (n_resamples, n):
        raise ValidationError(f"counts must be {n_resamples} resamples x {n} questions, got shape {counts.shape}")
    blocks = [counts] if counts is not None else _resample_counts(n, n_resamples, seed)
    means = np.vstack([c @ arr / n for c in blocks])
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha], axis=0)
    return [(float(arr[:, j].mean()), float(low[j]), float(high[j])) for j in range(arr.shape[1])]


def bootstrap_ci(
    values: np.ndarray, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float, float]:
    """(mean, low, high) of one vector of per-question values (see ``bootstrap_cis``)."""
    arr = _as_vector(values, "values")
    return bootstrap_cis(arr[:, None], n_resamples, confidence, seed)[0]


def paired_randomization_test(
    a: np.ndarray, b: np.ndarray, n_resamples: int = 10000, seed: int = 0
) -> float:
    """Two-sided p-value of mean(a - b) under random sign flips of the per-question differences."""
    x = _as_vector(a, "a")
    y = _as_vector(b, "b")
    if x.size != y.size:
        raise ValidationError(f"a and b must be aligned on the same questions: lengths {x.size} != {y.size}")
    n_resamples = _check_resamples(n_resamples)
    d = x - y
    n = d.size
    observed = abs(d.mean())
    # Sign-flipped means equal to the observed one up to rounding must count as "as extreme",
    # otherwise identical runs (all differences 0) could report p < 1.
    tol = 1e-12 * max(1.0, float(np.abs(d).max()))
    rng = np.random.default_rng(seed)
    count = 0
    for step in _chunks(n_resamples, n):
        signs = rng.integers(0, 2, size=(step, n), dtype=np.int8) * 2 - 1
        flipped = np.abs(signs @ d) / n
        count += int(np.count_nonzero(flipped >= observed - tol))
    # The observed assignment is one of the possible flips, hence the +1s (never p = 0).
    return (count + 1) / (n_resamples + 1)


def compare_runs(
    per_query_a: pl.DataFrame,
    per_query_b: pl.DataFrame,
    metrics: list[str],
    n_resamples: int = 10000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """Paired comparison of two per-query tables on their common qids, one row per metric.

    Columns: metric, n (common questions), mean_a, mean_b, delta = mean_b - mean_a,
    delta_low/delta_high (percentile bootstrap CI of the paired differences b - a) and
    p_value (paired randomization test).
    """
    if isinstance(metrics, str) or not metrics:
        raise ValidationError(f"metrics must be a non-empty list of column names, got {metrics!r}")
    _require_columns(per_query_a, "per_query_a", ["qid", *metrics])
    _require_columns(per_query_b, "per_query_b", ["qid", *metrics])
    for name, df in (("per_query_a", per_query_a), ("per_query_b", per_query_b)):
        _require_unique(df.select(pl.col("qid").cast(pl.String)), name, ["qid"])
    a = per_query_a.select(pl.col("qid").cast(pl.String), *[pl.col(m).cast(pl.Float64) for m in metrics])
    b = per_query_b.select(pl.col("qid").cast(pl.String), *[pl.col(m).cast(pl.Float64) for m in metrics])
    # Sorting by qid fixes the pairing order, so bootstrap draws are reproducible.
    joined = a.join(b, on="qid", how="inner", suffix="__b").sort("qid")
    if joined.height == 0:
        raise ValidationError("per_query_a and per_query_b share no qid: nothing to compare")
    rows = []
    for m in metrics:
        va = joined[m].to_numpy()
        vb = joined[f"{m}__b"].to_numpy()
        diff = vb - va
        delta, low, high = bootstrap_ci(diff, n_resamples=n_resamples, confidence=confidence, seed=seed)
        rows.append(
            {
                "metric": m,
                "n": joined.height,
                "mean_a": float(va.mean()),
                "mean_b": float(vb.mean()),
                "delta": delta,
                "delta_low": low,
                "delta_high": high,
                "p_value": paired_randomization_test(va, vb, n_resamples=n_resamples, seed=seed),
            }
        )
    return pl.DataFrame(
        rows,
        schema={
            "metric": pl.String,
            "n": pl.Int64,
            "mean_a": pl.Float64,
            "mean_b": pl.Float64,
            "delta": pl.Float64,
            "delta_low": pl.Float64,
            "delta_high": pl.Float64,
            "p_value": pl.Float64,
        },
    )
