"""Evaluation runs: fuse cached candidates under a configuration and score them against gold.

The candidate cache (``lab.eval.candidate_cache``) is the point: any query-time change (fusion method, k,
weights, post-processing, zone ratios, budget) re-fuses arrays already in memory; nothing is
re-embedded or re-searched. An evaluation reads through a read-only ``Retriever``.
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from lab.config import AssembleConfig, SearchConfig, to_dict
from lab.errors import LabWarning
from lab.eval import metrics as M
from lab.eval.abstention import AbstentionOptions, measure
from lab.eval.candidate_cache import candidate_table, memo_entry, prepared_for
from lab.eval.context import context_metrics
from lab.eval.dataset import EvalDataset
from lab.eval.failures import DEPTH, bucket_summary, failure_buckets
from lab.eval.health import fused_warnings, list_health, list_warnings, signal_health
from lab.eval.longmemeval_metrics import longmemeval_metrics
from lab.eval.metrics import DEFAULT_KS, bootstrap_cis
from lab.eval.paired import small_n_lines
from lab.eval.ragas_adapter import ragas_metrics
from lab.retriever import Retriever
from lab.search.fusion import PreparedCandidates, fuse
from lab.search.rerank import memory_text, reranked

SMALL_N_METRICS = ("recall@10", "ndcg@10")  # the figures a run is read by, checked for small n


@dataclass
class EvalOptions:
    ks: tuple[int, ...] = DEFAULT_KS
    respect_top_k: bool = False  # cut at the preset's own top_k (as served) instead of max(ks)
    credit_derived: bool = False  # a hit on a derived fact counts as a hit on its source
    budget: int | None = None  # context metrics: assemble each question's results into this many tokens
    assemble: AssembleConfig = field(default_factory=AssembleConfig)
    ragas: bool = False
    abstention: AbstentionOptions | None = None  # measure abstention (lab.eval.abstention) too


@dataclass
class EvalResult:
    dataset: str
    config: SearchConfig
    options: EvalOptions
    run: pl.DataFrame  # qid, memory_id, rank, score
    per_query: pl.DataFrame  # qid, namespace, category, metric columns
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)
    abstention: pl.DataFrame | None = None  # per question asked, with --abstention (lab.eval.abstention)
    failures: pl.DataFrame | None = None  # per question with gold: its failure bucket (lab.eval.failures)
    errata: pl.DataFrame | None = None  # per correction of an errata overlay, both figures (lab.eval.errata)


def fused_run(prepared: PreparedCandidates | pl.DataFrame, config: SearchConfig, options: EvalOptions,
              dataset: EvalDataset | None = None) -> pl.DataFrame:
    top = config.fusion.top_k if options.respect_top_k else max(options.ks)
    if dataset is not None and not options.respect_top_k:  # LongMemEval's official metrics: the whole corpus
        top = max(top, int(dataset.report.get("ranking_depth") or 0))
    run = fuse(prepared, replace(config.fusion, top_k=top))
    if options.credit_derived and dataset is not None and dataset.credit:
        credit = pl.DataFrame({"memory_id": list(dataset.credit), "_src": list(dataset.credit.values())})
        run = (
            run.join(credit, on="memory_id", how="left")
            .with_columns(pl.coalesce("_src", "memory_id").alias("memory_id"))
            .sort("qid", "rank").unique(["qid", "memory_id"], keep="first", maintain_order=True)
            .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("qid").alias("rank"))
            .select("qid", "memory_id", "rank", "score")
        )
    return run


def scored_run(prepared: PreparedCandidates | pl.DataFrame, config: SearchConfig, options: EvalOptions,
               dataset: EvalDataset) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the fused run, per-question metrics: qid, namespace, category and one column per metric; a
    question without results scores 0)."""
    return score_run(fused_run(prepared, config, options, dataset), options, dataset)


def score_run(run: pl.DataFrame, options: EvalOptions, dataset: EvalDataset) -> tuple[pl.DataFrame, pl.DataFrame]:
    """``run`` and its per-question metrics (``scored_run``'s)."""
    per_query = M.retrieval_metrics(run, dataset.qrels, ks=options.ks)
    per_query = dataset.questions.select("qid", "namespace", "category").join(per_query, on="qid", how="left")
    metric_cols = [c for c in per_query.columns if c not in ("qid", "namespace", "category")]
    return run, per_query.with_columns([pl.col(c).fill_null(0.0) for c in metric_cols])


def evaluate(retriever: Retriever, dataset: EvalDataset, config: SearchConfig, options: EvalOptions | None = None, *,
             cands: pl.DataFrame | None = None, prepared: PreparedCandidates | None = None,
             root: Path | None = None) -> EvalResult:
    """Fuse cached candidates under ``config`` and score them against the dataset's gold; ``root``:
    the evaluation root whose candidate cache the questions use (None: the store's own evaluation
    root, else the workspace's)."""
    options = options or EvalOptions()
    info: dict[str, Any] = {}
    if cands is None:
        cands, info = candidate_table(retriever, dataset, config, depth=max(options.ks), root=root)
    prepared = prepared or prepared_for(cands)
    started = time.perf_counter()
    run, per_query = scored_run(prepared, config, options, dataset)
    if config.rerank.server:  # the rerank server's stage, after fusion (lab.search.rerank)
        run, per_query = score_run(_reranked_run(retriever, dataset, config, run), options, dataset)
    metric_cols = [c for c in per_query.columns if c not in ("qid", "namespace", "category")]
    means = M.mean_metrics(per_query.select("qid", *metric_cols))
    cis = bootstrap_cis(per_query.select(metric_cols).to_numpy())
    cis = dict(zip(metric_cols, cis))
    cats = M.by_category(per_query.select("qid", *metric_cols), per_query.select("qid", "category"))
    entry = memo_entry(cands)
    if entry.health is None:
        entry.health = list_health(cands, dataset)
    health = signal_health(cands, run, dataset, per_signal=entry.health)
    out: dict[str, Any] = {
        "dataset": dataset.name, "config": config.name, "questions": per_query.height,
        "metrics": means, "ci95": {c: [round(lo, 4), round(hi, 4)] for c, (_, lo, hi) in cis.items()},
        "by_category": cats.to_dicts(), "signal_health": health,
        "options": {"ks": list(options.ks), "respect_top_k": options.respect_top_k,
                    "credit_derived": options.credit_derived, "budget": options.budget},
    }
    if options.budget:
        ctx = context_metrics(retriever, dataset, run, config, replace(options.assemble, budget=options.budget))
        per_query = per_query.join(ctx, on="qid", how="left")
        out["context"] = {c: _mean(ctx[c]) for c in ctx.columns if c != "qid"}
    if options.ragas:
        k = 10 if 10 in options.ks else max(options.ks)
        gold = dataset.qrels.group_by("qid").agg(pl.col("memory_id").sort().alias("ref"))
        top = run.filter(pl.col("rank") <= k).sort("qid", "rank").group_by("qid", maintain_order=True).agg(
            pl.col("memory_id").alias("ret"))
        rows = [{"qid": q, "retrieved_ids": r or [], "reference_ids": ref}
                for q, ref, r in gold.join(top, on="qid", how="left").select("qid", "ref", "ret").iter_rows()]
        rg = ragas_metrics(rows)
        out["ragas"] = {f"{c}@{k}": _mean(rg[c]) for c in rg.columns if c != "qid"}
        per_query = per_query.join(rg, on="qid", how="left")
    if "longmemeval" in dataset.report:  # the benchmark's own retrieval metrics, beside lab's
        out["longmemeval"] = longmemeval_metrics(run, dataset.report["longmemeval"])
    # a "hybrid" that never fused: each a `warning:` line, and recorded
    out["warnings"] = (list_warnings(cands, per_query.height, (*config.signals, *config.encoders))
                       + fused_warnings(cands, run, dict(config.fusion.weights)))
    # a figure the questions are too few to hold (lab.eval.paired): a warning line, and recorded
    out["small_n"] = small_n_lines(per_query.height, out["ci95"], SMALL_N_METRICS)
    for line in out["warnings"] + out["small_n"]:
        warnings.warn(LabWarning(f"{dataset.name} / {config.name}: {line}"), stacklevel=2)
    # where each question's gold ended up, from a run at least as deep as the buckets' 100
    deep = run if options.respect_top_k or max(options.ks) >= DEPTH else fused_run(
        prepared, config, replace(options, ks=(DEPTH,)), dataset)
    failures = failure_buckets(deep, cands, dataset.qrels, per_query)
    out["failure_buckets"] = bucket_summary(failures)
    info["fuse_and_score_s"] = round(time.perf_counter() - started, 3)
    table = None
    if options.abstention is not None:
        table, out["abstention"] = measure(retriever, dataset, config, per_query, options.abstention, root=root)
    info["chunk"] = to_dict(retriever.store.recorded_config().chunk)  # the index-time configuration measured
    return EvalResult(dataset.name, config, options, run, per_query, out, info, table, failures)


def _reranked_run(retriever: Retriever, dataset: EvalDataset, config: SearchConfig, run: pl.DataFrame) -> pl.DataFrame:
    questions = dict(dataset.questions.select("qid", "question").iter_rows())

    def texts(ids: list[str]) -> dict[str, str]:
        rows = retriever.store.memories_table.get_many(ids).select("id", "title", "content")
        return {m: memory_text(t, c) for m, t, c in rows.iter_rows()}

    return reranked(run, config.rerank, questions, texts)


def _mean(column: pl.Series) -> float | None:
    """A column's mean over its non-null values; None when every value is null (no question
    placed its gold in the context, so the first gold position exists for none)."""
    mean = column.mean()
    return None if mean is None else float(mean)
