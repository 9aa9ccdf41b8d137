"""Training a learned fuser (``FusionConfig.learned``) from gold labels, judged fold by fold.

The model is a logistic regression over each candidate's fusion features (see
``lab.search.fusion.learned``), fitted by Newton's method with an L2 penalty: deterministic, no
sampling, the same coefficients on every machine up to float rounding. It is trained on the
candidates the base fusion keeps alive, labelled by the dataset's gold; a hit on a derived memory
is a hit on its source when ``credit_derived`` is on.

``cross_validate`` holds each namespace (a LoCoMo conversation) out in turn: the model is trained
on the others and scored on it against the base configuration. Adopt the model only where it wins
on most folds.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import polars as pl

from lab.config import LEARNED_BASE_FEATURES, LearnedFusion, SearchConfig, check_number
from lab.errors import ValidationError
from lab.eval.metrics import compare_runs
from lab.search.fusion import PreparedCandidates
from lab.search.fusion.fused import base_scores, live_rows
from lab.search.fusion.learned import feature_matrix

DEFAULT_L2 = 1.0


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = DEFAULT_L2, *, max_iter: int = 100,
                 tol: float = 1e-10) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """(mean, scale, coef, intercept) of an L2-penalised logistic regression of ``y`` on ``x``,
    features standardised first (a constant feature gets scale 1 and, with the penalty, coef 0)."""
    check_number("l2", l2, above=0)
    y = np.asarray(y, dtype=np.float64)
    if len(y) == 0 or y.min() == y.max():
        raise ValidationError(f"training needs both relevant and non-relevant candidates; got {int(y.sum())} "
                              f"relevant of {len(y)}")
    mean = x.mean(axis=0)
    scale = x.std(axis=0)
    scale = np.where(scale > 1e-12, scale, 1.0)
    z = np.column_stack([(x - mean) / scale, np.ones(len(x))])
    penalty = np.r_[np.full(x.shape[1], l2), 0.0]  # the intercept is not penalised
    w = np.zeros(z.shape[1])
    w[-1] = np.log(y.mean() / (1 - y.mean()))

    def loss(v: np.ndarray) -> float:
        t = z @ v
        return float(np.sum(np.logaddexp(0.0, t) - y * t) + 0.5 * np.sum(penalty * v * v))

    current = loss(w)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -50.0, 50.0)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        # damped Newton: a full step can overshoot on rare positives; halve it until the loss falls
        t = 1.0
        while t > 1e-6 and loss(w - t * step) > current:
            t /= 2
        w = w - t * step
        new = loss(w)
        if np.abs(t * step).max() < tol or current - new < tol * max(1.0, abs(current)):
            break
        current = new
    return mean, scale, w[:-1], float(w[-1])


def feature_names(prep: PreparedCandidates, config: SearchConfig) -> tuple[str, ...]:
    """The base features, then a rank and a presence feature per list the configuration weighs."""
    lists = [s for s in prep.signals if float(config.fusion.weights.get(s, 1.0)) != 0]
    return (*LEARNED_BASE_FEATURES, *(f"{kind}:{s}" for s in lists for kind in ("rrf", "in")))


def gold_labels(prep: PreparedCandidates, qrels: pl.DataFrame, credit: dict[str, str] | None = None) -> np.ndarray:
    """Per pair: 1 when its memory (or, with ``credit``, the memory it was derived from) is gold."""
    gold = set(qrels.filter(pl.col("relevance") > 0).select("qid", "memory_id").iter_rows())
    qids, mids = prep.qids.to_list(), prep.memory_ids.to_list()
    credit = credit or {}
    source = [credit.get(m, m) for m in mids]
    return np.fromiter(((qids[q], mids[m]) in gold or (qids[q], source[m]) in gold
                        for q, m in zip(prep.pair_q.tolist(), prep.pair_m.tolist())), dtype=np.float64,
                       count=prep.n_pairs)


def training_features(prep: PreparedCandidates, config: SearchConfig) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
    """(feature names, the (pair x feature) matrix under ``config``'s base fusion, its alive mask):
    the same for every fold, so cross-validation computes it once."""
    base = without_model(config).fusion
    score, alive, _ = base_scores(prep, base)
    names = feature_names(prep, config)
    return names, feature_matrix(prep, names, score, alive, live_rows(prep, base)), alive


def train(prep: PreparedCandidates, labels: np.ndarray, config: SearchConfig, *, l2: float = DEFAULT_L2,
          queries: np.ndarray | None = None, trained_on: str = "",
          features: tuple[tuple[str, ...], np.ndarray, np.ndarray] | None = None) -> LearnedFusion:
    """A model for ``config``'s base fusion, fitted on the alive candidates of ``queries`` (a mask
    over ``prep.qids``; all by default) with ``labels`` per pair; ``features`` as
    ``training_features`` gives them, when the caller has them already."""
    names, x, alive = features or training_features(prep, config)
    use = alive if queries is None else alive & np.asarray(queries, dtype=bool)[prep.pair_q]
    mean, scale, coef, intercept = fit_logistic(x[use], labels[use], l2)
    return LearnedFusion(features=names, mean=tuple(round(float(v), 9) for v in mean),
                         scale=tuple(round(float(v), 9) for v in scale), coef=tuple(round(float(v), 9) for v in coef),
                         intercept=round(intercept, 9), trained_on=trained_on)


def without_model(config: SearchConfig) -> SearchConfig:
    return replace(config, fusion=replace(config.fusion, learned=None))


def with_model(config: SearchConfig, model: LearnedFusion, name: str | None = None) -> SearchConfig:
    return replace(config, name=name or f"{config.name}-learned",
                   description=(config.description + " " if config.description else "")
                   + f"Fused by a learned model ({model.trained_on}).",
                   fusion=replace(config.fusion, learned=model))


@dataclass
class FoldResult:
    held_out: str
    questions: int
    base: dict[str, float]
    learned: dict[str, float]

    @property
    def delta(self) -> dict[str, float]:
        return {m: round(self.learned[m] - self.base[m], 4) for m in self.base}


@dataclass
class CrossValidation:
    metrics: tuple[str, ...]
    objective: str
    folds: list[FoldResult] = field(default_factory=list)
    by_category: dict[str, dict[str, float]] = field(default_factory=dict)
    # every question scored by the model trained without its namespace, against the base: the
    # paired bootstrap CI and randomization p-value of the delta (lab.eval.metrics.compare_runs)
    pooled: list[dict[str, Any]] = field(default_factory=list)

    @property
    def wins(self) -> int:
        return sum(f.delta[self.objective] > 0 for f in self.folds)

    @property
    def adopt(self) -> bool:
        """The rule: a lever is adopted only where it wins on most folds."""
        return self.wins * 2 > len(self.folds)

    def add_fold(self, name: str, base: pl.DataFrame, held: pl.DataFrame, progress: Callable[[str], None] | None = None,
                 what: str = "") -> None:
        """One held-out fold: its questions' mean metrics under the base and the learned model."""
        self.folds.append(FoldResult(name, held.height, {m: round(float(base[m].mean()), 4) for m in self.metrics},
                                     {m: round(float(held[m].mean()), 4) for m in self.metrics}))
        if progress:
            f, o = self.folds[-1], self.objective
            progress(f"fold {name}: {what}{o} {f.base[o]:.4f} -> {f.learned[o]:.4f} ({f.delta[o]:+.4f})")

    def pool(self, base: pl.DataFrame, held: pl.DataFrame) -> None:
        """Every held-out question against the base: paired over all of them, and per category."""
        def paired(a: pl.DataFrame, b: pl.DataFrame) -> list[dict[str, Any]]:
            table = compare_runs(a, b, list(self.metrics))
            return [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items()}
                    for row in table.iter_rows(named=True)]

        self.pooled = paired(base, held)
        for cat in sorted(held["category"].unique().to_list()):
            rows = paired(base.filter(pl.col("category") == cat), held.filter(pl.col("category") == cat))
            self.by_category[str(cat)] = {r["metric"]: {k: r[k] for k in ("n", "mean_a", "mean_b", "delta", "delta_low",
                                                                           "delta_high", "p_value")} for r in rows}

    def to_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "wins": self.wins, "folds": len(self.folds), "adopt": self.adopt,
                "mean_delta": {m: round(float(np.mean([f.delta[m] for f in self.folds])), 4) for m in self.metrics},
                "per_fold": [{"held_out": f.held_out, "questions": f.questions, "base": f.base, "learned": f.learned,
                              "delta": f.delta} for f in self.folds],
                "pooled": self.pooled, "by_category": self.by_category}


def fold_groups(questions: pl.DataFrame, folds: int = 5) -> dict[str, str]:
    """qid -> its fold: its namespace where the questions span several (a LoCoMo conversation),
    else one of ``folds`` groups by a hash of the qid (stable across runs and machines)."""
    import hashlib

    pairs = questions.select("qid", "namespace").iter_rows()
    by_ns = dict(pairs)
    if len(set(by_ns.values())) >= 2:
        return {str(q): str(n) for q, n in by_ns.items()}
    check_number("folds", folds, low=2)
    return {str(q): f"fold-{int(hashlib.sha256(str(q).encode()).hexdigest(), 16) % folds + 1}" for q in by_ns}


def cross_validate(per_query: Callable[[SearchConfig], pl.DataFrame], prep: PreparedCandidates, labels: np.ndarray,
                   config: SearchConfig, questions: pl.DataFrame, *, l2: float = DEFAULT_L2, folds: int = 5,
                   metrics: Sequence[str] = ("recall@10", "ndcg@10"), objective: str = "recall@10",
                   progress: Callable[[str], None] | None = None) -> CrossValidation:
    """Leave one fold out (a namespace, or a hash group of questions; see ``fold_groups``): train
    on the others' questions, score the held-out ones.

    ``per_query(config)`` evaluates a configuration on every question (columns qid, namespace,
    category and ``metrics``); ``questions`` maps qid to namespace.
    """
    if objective not in metrics:
        raise ValidationError(f"objective {objective!r} is not among the metrics {list(metrics)}")
    groups = fold_groups(questions, folds)
    q_group = np.array([groups.get(q) for q in prep.qids.to_list()], dtype=object)
    held_out_groups = sorted({g for g in q_group if g is not None})
    base_pq = per_query(without_model(config))
    features = training_features(prep, config)
    out = CrossValidation(tuple(metrics), objective)
    held_rows = []
    for ns in held_out_groups:
        model = train(prep, labels, config, l2=l2, queries=q_group != ns, trained_on=f"cv fold without {ns}",
                      features=features)
        in_fold = [q for q, g in groups.items() if g == ns]
        pq = per_query(with_model(config, model)).filter(pl.col("qid").is_in(in_fold))
        out.add_fold(ns, base_pq.filter(pl.col("qid").is_in(in_fold)), pq, progress)
        held_rows.append(pq)
    out.pool(base_pq, pl.concat(held_rows))
    return out


def learn_fusion(retriever, dataset, config: SearchConfig, options, *, l2: float = DEFAULT_L2,
                 cv: bool = True, folds: int = 5, progress: Callable[[str], None] | None = None,
                 root: Path | None = None) -> tuple[SearchConfig, CrossValidation | None]:
    """``config`` with a model trained on all of ``dataset``'s questions, and (``cv``) the
    leave-one-namespace-out judgement of training it that way. ``options`` are the evaluation's
    (EvalOptions: cutoffs, derived credit)."""
    from lab.eval.candidate_cache import candidate_table, prepared_for  # heavy: numba
    from lab.eval.runner import scored_run  # heavy: numba

    check_number("l2", l2, above=0)
    cands, _ = candidate_table(retriever, dataset, without_model(config), depth=max(options.ks), root=root)
    prep = prepared_for(cands)
    labels = gold_labels(prep, dataset.qrels, dataset.credit if options.credit_derived else None)
    questions = dataset.questions
    judged = None
    if cv:
        ks = sorted(set(options.ks) | {10})
        metrics = ("recall@10", "ndcg@10")
        opts = replace(options, ks=tuple(ks), budget=None, ragas=False)

        def per_query(c: SearchConfig) -> pl.DataFrame:
            return scored_run(prep, c, opts, dataset)[1]

        judged = cross_validate(per_query, prep, labels, config, questions, l2=l2, folds=folds, metrics=metrics,
                                progress=progress)
    n_q = questions.height
    model = train(prep, labels, config, l2=l2,
                  trained_on=f"{dataset.name}, {n_q} questions, l2 {l2:g}, base {config.name}")
    return with_model(config, model), judged
