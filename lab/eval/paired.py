"""What a paired comparison of two runs says beyond its p-value: McNemar's exact test where the
metric is binary (hit@k: a question found or not), the paired effect size with its bootstrap CI,
and whether the questions are too few to hold a figure at all.

The effect size is Cohen's d_z: the mean paired difference over the standard deviation of the
differences, so a change is read against how much questions disagree, not against the metric's
scale. Its CI is the percentile bootstrap over questions (the same seeded resamples as the means').
"""
from __future__ import annotations

from typing import Any

import numpy as np

from lab.eval.metrics import resample_counts

# below this many questions, or with a 95% CI wider than this, a figure is reported with a warning:
# 30 questions hold a proportion near 0.5 to +/-0.18 at best, and a 0.10-wide interval is the
# loosest that still separates the changes people act on (a few points of recall)
MIN_QUESTIONS = 30
MAX_CI_WIDTH = 0.10


def is_binary(*values: np.ndarray) -> bool:
    """Whether every value is 0 or 1 (hit@k, a recall on one gold memory): McNemar applies."""
    return all(np.isin(np.asarray(v, dtype=np.float64), (0.0, 1.0)).all() for v in values)


def mcnemar(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """McNemar's exact two-sided test of two binary runs on the same questions: only the questions
    they disagree on count, and under no difference each goes either way with probability 1/2."""
    from scipy.stats import binomtest  # heavy: scipy loads only when a binary metric is compared

    a, b = np.asarray(a) > 0.5, np.asarray(b) > 0.5
    only_a, only_b = int((a & ~b).sum()), int((b & ~a).sum())
    n = only_a + only_b
    p = 1.0 if n == 0 else float(binomtest(only_b, n, 0.5).pvalue)
    return {"test": "McNemar exact", "only_a": only_a, "only_b": only_b, "p": min(p, 1.0)}


def effect_size(diffs: np.ndarray, n_resamples: int = 1000, seed: int = 0) -> dict[str, float | None]:
    """Cohen's d_z of paired differences with its 95% percentile-bootstrap CI; None where the
    differences do not vary (every question changed alike, or none changed), and no CI where too
    few questions differ for the resamples to hold one."""
    d = np.asarray(diffs, dtype=np.float64)
    n = d.size
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    if n < 2 or sd == 0.0:
        return {"d_z": None, "low": None, "high": None}
    counts = resample_counts(n, n_resamples, seed)
    mean = counts @ d / n
    var = (counts @ (d * d) / n - mean ** 2) * n / (n - 1)
    live = var > 1e-15
    point = round(float(d.mean() / sd), 4)
    if live.mean() < 0.975:
        # in over 2.5% of the resamples no question differs: the interval's tail is undefined, and
        # dropping those resamples would fake one (a single differing question among 120 does this)
        return {"d_z": point, "low": None, "high": None}
    dz = mean[live] / np.sqrt(var[live])
    low, high = np.quantile(dz, [0.025, 0.975])
    return {"d_z": point, "low": round(float(low), 4), "high": round(float(high), 4)}


def small_n(figures: dict[str, tuple[float, float]], n: int, max_width: float = MAX_CI_WIDTH,
            min_questions: int = MIN_QUESTIONS) -> str | None:
    """Why ``figures`` (name -> its 95% CI low, high) on ``n`` questions cannot be held, in one
    line naming the widest, or None when they can."""
    if not figures:
        return None
    name, (low, high) = max(figures.items(), key=lambda kv: (kv[1][1] - kv[1][0], kv[0]))
    width = high - low
    if n < min_questions:
        return (f"{n} questions (fewer than {min_questions}) cannot hold a figure: {name}'s 95% CI [{low:.3f}, "
                f"{high:.3f}] is {width:.2f} wide; read the intervals, not the points")
    if width > max_width:
        return (f"{n} questions hold these figures to +/-{width / 2:.3f} at worst ({name}'s 95% CI [{low:.3f}, "
                f"{high:.3f}] is {width:.2f} wide, over the {max_width:g} a figure is held to): read the intervals")
    return None


def small_n_lines(n: int, ci95: dict[str, list[float]], metrics: tuple[str, ...]) -> list[str]:
    """An evaluation's small-n warning over ``metrics`` (those it has), as a list of at most one."""
    why = small_n({m: (float(ci95[m][0]), float(ci95[m][1])) for m in metrics if m in ci95}, n)
    return [why] if why else []
