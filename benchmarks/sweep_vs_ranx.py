"""The same RRF k by weight grid through ranx and through lab, on identical candidates, in one run.

    .venv/bin/python benchmarks/sweep_vs_ranx.py

ranx has no weighted RRF: each signal's run is turned into RRF scores (ranx's own
`_rrf_score_parallel`) and fused by `wsum` with the weights, which is sum w / (k + rank). Input runs
carry strictly decreasing scores in lab's order, so both sides rank the lists identically. ranx's
JIT warm-up is timed apart. Checks that both pick the same best configuration with the same
metrics (to 1e-9) and prints the speed ratio (goal: lab at least 300x faster).
"""
from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import polars as pl

from _common import DATASETS, report
from lab.eval.cache import candidate_table, prepared_for
from lab.eval.goldens import load_dataset
from lab.eval.stores import eval_retriever
from lab.search.presets import preset
from lab.tune.batch import BatchScorer

SIGNALS = ("vector", "lexical")


def main() -> None:
    from ranx import Qrels, Run, evaluate, fuse
    from ranx.fusion.rrf import _rrf_score_parallel

    dataset = load_dataset("locomo", DATASETS)
    retriever = eval_retriever(dataset)
    base = preset("lab")
    cands, _ = candidate_table(retriever, dataset, base, depth=100)
    lists = cands.filter(pl.col("signal").is_in(SIGNALS))
    qids = sorted(set.intersection(*[set(lists.filter(pl.col("signal") == s)["qid"].unique().to_list()) for s in SIGNALS])
                  & set(dataset.qrels["qid"].to_list()))
    lists = lists.filter(pl.col("qid").is_in(qids))
    qrels = dataset.qrels.filter(pl.col("qid").is_in(qids))
    runs = []
    for s in SIGNALS:
        d: dict[str, dict[str, float]] = {}
        for q, m, r in lists.filter(pl.col("signal") == s).sort("qid", "rank").select("qid", "memory_id", "rank").iter_rows():
            d.setdefault(q, {})[m] = float(-r)  # strictly decreasing: ranx keeps lab's order
        runs.append(Run(d, name=s))
    qd: dict[str, dict[str, int]] = {}
    for q, m, r in qrels.select("qid", "memory_id", "relevance").iter_rows():
        qd.setdefault(q, {})[m] = int(r)
    ranx_qrels = Qrels(qd)
    ks = [0, 1, 2, 5, 10, 20, 60, 100]
    ws = [round(0.1 * i, 1) for i in range(1, 10)]
    grid = list(itertools.product(ks, ws))

    def rrf_run(run, k):
        out = Run()
        out.name = run.name
        out.run = _rrf_score_parallel(run.run, k)
        return out

    t0 = time.perf_counter()  # JIT warm-up, reported apart
    evaluate(ranx_qrels, fuse([rrf_run(r, 60) for r in runs], norm=None, method="wsum", params={"weights": [0.5, 0.5]}),
             ["recall@10", "ndcg@10"])
    warmup = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranx_scores = []
    for k, w in grid:
        fused = fuse([rrf_run(r, k) for r in runs], norm=None, method="wsum", params={"weights": [w, round(1 - w, 1)]})
        got = evaluate(ranx_qrels, fused, ["recall@10", "ndcg@10"])
        ranx_scores.append((got["recall@10"], got["ndcg@10"]))
    ranx_s = time.perf_counter() - t0

    configs = [replace(base.fusion, k=float(k), coverage_bonus=0.0, superseded="keep",
                       weights={s: 0.0 for s in base.fusion.weights} | {"vector": w, "lexical": round(1 - w, 1)})
               for k, w in grid]
    scorer = BatchScorer(prepared_for(cands), dataset.qrels, qids, ks=(10,))
    scorer.evaluate(configs[:2])  # compile and prune, as ranx's warm-up
    t0 = time.perf_counter()
    got = scorer.evaluate(configs)
    lab_s = time.perf_counter() - t0
    lab_scores = list(zip(got["recall@10"].mean(axis=1), got["ndcg@10"].mean(axis=1)))
    diff = np.abs(np.asarray(ranx_scores) - np.asarray(lab_scores))
    best_ranx = max(range(len(grid)), key=lambda i: (ranx_scores[i][1], -i))
    best_lab = max(range(len(grid)), key=lambda i: (lab_scores[i][1], -i))
    report("sweep_vs_ranx", {
        "dataset": "locomo dev", "questions": len(qids), "grid": f"{len(ks)} k x {len(ws)} weights = {len(grid)}",
        "objective": "ndcg@10", "ranx_seconds": round(ranx_s, 2), "ranx_jit_warmup_seconds": round(warmup, 2),
        "lab_seconds": round(lab_s, 4), "speed_ratio": round(ranx_s / lab_s, 1), "goal_ratio": 300,
        "best_ranx": {"k": grid[best_ranx][0], "vector_weight": grid[best_ranx][1], "ndcg@10": ranx_scores[best_ranx][1]},
        "best_lab": {"k": grid[best_lab][0], "vector_weight": grid[best_lab][1], "ndcg@10": float(lab_scores[best_lab][1])},
        "same_best": best_ranx == best_lab,
        "max_metric_difference": float(diff.max()),
        "configs_differing_over_1e-9": int((diff > 1e-9).any(axis=1).sum()),
    })


if __name__ == "__main__":
    main()
