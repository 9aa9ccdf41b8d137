"""A full LoCoMo dev evaluation with a cold and a warm candidate cache.

    .venv/bin/python benchmarks/eval.py [--cold]

warm: the candidate cache exists (a second evaluation); every preset is fused and scored
(retrieval metrics with bootstrap CIs, by category, signal health) from cached candidates, with
nothing embedded or searched. Target: under 2 s for all presets together.
cold (--cold): a fresh eval folder, so the store is built, every memory and question embedded
(the shared embedding cache too is fresh) and every candidate list searched.
Results go to stdout and benchmarks/results/eval.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

SEED_PRESETS = ("lab", "maia", "maia-code", "brainbridge", "lma", "mie", "stackmemory")


def run(root: Path) -> dict:
    from lab import workspace

    workspace.use(eval_root=root, embed_cache=root / "embeddings")
    from lab.eval.candidate_cache import candidate_table, forget_loaded
    from lab.eval.locomo import load_locomo
    from lab.eval.runner import EvalOptions, evaluate
    from lab.eval.stores import eval_retriever
    from lab.search.presets import PRESETS

    forget_loaded()  # warm means the on-disk cache exists, not tables kept by an earlier run here

    started = time.perf_counter()
    dataset = load_locomo(DATASETS / "locomo" / "locomo10-dev.json")
    pipe = eval_retriever(dataset, root=root)
    store_s = time.perf_counter() - started
    t = time.perf_counter()
    tables = {p: candidate_table(pipe, dataset, PRESETS[p], depth=100, root=root) for p in SEED_PRESETS}
    candidates_s = time.perf_counter() - t
    t = time.perf_counter()
    recall = {}
    for p in SEED_PRESETS:
        # as `lab eval --preset ...` does: presets with the same candidate-time config share one
        # table, read and encoded once in the process
        r = evaluate(pipe, dataset, PRESETS[p], EvalOptions(), cands=tables[p][0])
        recall[p] = round(r.metrics["metrics"]["recall@10"], 4)
    score_s = time.perf_counter() - t
    pipe.close()
    return {"store_s": round(store_s, 2), "candidates_s": round(candidates_s, 2),
            "fuse_and_score_all_presets_s": round(score_s, 3),
            "total_s": round(time.perf_counter() - started, 2), "recall@10": recall,
            "cache_hits": {p: tables[p][1]["hit"] for p in SEED_PRESETS}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cold", action="store_true", help="also time a cold run in a fresh folder")
    args = parser.parse_args()
    results: dict = {"questions": 997, "presets": list(SEED_PRESETS)}
    if args.cold:
        with tempfile.TemporaryDirectory() as tmp:
            results["cold"] = run(Path(tmp))
            results["warm"] = run(Path(tmp))
    else:
        from lab.workspace import current

        root = current().eval_root
        run(root)  # make sure the cache exists
        results["warm"] = run(root)
    report("eval", results)


if __name__ == "__main__":
    main()
