"""Many comparisons at once, corrected over a declared family (`CORRECTIONS`): the permutation
max-statistic (Westfall and Young's single-step maxT, the default), Holm's step-down, Benjamini and
Hochberg's step-up (false discovery rate, not family-wise error), or none.

maxT works on the paired per-question differences themselves. The same random sign flips are applied to
every comparison at once, and a comparison's corrected p-value is the share of flips whose
*largest* statistic over all comparisons reaches its own: the family-wise error over every
comparison made, keeping their correlation (which Bonferroni or Holm would ignore and pay for).
Used by a sweep's honest selection (lab.tune.selection) and by `lab compare` / `lab eval --system`
over N runs (lab.eval.comparison).

The statistic of a comparison is its mean paired difference over the root mean square of the
differences, ``sum(d) / sqrt(sum(d**2))``: sign flips leave the denominator unchanged, so it is a
fixed per-comparison scale and a comparison with noisier differences does not dominate the
maximum. With ``2**n <= n_resamples`` every sign assignment is enumerated (exact p-values).
"""
from __future__ import annotations

import itertools

import numpy as np

from lab.config import CORRECTIONS as CORRECTION_NAMES
from lab.errors import ValidationError

METHOD = "permutation max-statistic (Westfall-Young single-step maxT, two-sided)"
# the choices `--correction` and a gate file's `correction` take, and what each is called in a table's notes
CORRECTIONS = dict(zip(CORRECTION_NAMES, (
    METHOD,
    "Holm's step-down (family-wise error)",
    "Benjamini-Hochberg step-up (false discovery rate)",
    "no correction (each p as if it were the only test)",
), strict=True))


def check_correction(name: str, where: str = "--correction") -> str:
    """``name`` when it is one of `CORRECTIONS`, else a ValidationError naming it."""
    if name not in CORRECTIONS:
        raise ValidationError(f"{where} must be one of {', '.join(CORRECTIONS)}, got {name!r}")
    return name


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error, any dependence)."""
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted = np.maximum.accumulate((m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def benjamini_hochberg(p: np.ndarray) -> np.ndarray:
    """Benjamini and Hochberg's step-up adjusted p-values (false discovery rate)."""
    p = np.asarray(p, dtype=np.float64)
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = p[order] * m / np.arange(1, m + 1)
    adjusted = np.minimum.accumulate(scaled[::-1])[::-1]
    out = np.empty(m)
    out[order] = np.minimum(adjusted, 1.0)
    return out


def corrected_pvalues(raw: np.ndarray, diffs: np.ndarray, method: str, n_resamples: int = 2000,
                      seed: int = 0) -> np.ndarray:
    """One corrected p-value per comparison of the family: ``raw`` are the comparisons' own
    p-values (what holm, bh and none adjust), ``diffs`` their paired differences (questions x
    comparisons, what maxT permutes)."""
    method = check_correction(method)
    if method == "maxT":
        return maxt_pvalues(diffs, n_resamples, seed)
    if method == "holm":
        return holm(raw)
    if method == "bh":
        return benjamini_hochberg(raw)
    return np.asarray(raw, dtype=np.float64)


def _signs(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """(B, n) sign flips: every assignment when there are at most ``n_resamples``, else random."""
    if 2 ** n <= n_resamples:
        return np.array(list(itertools.product((1.0, -1.0), repeat=n)))
    rng = np.random.default_rng(seed)
    return rng.integers(0, 2, size=(n_resamples, n)).astype(np.float64) * 2 - 1


def maxt_pvalues(diffs: np.ndarray, n_resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """Family-wise corrected two-sided p-values, one per column of ``diffs`` (questions x
    configurations, each column a configuration's paired differences against one reference).

    A column of zeros (the reference itself, or a configuration ranking alike on every question)
    has statistic 0 and p-value 1."""
    d = np.asarray(diffs, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] == 0:
        raise ValidationError(f"diffs must be a questions x configurations matrix, got shape {d.shape}")
    if not np.isfinite(d).all():
        raise ValidationError("diffs hold NaN or infinite values")
    scale = np.sqrt((d ** 2).sum(axis=0))
    live = scale > 0
    scale = np.where(live, scale, 1.0)
    observed = np.where(live, np.abs(d.sum(axis=0)) / scale, 0.0)
    signs = _signs(d.shape[0], n_resamples, seed)
    exact = 2 ** d.shape[0] <= n_resamples
    maxima = np.empty(signs.shape[0])
    # flips x configurations in blocks, so a sweep of thousands of configurations stays in memory
    step = max(1, int(2e7 // max(1, d.shape[1])))
    scaled = d / scale
    for start in range(0, signs.shape[0], step):
        block = np.abs(signs[start:start + step] @ scaled)
        maxima[start:start + step] = block.max(axis=1)
    tol = 1e-12 * max(1.0, float(observed.max(initial=0.0)))
    counts = (maxima[None, :] >= observed[:, None] - tol).sum(axis=1)
    # enumerated: the observed assignment is among the flips; sampled: add it (never p = 0)
    p = counts / signs.shape[0] if exact else (counts + 1) / (signs.shape[0] + 1)
    return np.where(live, np.minimum(p, 1.0), 1.0)
