"""Honest selection: what a sweep's winner is worth once the number of configurations compared is
counted, and which configurations it cannot be told apart from.

A sweep picks its best on the tune questions and reports it on validation. With hundreds of
configurations compared, one will look better than the base by chance; a p-value for the winner
alone overstates it. This module corrects it with the permutation max-statistic (Westfall and
Young's single-step maxT): the same random sign flips of the per-question differences are applied
to every configuration at once, and a configuration's corrected p-value is the share of flips
whose *largest* statistic over all configurations reaches its own. That holds the family-wise
error over every configuration compared, and keeps their correlation (neighbouring RRF k values
move together), which Bonferroni or Holm would ignore and pay for.

The statistic of a configuration is its mean paired difference over the root mean square of the
differences, ``sum(d) / sqrt(sum(d**2))``: sign flips leave the denominator unchanged, so it is a
fixed per-configuration scale and a configuration with noisier differences does not dominate the
maximum. With ``2**n <= n_resamples`` every sign assignment is enumerated (exact p-values).

- ``corrected_gain``: the winner's validation change against the base configuration, with the
  plain paired p-value and the one corrected for every configuration compared;
- ``tied_with_best``: the configurations whose difference from the best on tune is not significant
  after the same correction (the set a person should look at, not one point).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from lab.errors import ValidationError
from lab.eval.metrics import paired_randomization_test
from lab.eval.multiple import METHOD, maxt_pvalues

ALPHA = 0.05


def corrected_gain(per_query: np.ndarray, base: np.ndarray, winner: int, mask: np.ndarray,
                   n_resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The winner's change on the ``mask`` questions against the base configuration.

    ``per_query``: configurations x questions (the objective per question), ``base``: the base
    configuration's, ``winner``: the winner's row. Returns the delta, the plain paired p-value (as
    `lab compare` computes it) and the p-value corrected for every configuration compared."""
    rows = np.asarray(per_query, dtype=np.float64)[:, mask]
    ref = np.asarray(base, dtype=np.float64)[mask]
    if rows.shape[1] == 0:
        raise ValidationError("no questions to compare on (the validation part is empty)")
    diffs = (rows - ref[None, :]).T
    corrected = maxt_pvalues(diffs, n_resamples, seed)
    delta = float(diffs[:, winner].mean())
    plain = paired_randomization_test(rows[winner], ref, n_resamples=max(n_resamples, 1000), seed=seed)
    return {"delta": delta, "p": float(plain), "p_corrected": float(corrected[winner]),
            "configurations": int(rows.shape[0]), "questions": int(rows.shape[1]),
            "significant": bool(corrected[winner] < ALPHA and delta > 0), "alpha": ALPHA, "method": METHOD}


def tied_with_best(per_query: np.ndarray, best: int, mask: np.ndarray, n_resamples: int = 2000,
                   seed: int = 0) -> tuple[list[int], np.ndarray]:
    """The rows that the best row is not significantly better than on the ``mask`` questions (the
    best included), and every row's corrected p-value against it."""
    rows = np.asarray(per_query, dtype=np.float64)[:, mask]
    diffs = (rows[best][None, :] - rows).T
    p = maxt_pvalues(diffs, n_resamples, seed)
    return [int(i) for i in np.flatnonzero(p >= ALPHA)], p


def describe(sel: dict[str, Any]) -> list[str]:
    """A sweep's selection figures (``selection.json``) as lines for a person: the winner's gain with
    its plain and corrected p-values, and the configurations tied with it."""
    if not sel:
        return []
    lines, metric = [], sel["objective"]
    gain = sel.get("validation_gain")
    if gain:
        verdict = "significant" if gain["significant"] else "NOT significant"
        lines.append(f"against the base {sel['base']} on validation ({gain['questions']} questions): {metric} "
                     f"{gain['delta']:+.4f}, p {gain['p']:.4f}; corrected for {gain['configurations']} configurations "
                     f"compared, p {gain['p_corrected']:.4f}: {verdict} at {gain['alpha']:g}")
    tied = sel.get("tied_with_best")
    if tied:
        shown = ", ".join(f"#{m['trial']}" for m in tied["members"][:8])
        lines.append(f"tied with the best on tune (corrected p >= {sel['alpha']:g}): {tied['count']} of {tied['of']} "
                     f"configurations ({shown}{', ...' if tied['count'] > 8 else ''}; selection.json lists them)")
    return lines
