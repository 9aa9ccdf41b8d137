"""N runs in one table: each run's metrics with 95% CIs, and each run's paired change against a
baseline run with p-values corrected over a declared family (`lab compare A B C ...`, and the
table `lab eval --system A B C` ends with).

Runs are compared on the questions they all answered (paired). A run's CI is the percentile
bootstrap of its per-question values; a change against the baseline is the paired mean difference,
its p-value the paired randomization test (McNemar's exact test where the metric is binary), its
effect size Cohen's d_z with a CI (lab.eval.paired), and its corrected p-value the declared
correction (maxT, Holm, Benjamini-Hochberg or none; lab.eval.multiple) over the family: every
non-baseline run times every family metric, the metrics fixed by ``--family``, never by which are
shown. Rendered as text, markdown or LaTeX (ranx's `compare` is the model).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from lab.errors import ValidationError
from lab.eval.metrics import bootstrap_ci, paired_randomization_test
from lab.eval.multiple import CORRECTIONS, check_correction, corrected_pvalues
from lab.eval.paired import effect_size, is_binary, mcnemar, small_n

ALPHA = 0.05
PLAIN_RESAMPLES = 10000  # as `lab compare A B` (lab.eval.metrics.compare_runs): the same p for the same pair
TEST = "paired randomization test (sign flips of per-question differences)"


@dataclass
class Comparison:
    names: list[str]
    metrics: list[str]  # the metrics shown
    baseline: str
    questions: int  # the questions every run answered: what is compared
    means: dict[str, dict[str, tuple[float, float, float]]]  # run -> metric -> (mean, low, high)
    # run -> metric -> delta, p, p_corrected, test, better, worse, effect (d_z with CI), mcnemar (binary)
    changes: dict[str, dict[str, dict[str, Any]]]
    speeds: dict[str, dict[str, Any]] = field(default_factory=dict)  # run -> ingest/s, p50, p99 (systems)
    test: str = TEST
    correction: str = "maxT"
    family: list[str] = field(default_factory=list)  # the metrics corrected over (each against the baseline)
    small_n: list[str] = field(default_factory=list)  # figures too loose to hold (lab.eval.paired.small_n)

    @property
    def family_size(self) -> int:
        """Comparisons the correction counts: every non-baseline run times every family metric."""
        return (len(self.names) - 1) * len(self.family)


def speed_of(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """A system run's speed figures from its metrics (a preset run has none)."""
    speed = metrics.get("speed")
    if not speed:
        return None
    return {"ingest_per_s": speed["ingest"].get("memories_per_s"), "p50_ms": speed["search"].get("p50_ms"),
            "p99_ms": speed["search"].get("p99_ms")}


def _family(metrics: list[str], family: list[str] | None, tables: dict[str, pl.DataFrame]) -> list[str]:
    """The declared family: ``family`` (default: the metrics shown); a metric shown must be in it,
    and every run must have every family metric (a family never shrinks to what a run has)."""
    family = list(dict.fromkeys(family or metrics))
    outside = [m for m in metrics if m not in family]
    if outside:
        raise ValidationError(f"metric(s) {outside} are shown but not in the declared family {family}: add them to "
                              "--family (the family, not the display, fixes the correction)")
    for name, table in tables.items():
        missing = [m for m in ["qid", *family] if m not in table.columns]
        if missing:
            raise ValidationError(f"run {name!r} has no column(s) {missing} of the family {family}; pass --family "
                                  "with metrics every run has")
    return family


def compare_many(tables: dict[str, pl.DataFrame], metrics: list[str], baseline: str | None = None, *,
                 speeds: dict[str, dict[str, Any]] | None = None, correction: str = "maxT",
                 family: list[str] | None = None, n_resamples: int = 2000, seed: int = 0) -> Comparison:
    """``tables``: run name -> its per-question table (qid and metric columns), in table order.
    ``metrics`` are shown; ``family`` (default: ``metrics``) are corrected over, every run against
    the baseline, by ``correction`` (lab.eval.multiple.CORRECTIONS)."""
    check_correction(correction)
    names = list(tables)
    if len(names) < 2:
        raise ValidationError(f"a comparison needs at least two runs, got {len(names)}")
    baseline = baseline or names[0]
    if baseline not in tables:
        raise ValidationError(f"--baseline {baseline!r} is not one of the runs compared: {names}")
    family = _family(list(metrics), family, tables)
    qids = sorted(set.intersection(*(set(t["qid"].cast(pl.String).to_list()) for t in tables.values())))
    if not qids:
        raise ValidationError("the runs share no question: nothing to compare")
    order = pl.DataFrame({"qid": qids})
    values = {n: {m: order.join(t.select(pl.col("qid").cast(pl.String), pl.col(m).cast(pl.Float64)), on="qid",
                                how="left")[m].to_numpy() for m in family} for n, t in tables.items()}
    means = {n: {m: bootstrap_ci(values[n][m], seed=seed) for m in family} for n in names}
    others = [n for n in names if n != baseline]
    pairs = [(n, m) for n in others for m in family]
    diffs = np.column_stack([values[n][m] - values[baseline][m] for n, m in pairs])
    changes: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in others}
    for j, (n, m) in enumerate(pairs):
        changes[n][m] = _change(values[baseline][m], values[n][m], seed)
    raw = np.array([changes[n][m]["p"] for n, m in pairs])
    corrected = corrected_pvalues(raw, diffs, correction, n_resamples, seed)
    for j, (n, m) in enumerate(pairs):
        changes[n][m]["p_corrected"] = float(corrected[j])
    loose = small_n({f"{m} of {n}": means[n][m][1:] for n in names for m in metrics}, len(qids))
    return Comparison(names, list(metrics), baseline, len(qids), means,
                      {n: {m: changes[n][m] for m in family} for n in others}, dict(speeds or {}),
                      correction=correction, family=family, small_n=[loose] if loose else [])


def _change(base: np.ndarray, other: np.ndarray, seed: int) -> dict[str, Any]:
    """One run's paired change on one metric: its own test (McNemar where the metric is binary,
    else the randomization test), the counts each way and the effect size."""
    d = other - base
    out: dict[str, Any] = {"delta": float(d.mean()), "better": int((d > 0).sum()), "worse": int((d < 0).sum()),
                           "effect": effect_size(d, seed=seed)}
    if is_binary(base, other):
        out["mcnemar"] = mcnemar(base, other)
        out["p"], out["test"] = out["mcnemar"]["p"], "McNemar exact"
    else:
        out["p"] = float(paired_randomization_test(other, base, n_resamples=PLAIN_RESAMPLES, seed=seed))
        out["test"] = "randomization"
    return out


def _cell(c: Comparison, name: str, metric: str) -> tuple[str, str]:
    mean, low, high = c.means[name][metric]
    if name == c.baseline:
        return f"{mean:.4f} [{low:.3f}, {high:.3f}]", "baseline"
    ch = c.changes[name][metric]
    mark = "*" if ch["p_corrected"] < ALPHA else ""
    p = ch["p_corrected"]
    dz = ch["effect"]["d_z"]
    effect = "" if dz is None else f", d {dz:+.2f}"
    return f"{mean:.4f} [{low:.3f}, {high:.3f}]", f"{ch['delta']:+.4f}{mark} (p {'<0.001' if p < 0.001 else f'{p:.3f}'}{effect})"


def _speed(c: Comparison, name: str) -> str:
    s = c.speeds.get(name)
    if not s:
        return ""
    return f"{s.get('ingest_per_s', '-')}/s, p50 {s.get('p50_ms', '-')} ms, p99 {s.get('p99_ms', '-')} ms"


def _notes(c: Comparison) -> list[str]:
    n = c.family_size
    binary = sorted({m for v in c.changes.values() for m, ch in v.items() if "mcnemar" in ch and m in c.metrics})
    notes = [f"{c.questions} paired questions (those every run answered). [low, high]: 95% bootstrap CI.",
             f"change: mean paired difference against {c.baseline}; p: {c.test}"
             + (f" (McNemar's exact test for the binary {', '.join(binary)})" if binary else "")
             + f", corrected by {CORRECTIONS[c.correction]} over a declared family of {n} comparison"
             f"{'s' if n != 1 else ''} ({len(c.names) - 1} run{'s' if len(c.names) != 2 else ''} x metrics "
             f"{', '.join(c.family)}); * corrected p < {ALPHA}; d: paired effect size (Cohen's d_z)."]
    notes += [f"warning: {why}" for why in c.small_n]
    if c.speeds:
        notes.append("speed (ingest memories/s, search p50/p99) was measured one system after another on one shared "
                     "machine: compare speeds only between runs made the same way.")
    return notes


def render(c: Comparison, fmt: str = "text") -> str:
    """The table as ``text`` (aligned columns), ``markdown`` or ``latex``."""
    head = ["run", *[f"{m}" for m in c.metrics], *[f"{m} change" for m in c.metrics]]
    if c.speeds:
        head.append("speed")
    rows = []
    for name in c.names:
        cells = [_cell(c, name, m) for m in c.metrics]
        row = [name, *[a for a, _ in cells], *[b for _, b in cells]]
        if c.speeds:
            row.append(_speed(c, name))
        rows.append(row)
    notes = _notes(c)
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines + [""] + notes) + "\n"
    if fmt == "latex":
        def tex(s: str) -> str:
            return s.replace("\\", "\\textbackslash{}").replace("_", "\\_").replace("%", "\\%").replace("&", "\\&") \
                .replace("#", "\\#")
        lines = ["\\begin{tabular}{l" + "r" * (len(head) - 1) + "}", "\\hline",
                 " & ".join(tex(h) for h in head) + " \\\\", "\\hline"]
        lines += [" & ".join(tex(x) for x in r) + " \\\\" for r in rows]
        lines += ["\\hline", "\\end{tabular}"] + [f"% {n}" for n in notes]
        return "\n".join(lines) + "\n"
    if fmt != "text":
        raise ValidationError(f"format must be text, markdown or latex, got {fmt!r}")
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    return "\n".join(lines + [""] + [textwrap.fill(n, 100) for n in notes]) + "\n"


def two_run_lines(c: Comparison) -> list[str]:
    """For two runs: per metric, how many questions the second run improved and worsened."""
    (other,) = c.changes
    return [f"{m}: {other} better on {ch['better']}, worse on {ch['worse']}, equal on "
            f"{c.questions - ch['better'] - ch['worse']} of {c.questions} questions"
            for m, ch in c.changes[other].items() if m in c.metrics]
