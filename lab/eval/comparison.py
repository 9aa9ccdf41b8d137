"""N runs in one table: each run's metrics with 95% CIs, and each run's paired change against a
baseline run with p-values corrected for every comparison made (`lab compare A B C ...`, and the
table `lab eval --system A B C` ends with).

Runs are compared on the questions they all answered (paired). A run's CI is the percentile
bootstrap of its per-question values; a change against the baseline is the paired mean difference,
its p-value the paired randomization test (as `lab compare A B` reports it), and its corrected
p-value the permutation max-statistic over every (run, metric) comparison in the table
(lab.eval.multiple). Rendered as text, markdown or LaTeX (ranx's `compare` is the model).
"""
from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from lab.errors import ValidationError
from lab.eval.metrics import bootstrap_ci, paired_randomization_test
from lab.eval.multiple import METHOD, maxt_pvalues

ALPHA = 0.05
PLAIN_RESAMPLES = 10000  # as `lab compare A B` (lab.eval.metrics.compare_runs): the same p for the same pair
TEST = "paired randomization test (sign flips of per-question differences)"


@dataclass
class Comparison:
    names: list[str]
    metrics: list[str]
    baseline: str
    questions: int  # the questions every run answered: what is compared
    means: dict[str, dict[str, tuple[float, float, float]]]  # run -> metric -> (mean, low, high)
    changes: dict[str, dict[str, dict[str, Any]]]  # run -> metric -> delta, p, p_corrected, better, worse
    speeds: dict[str, dict[str, Any]] = field(default_factory=dict)  # run -> ingest/s, p50, p99 (systems)
    test: str = TEST
    correction: str = METHOD


def speed_of(metrics: dict[str, Any]) -> dict[str, Any] | None:
    """A system run's speed figures from its metrics (a preset run has none)."""
    speed = metrics.get("speed")
    if not speed:
        return None
    return {"ingest_per_s": speed["ingest"].get("memories_per_s"), "p50_ms": speed["search"].get("p50_ms"),
            "p99_ms": speed["search"].get("p99_ms")}


def compare_many(tables: dict[str, pl.DataFrame], metrics: list[str], baseline: str | None = None, *,
                 speeds: dict[str, dict[str, Any]] | None = None, n_resamples: int = 2000,
                 seed: int = 0) -> Comparison:
    """``tables``: run name -> its per-question table (qid and metric columns), in table order."""
    names = list(tables)
    if len(names) < 2:
        raise ValidationError(f"a comparison needs at least two runs, got {len(names)}")
    baseline = baseline or names[0]
    if baseline not in tables:
        raise ValidationError(f"--baseline {baseline!r} is not one of the runs compared: {names}")
    for name, table in tables.items():
        missing = [m for m in ["qid", *metrics] if m not in table.columns]
        if missing:
            raise ValidationError(f"run {name!r} has no column(s) {missing}")
    qids = sorted(set.intersection(*(set(t["qid"].cast(pl.String).to_list()) for t in tables.values())))
    if not qids:
        raise ValidationError("the runs share no question: nothing to compare")
    order = pl.DataFrame({"qid": qids})
    values = {n: {m: order.join(t.select(pl.col("qid").cast(pl.String), pl.col(m).cast(pl.Float64)), on="qid",
                                how="left")[m].to_numpy() for m in metrics} for n, t in tables.items()}
    means = {n: {m: bootstrap_ci(values[n][m], seed=seed) for m in metrics} for n in names}
    others = [n for n in names if n != baseline]
    pairs = [(n, m) for n in others for m in metrics]
    diffs = np.column_stack([values[n][m] - values[baseline][m] for n, m in pairs])
    corrected = maxt_pvalues(diffs, n_resamples, seed)
    changes: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in others}
    for j, (n, m) in enumerate(pairs):
        d = diffs[:, j]
        changes[n][m] = {"delta": float(d.mean()),
                         "p": float(paired_randomization_test(values[n][m], values[baseline][m],
                                                              n_resamples=PLAIN_RESAMPLES, seed=seed)),
                         "p_corrected": float(corrected[j]), "better": int((d > 0).sum()), "worse": int((d < 0).sum())}
    return Comparison(names, list(metrics), baseline, len(qids), means, changes, dict(speeds or {}))


def _cell(c: Comparison, name: str, metric: str) -> tuple[str, str]:
    mean, low, high = c.means[name][metric]
    if name == c.baseline:
        return f"{mean:.4f} [{low:.3f}, {high:.3f}]", "baseline"
    ch = c.changes[name][metric]
    mark = "*" if ch["p_corrected"] < ALPHA else ""
    p = ch["p_corrected"]
    return f"{mean:.4f} [{low:.3f}, {high:.3f}]", f"{ch['delta']:+.4f}{mark} (p {'<0.001' if p < 0.001 else f'{p:.3f}'})"


def _speed(c: Comparison, name: str) -> str:
    s = c.speeds.get(name)
    if not s:
        return ""
    return f"{s.get('ingest_per_s', '-')}/s, p50 {s.get('p50_ms', '-')} ms, p99 {s.get('p99_ms', '-')} ms"


def _notes(c: Comparison) -> list[str]:
    n = sum(len(v) for v in c.changes.values())
    notes = [f"{c.questions} paired questions (those every run answered). [low, high]: 95% bootstrap CI.",
             f"change: mean paired difference against {c.baseline}; p: {c.test}, corrected for "
             f"{n} comparison{'s' if n != 1 else ''} by {c.correction}; * corrected p < {ALPHA}."]
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
            for m, ch in c.changes[other].items()]
