"""Abstention measured where the truth is known: a threshold on the best candidate's cosine
(``lab.search.abstain``) fitted on tune questions and judged on held-out ones.

Unanswerable questions, whose answer is stored nowhere they are asked:
- a dataset's own (LongMemEval's ``_abs`` questions, ``EvalDataset.unanswerable``), asked in their
  own haystack; else
- cross-haystack negatives: each answerable question asked in another namespace of its own part
  (namespaces sorted, each question in the next one; a part of one namespace asks in the next
  namespace of the other part), where nothing about it exists; a dataset with one namespace and
  no unanswerable questions has nothing to measure against.

The questions are split into tune and validation like a sweep's (``lab.eval.split``: whole
namespaces to one side when there are three or more). On tune, the threshold is the highest that
costs answerable questions at most ``max_cost`` of recall@k (abstaining on a question loses what
its top k had found); the figures that count are validation's: abstention precision (of the
questions abstained on, the share truly unanswerable), recall (of the unanswerable, the share
abstained on), AUROC of the score (answerable above unanswerable), and the recall@k lost.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lab.config import SearchConfig
from lab.errors import ValidationError
from lab.eval.candidate_cache import candidate_table
from lab.eval.dataset import QUESTIONS_SCHEMA, EvalDataset
from lab.retriever import Retriever
from lab.search.abstain import best_scores
from lab.eval.split import MIN_GROUPS, split_questions

MIN_PER_SIDE = 30  # questions each side (answerable, unanswerable) for a figure to be held (`too_few`)
NEGATIVE_MARK = "@"  # a cross-haystack negative's qid: "<qid>@<namespace it is asked in>"


@dataclass(frozen=True)
class AbstentionOptions:
    max_cost: float = 0.01  # recall@k the fitted threshold may cost answerable tune questions
    validation: float = 0.4  # share of questions (whole namespaces) held out to report on
    seed: int = 0
    k: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.max_cost < 1:
            raise ValidationError(f"abstention max_cost must be in [0, 1), got {self.max_cost}", field="max_cost")
        if not 0 < self.validation < 1:
            raise ValidationError(f"abstention validation share must be in (0, 1), got {self.validation}",
                                  field="validation")


def auroc(answerable: np.ndarray, unanswerable: np.ndarray) -> float | None:
    """P(an answerable question scores above an unanswerable one), ties counting half (the
    Mann-Whitney statistic); None when either side is empty."""
    pos, neg = np.asarray(answerable, dtype=np.float64), np.asarray(unanswerable, dtype=np.float64)
    if not len(pos) or not len(neg):
        return None
    both = np.concatenate([pos, neg])
    order = both.argsort(kind="stable")
    ranks = np.empty(len(both))
    sorted_vals = both[order]
    # average ranks over ties
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_vals)) + 1]
    ends = np.r_[starts[1:], len(both)]
    for s, e in zip(starts.tolist(), ends.tolist()):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def auroc_interval(answerable: np.ndarray, unanswerable: np.ndarray, n_resamples: int = 1000,
                   confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float] | None:
    """(AUROC, low, high): the percentile-bootstrap interval, each side resampled on its own
    (stratified, so every resample has both kinds; seeded); None when either side is empty."""
    pos, neg = np.asarray(answerable, dtype=np.float64), np.asarray(unanswerable, dtype=np.float64)
    area = auroc(pos, neg)
    if area is None:
        return None
    rng = np.random.default_rng(seed)
    areas = [auroc(pos[rng.integers(0, len(pos), len(pos))], neg[rng.integers(0, len(neg), len(neg))])
             for _ in range(n_resamples)]
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(np.asarray(areas, dtype=np.float64), [alpha, 1.0 - alpha])
    return area, float(low), float(high)


def too_few(unanswerable: int, answerable: int) -> str | None:
    """Why a split's abstention figures cannot be held, or None when they can: below
    ``MIN_PER_SIDE`` questions on a side, a proportion's 95% interval is wider than +/-0.18."""
    if min(unanswerable, answerable) >= MIN_PER_SIDE:
        return None
    return (f"only {unanswerable} unanswerable and {answerable} answerable questions: fewer than {MIN_PER_SIDE} "
            "on a side cannot hold a precision, recall or AUROC to better than +/-0.18; read the intervals")


def fit_threshold(scores: np.ndarray, recall: np.ndarray, max_cost: float) -> float:
    """The highest threshold whose abstentions (score < threshold) cost the answerable questions
    (``scores``, with their ``recall``) at most ``max_cost`` of mean recall, placed halfway to the
    next lower score so a near-equal score on other data falls the same way."""
    scores, recall = np.asarray(scores, dtype=np.float64), np.asarray(recall, dtype=np.float64)
    if not len(scores):
        raise ValidationError("abstention: no answerable tune question to fit a threshold on")
    order = np.argsort(scores, kind="stable")
    s, lost = scores[order], np.cumsum(recall[order]) / len(scores)
    # abstaining below s[i] loses the recall of every score under it: lost[i - 1]
    allowed = [i for i in range(len(s)) if (lost[i - 1] if i else 0.0) <= max_cost + 1e-12]
    i = max(allowed)
    if i == 0:
        return float(s[0])  # nothing may be lost below the lowest answerable score: abstain under it
    below = s[i - 1]
    return float((below + s[i]) / 2.0) if s[i] > below else float(s[i])


def unanswerable_questions(dataset: EvalDataset, parts: pl.DataFrame) -> tuple[pl.DataFrame, str]:
    """(qid, namespace, question, category, source, part) of the questions whose answer is not
    stored where they are asked, and which kind they are."""
    if dataset.unanswerable.height:
        own = dataset.unanswerable.join(parts.select("qid", "part"), on="qid", how="inner")
        return own.with_columns(pl.col("qid").alias("source")).select(
            "qid", "namespace", "question", "category", "source", "part"), "the dataset's own"
    answerable = dataset.questions.join(parts.select("qid", "part"), on="qid")
    everywhere = sorted(answerable["namespace"].unique().to_list())
    out = []
    for part in ("tune", "validation"):
        rows = answerable.filter(pl.col("part") == part)
        spaces = sorted(rows["namespace"].unique().to_list())
        if len(everywhere) < 2 or not spaces:
            continue
        if len(spaces) >= 2:
            following = {ns: spaces[(i + 1) % len(spaces)] for i, ns in enumerate(spaces)}
        else:  # a part of one namespace: its questions are asked in the next namespace of the other part
            following = {spaces[0]: everywhere[(everywhere.index(spaces[0]) + 1) % len(everywhere)]}
        out.append(rows.select(
            (pl.col("qid") + NEGATIVE_MARK + pl.col("namespace").replace_strict(following)).alias("qid"),
            pl.col("namespace").replace_strict(following).alias("namespace"), "question",
            pl.lit("unanswerable").alias("category"), pl.col("qid").alias("source"), "part"))
    if not out:
        raise ValidationError(f"abstention on {dataset.name}: it has one namespace and no unanswerable questions, "
                              "so there is nothing whose answer is known to be absent (a dataset with several "
                              "namespaces, or with unanswerable questions such as LongMemEval's _abs, is needed)")
    return pl.concat(out), "cross-haystack (each question asked in another namespace)"


def measure(retriever: Retriever, dataset: EvalDataset, config: SearchConfig, per_query: pl.DataFrame,
            options: AbstentionOptions, *, root: Path | None = None,
            parts: pl.DataFrame | None = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """(one row per question asked: qid, namespace, part, answerable, score, recall@k, abstain;
    the summary: threshold fitted on tune, figures per part, the configured threshold's figures).
    ``parts``: (qid, part) of every question, answerable and unanswerable, instead of the seeded
    split (a benchmark holding out chosen namespaces)."""
    metric = f"recall@{options.k}"
    if metric not in per_query.columns:
        raise ValidationError(f"abstention costs {metric}, which this evaluation did not compute "
                              f"(its ks: {sorted(c for c in per_query.columns if c.startswith('recall@'))})")
    everything = pl.concat([dataset.questions.select("qid", "namespace"),
                            dataset.unanswerable.select("qid", "namespace")])
    if parts is None:
        parts = split_questions(everything, options.validation, options.seed)
    negatives, kind = unanswerable_questions(dataset, parts)
    # the answerable questions' candidates are the evaluation's own table (cached); only the
    # unanswerable ones are searched here
    own, _ = candidate_table(retriever, dataset, config, depth=options.k, root=root)
    asked = replace(dataset, questions=negatives.select(list(QUESTIONS_SCHEMA)))
    theirs, _ = candidate_table(retriever, asked, config, depth=options.k, root=root)
    best = {**best_scores(own), **best_scores(theirs)}
    positives = (dataset.questions.select("qid", "namespace").join(parts.select("qid", "part"), on="qid")
                 .join(per_query.select("qid", metric), on="qid", how="left")
                 .with_columns(pl.lit(True).alias("answerable"), pl.col("qid").alias("source")))
    negatives = negatives.select("qid", "namespace", "part", pl.lit(None, pl.Float64).alias(metric),
                                 pl.lit(False).alias("answerable"), "source")
    table = pl.concat([positives.select(negatives.columns), negatives]).with_columns(
        pl.col("qid").replace_strict(best, default=None, return_dtype=pl.Float64).alias("score"))
    tune = table.filter((pl.col("part") == "tune") & pl.col("answerable"))
    threshold = fit_threshold(tune["score"].fill_null(-1.0).to_numpy(), tune[metric].fill_null(0.0).to_numpy(),
                              options.max_cost)
    table = table.with_columns((pl.col("score").is_null() | (pl.col("score") < threshold)).alias("abstain"))
    summary: dict[str, Any] = {
        "negatives": kind, "evidence": "the best candidate's cosine to the question", "metric": metric,
        "threshold": round(threshold, 6), "fitted_on": "tune", "max_cost": options.max_cost,
        "validation_share": options.validation, "seed": options.seed,
        "split": "by namespace" if everything["namespace"].n_unique() >= MIN_GROUPS else "by question",
        "tune": figures(table.filter(pl.col("part") == "tune"), threshold, metric),
        "validation": figures(table.filter(pl.col("part") == "validation"), threshold, metric),
    }
    if config.abstain.threshold is not None:  # what the configuration's own threshold does there
        summary["configured"] = {"threshold": config.abstain.threshold,
                                 "validation": figures(table.filter(pl.col("part") == "validation"),
                                                       config.abstain.threshold, metric)}
    return table.sort("part", "answerable", "qid", descending=[False, True, False]), summary


def figures(rows: pl.DataFrame, threshold: float, metric: str) -> dict[str, Any]:
    """Abstention precision, recall, AUROC and the recall lost, for ``rows`` at ``threshold``."""
    score = rows["score"].fill_null(-np.inf).to_numpy()
    answerable = rows["answerable"].to_numpy()
    abstain = score < threshold
    neg = ~answerable
    n_abs, n_neg, n_pos = int(abstain.sum()), int(neg.sum()), int(answerable.sum())
    recall = rows[metric].fill_null(0.0).to_numpy()
    full = float(recall[answerable].mean()) if n_pos else None
    kept = float(np.where(abstain[answerable], 0.0, recall[answerable]).mean()) if n_pos else None
    interval = auroc_interval(score[answerable & np.isfinite(score)], score[neg & np.isfinite(score)])
    small = too_few(n_neg, n_pos)
    return {
        "answerable": n_pos, "unanswerable": n_neg, "abstained": n_abs,
        "precision": round(float((abstain & neg).sum() / n_abs), 4) if n_abs else None,
        "recall": round(float((abstain & neg).sum() / n_neg), 4) if n_neg else None,
        "auroc": None if interval is None else round(interval[0], 4),
        "auroc_ci95": None if interval is None else [round(interval[1], 4), round(interval[2], 4)],
        f"{metric}": None if full is None else round(full, 4),
        f"{metric}_with_abstention": None if kept is None else round(kept, 4),
        "cost": None if full is None else round(full - kept, 4),
        "answerable_abstained": int((abstain & answerable).sum()),
        **({"small_n": small} if small else {}),
        **({"undefined": why} if (why := _undefined(n_abs, n_neg, n_pos, interval is None)) else {}),
    }


def _undefined(abstained: int, unanswerable: int, answerable: int, no_auroc: bool) -> dict[str, str]:
    """Why a figure is None: what it would divide by is zero."""
    why = {}
    if not abstained:
        why["precision"] = "no question scored below the threshold, so none abstained: precision has no denominator"
    if not unanswerable:
        why["recall"] = "no unanswerable question in this part: abstention recall has no denominator"
    if no_auroc:
        why["auroc"] = "AUROC needs scored questions of both kinds, answerable and unanswerable"
    if not answerable:
        why["cost"] = "no answerable question in this part: nothing to lose recall on"
    return why


def plot(table: pl.DataFrame, summary: dict[str, Any], path: Path, title: str) -> Path:
    """abstention.png: the validation scores of answerable and unanswerable questions with the
    threshold, and the ROC curve with the chosen operating point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = table.filter(pl.col("part") == "validation")
    if not rows.height:
        rows = table
    score = rows["score"].fill_null(-1.0).to_numpy()
    answerable = rows["answerable"].to_numpy()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=110)
    bins = np.linspace(min(score.min(), summary["threshold"]) - 0.02, max(score.max(), summary["threshold"]) + 0.02, 40)
    left.hist(score[answerable], bins=bins, alpha=0.6, label="answerable")
    left.hist(score[~answerable], bins=bins, alpha=0.6, label="unanswerable")
    left.axvline(summary["threshold"], color="crimson", label=f"threshold {summary['threshold']:.3f}")
    left.set_xlabel("best candidate's cosine")
    left.set_ylabel("questions")
    left.legend(fontsize=8)
    left.set_title("held-out questions")
    thresholds = np.unique(np.concatenate([score, [np.inf]]))
    neg, pos = max(1, int((~answerable).sum())), max(1, int(answerable.sum()))
    tpr = [((score < t) & ~answerable).sum() / neg for t in thresholds]  # unanswerable abstained on
    fpr = [((score < t) & answerable).sum() / pos for t in thresholds]  # answerable abstained on
    right.plot(fpr, tpr)
    v = summary["validation"] if summary["validation"]["answerable"] else summary["tune"]
    right.scatter([v["answerable_abstained"] / pos], [(v["recall"] or 0.0)], color="crimson", zorder=3,
                  label="fitted threshold")
    right.plot([0, 1], [0, 1], color="grey", lw=0.6, ls="--")
    right.set_xlabel("answerable questions abstained on")
    right.set_ylabel("unanswerable abstained on")
    right.set_title(f"ROC (AUROC {v['auroc']})" if v["auroc"] is not None else "ROC")
    right.legend(fontsize=8, loc="lower right")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
