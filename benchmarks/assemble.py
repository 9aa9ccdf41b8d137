"""Assembly time for 500 candidates into 4,000 tokens, and token counter throughput.

    .venv/bin/python benchmarks/assemble.py [--rounds 200]

Candidates are 500 real LoCoMo turns (two conversations) with scores decaying by rank, a few
working memories and a pinned one, as the fused results of a search would be. Target: under
2 ms per assembly with the estimator. "warm" re-assembles the same candidates (a sweep or a
slider: trigram signatures, and exact token counts, are memoised per text); "cold" empties those
memos first, as for a new query's candidates. Results go to stdout and
benchmarks/results/assemble.json.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, Timer, percentiles, report  # noqa: E402

from lab.assemble import AssembleConfig, EstimateCounter, ExactCounter, Item, assemble
from lab.assemble.dedupe import clear_memo  # noqa: E402
from lab.eval.locomo import load_conversations  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    all_turns = [t for c in load_conversations(DATASETS / "locomo" / "locomo10-dev.json") for t in c.turns]
    all_texts = [t["content"] for t in all_turns]
    turns = all_turns[:500]
    items = [
        Item(t["id"], t["content"], 1.0 / (1 + i) ** 0.5, t["created_at"],
             "working" if i % 97 == 5 else "episodic", pinned=i == 40)
        for i, t in enumerate(turns)
    ]
    reference = max(t["created_at"] for t in turns)
    results: dict = {"candidates": len(items), "budget": 4000}
    for name, counter in (("estimate", EstimateCounter()), ("exact", ExactCounter())):
        config = AssembleConfig(budget=4000, counter=name)
        ctx = assemble(items, config, counter=counter, reference_time=reference)
        rounds = args.rounds if name == "estimate" else max(10, args.rounds // 10)
        warm, cold = [], []
        for _ in range(rounds):
            with Timer() as t:
                assemble(items, config, counter=counter, reference_time=reference)
            warm.append(t.seconds)
            # cold: the per-text memos (trigram signatures, exact counts) emptied, as for a new query
            clear_memo()
            getattr(counter, "_memo", {}).clear()
            with Timer() as t:
                assemble(items, config, counter=counter, reference_time=reference)
            cold.append(t.seconds)
        results[f"assemble_500_into_4000_{name}"] = {
            "warm": percentiles(warm), "cold": percentiles(cold),
            "items_placed": len(ctx.items), "tokens_used": ctx.used,
        }
        # throughput on every LoCoMo turn, memos emptied first: cold counting, no repeats
        texts = all_texts
        getattr(counter, "_memo", {}).clear()
        with Timer() as t:
            counter.count_many(texts)
        chars = sum(len(x) for x in texts)
        results[f"counter_{name}"] = {
            "texts_per_s": round(len(texts) / t.seconds), "mb_per_s": round(chars / t.seconds / 1e6, 2),
        }
    est, exact = EstimateCounter(), ExactCounter()
    sample = [i.text for i in items]
    ratio = sum(est.count_many(sample)) / sum(exact.count_many(sample))
    results["estimate_over_exact_tokens"] = round(ratio, 3)  # >1: the estimator errs on the safe side
    report("assemble", results)


if __name__ == "__main__":
    main()
