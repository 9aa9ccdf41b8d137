"""The same RRF k by weight grid through ranx and through lab, on identical candidates, in one run.

    .venv/bin/python benchmarks/sweep_vs_ranx.py

Both sides fuse exactly the same thing: plain weighted RRF over the vector and BM25 lists, every
other feature of lab's fusion off and named in `plain_rrf` (no other signals or views, no query
analysis, no coverage bonus, recency boost, neighbour boost, episode decay, rerank or learned
model, superseded memories kept). ranx has no weighted RRF: each list is turned into RRF scores
(ranx's own `_rrf_score_parallel`) and fused by `wsum`, which is sum w / (k + rank). Input runs
carry strictly decreasing scores in lab's order, so both rank the lists identically, and tied
fused scores are ordered by memory id on both sides (lab's rule; ranx's own order of ties is
another); ranx's JIT warm-up is timed apart, and so is the tie ordering.

Exits 1 when any configuration's metrics differ by more than 1e-9 or the best configuration
differs: a check that cannot fail is not a check. Prints the speed ratio (goal: lab 300x ranx).
"""
from __future__ import annotations

import itertools
import sys
import time
from typing import Any, Sequence

import numpy as np
import polars as pl

from _common import DATASETS, report
from lab.config import AnalysisConfig, FusionConfig, SearchConfig
from lab.search.fusion import prepare
from lab.tune.batch import BatchScorer

SIGNALS = ("vector", "lexical")
TOLERANCE = 1e-9


def plain_rrf(k: float = 60.0, vector: float = 0.5, lexical: float = 0.5) -> SearchConfig:
    """Weighted RRF over vector and BM25 and nothing else: every other feature off, by name."""
    fusion = FusionConfig(method="rrf", k=float(k), weights={s: 0.0 for s in FusionConfig().weights}
                          | {"vector": vector, "lexical": lexical},
                          intent_gating=False, coverage_bonus=0.0, recent_boost=1.0, superseded="keep",
                          rerank_depth=0, neighbour_boost=0.0, episode_decay=0.0, learned=None)
    return SearchConfig(name="plain-rrf", signals=SIGNALS, views=(), derived_facts="results",
                        analysis=AnalysisConfig(temporal="off", entities=False), fusion=fusion)


def compare(cands: pl.DataFrame, qrels: pl.DataFrame, grid: Sequence[tuple[float, float]],
            metrics: tuple[str, ...] = ("recall@10", "ndcg@10")) -> dict[str, Any]:
    """ranx and lab's batch scorer over the same candidate lists, for each (k, vector weight) of the
    grid (the BM25 weight is 1 - the vector weight): per-configuration metric means, the largest
    difference, the best configuration of each, and the time each took."""
    from ranx import Qrels, Run, evaluate, fuse
    from ranx.fusion.rrf import _rrf_score_parallel

    lists = cands.filter(pl.col("signal").is_in(SIGNALS))
    qids = sorted(set.intersection(*[set(lists.filter(pl.col("signal") == s)["qid"].unique().to_list())
                                     for s in SIGNALS]) & set(qrels["qid"].to_list()))
    lists = lists.filter(pl.col("qid").is_in(qids))
    runs = []
    for s in SIGNALS:
        d: dict[str, dict[str, float]] = {}
        for q, m, r in lists.filter(pl.col("signal") == s).sort("qid", "rank").select("qid", "memory_id", "rank").iter_rows():
            d.setdefault(q, {})[m] = float(-r)  # strictly decreasing: ranx keeps lab's order
        runs.append(Run(d, name=s))
    qd: dict[str, dict[str, int]] = {}
    for q, m, r in qrels.filter(pl.col("qid").is_in(qids)).select("qid", "memory_id", "relevance").iter_rows():
        qd.setdefault(q, {})[m] = int(r)
    ranx_qrels = Qrels(qd)

    def rrf_run(run: Any, k: float) -> Any:
        out = Run()
        out.name = run.name
        out.run = _rrf_score_parallel(run.run, k)
        return out

    t0 = time.perf_counter()  # JIT warm-up, reported apart
    evaluate(ranx_qrels, fuse([rrf_run(r, 60) for r in runs], norm=None, method="wsum", params={"weights": [0.5, 0.5]}),
             list(metrics))
    warmup = time.perf_counter() - t0

    def lab_ties(fused: Any) -> Any:
        """ranx's fused run in lab's order: by score, equal scores by memory id (ranx's own sort of
        equal scores is not stable). Each memory gets its position as a strictly decreasing score."""
        def ordered(docs: Any) -> dict[str, float]:
            ranked = sorted(docs.items(), key=lambda item: (-item[1], item[0]))
            return {m: float(-i) for i, (m, _) in enumerate(ranked)}

        return Run({q: ordered(fused.run[q]) for q in fused.run.keys()}, name=fused.name)

    # the speed: ranx's own path, as a user would run it
    t0 = time.perf_counter()
    for k, w in grid:
        fused = fuse([rrf_run(r, k) for r in runs], norm=None, method="wsum",
                     params={"weights": [w, round(1 - w, 10)]})
        evaluate(ranx_qrels, fused, list(metrics))
    ranx_s = time.perf_counter() - t0
    # the equality: the same fused scores, ranked by lab's rule for ties (not timed)
    ranx_scores = []
    for k, w in grid:
        fused = fuse([rrf_run(r, k) for r in runs], norm=None, method="wsum",
                     params={"weights": [w, round(1 - w, 10)]})
        got = evaluate(ranx_qrels, lab_ties(fused), list(metrics))
        ranx_scores.append(tuple(float(got[m]) for m in metrics))

    configs = [plain_rrf(k, w, round(1 - w, 10)).fusion for k, w in grid]
    ks = tuple(sorted({int(m.split("@")[1]) for m in metrics if "@" in m}))
    scorer = BatchScorer(prepare(lists), qrels, qids, ks=ks)
    scorer.evaluate(configs[:2])  # compile and prune, as ranx's warm-up
    t0 = time.perf_counter()
    got = scorer.evaluate(configs)
    lab_s = time.perf_counter() - t0
    lab_scores = [tuple(float(got[m][i].mean()) for m in metrics) for i in range(len(grid))]
    diff = np.abs(np.asarray(ranx_scores) - np.asarray(lab_scores))
    objective = len(metrics) - 1  # the last metric ranks, ties to the earlier configuration
    best_ranx = max(range(len(grid)), key=lambda i: (ranx_scores[i][objective], -i))
    best_lab = max(range(len(grid)), key=lambda i: (lab_scores[i][objective], -i))
    return {"questions": len(qids), "configs": len(grid), "ranx_seconds": ranx_s, "ranx_warmup_seconds": warmup,
            "lab_seconds": lab_s, "max_difference": float(diff.max()),
            "differing": int((diff > TOLERANCE).any(axis=1).sum()), "best_ranx": best_ranx, "best_lab": best_lab,
            "ranx_scores": ranx_scores, "lab_scores": lab_scores}


def main() -> int:
    from lab.eval.candidate_cache import candidate_table
    from lab.eval.goldens import load_dataset
    from lab.eval.stores import eval_retriever

    dataset = load_dataset("locomo", DATASETS)
    retriever = eval_retriever(dataset)
    cands, _ = candidate_table(retriever, dataset, plain_rrf(), depth=100)
    ks = [0, 1, 2, 5, 10, 20, 60, 100]
    ws = [round(0.1 * i, 1) for i in range(1, 10)]
    grid = list(itertools.product(ks, ws))
    got = compare(cands, dataset.qrels, grid)
    b_r, b_l = got["best_ranx"], got["best_lab"]
    same = b_r == b_l and got["differing"] == 0
    report("sweep_vs_ranx", {
        "dataset": "locomo dev", "questions": got["questions"], "grid": f"{len(ks)} k x {len(ws)} weights = {len(grid)}",
        "configuration": "plain weighted RRF over vector + BM25, every other fusion feature off (plain_rrf)",
        "objective": "ndcg@10", "ranx_seconds": round(got["ranx_seconds"], 2),
        "ranx_jit_warmup_seconds": round(got["ranx_warmup_seconds"], 2), "lab_seconds": round(got["lab_seconds"], 4),
        "speed_ratio": round(got["ranx_seconds"] / got["lab_seconds"], 1), "goal_ratio": 300,
        "best_ranx": {"k": grid[b_r][0], "vector_weight": grid[b_r][1], "ndcg@10": got["ranx_scores"][b_r][1]},
        "best_lab": {"k": grid[b_l][0], "vector_weight": grid[b_l][1], "ndcg@10": got["lab_scores"][b_l][1]},
        "same_best": b_r == b_l, "max_metric_difference": got["max_difference"],
        "configs_differing_over_1e-9": got["differing"], "equal": same,
    })
    if not same:
        print(f"FAIL: lab and ranx differ: {got['differing']} of {len(grid)} configurations by up to "
              f"{got['max_difference']:.3g}; best {grid[b_l]} (lab) vs {grid[b_r]} (ranx)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
