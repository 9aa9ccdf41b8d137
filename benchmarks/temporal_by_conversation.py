"""Where the `lab` preset's temporal lever helps and where it hurts, conversation by conversation
(issue 46 #2): LoCoMo dev, `lab` as it is against `lab` without its temporal list (a named
window's memories, said or telling of then; a "when" question's first hits that hold a time
expression) and the analysis that finds it, per conversation and category, with the paired
change's 95% bootstrap CI and randomization p-value. Also: how many gold turns of each category
hold a time expression (`lab.search.timex`), against all turns: why a "when" question's evidence
is its datable hits.

    .venv/bin/python benchmarks/temporal_by_conversation.py [--metric recall@10]

A change whose CI excludes 0 and whose p-value is below 0.05 is marked helps / hurts; the rest
are "no clear change". Results: stdout and benchmarks/results/temporal_by_conversation.json.
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

from lab.eval.locomo import load_locomo  # noqa: E402
from lab.eval.metrics import compare_runs  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever  # noqa: E402
from lab.search import timex  # noqa: E402
from lab.search.presets import preset  # noqa: E402

METRICS = ("recall@10", "ndcg@10")


def without_temporal(config):
    """``config`` without the temporal list and without looking for a time in the question."""
    weights = {k: v for k, v in config.fusion.weights.items() if k != "temporal"}
    return replace(config, name="lab-no-temporal", signals=tuple(s for s in config.signals if s != "temporal"),
                   analysis=replace(config.analysis, temporal="off"), fusion=replace(config.fusion, weights=weights))


def verdict(row: dict) -> str:
    """helps / hurts when the bootstrap CI excludes 0 and the randomization test agrees (p < 0.05)."""
    if row["delta_low"] > 0 and row["p_value"] < 0.05:
        return "helps"
    if row["delta_high"] < 0 and row["p_value"] < 0.05:
        return "hurts"
    return "no clear change"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--metric", default="recall@10", choices=METRICS)
    args = ap.parse_args()
    dataset = load_locomo(DATASETS / "locomo" / "locomo10-dev.json")
    lab = preset("lab")
    retriever = eval_retriever(dataset, progress=True)
    options = EvalOptions(ks=(10,))
    runs = {name: evaluate(retriever, dataset, config, options).per_query
            for name, config in (("with", lab), ("without", without_temporal(lab)))}
    questions = runs["with"].select("qid", "namespace", "category")
    groups = [("all", "all")] + [(ns, "all") for ns in sorted(set(questions["namespace"]))] + \
        [(ns, cat) for ns in ["all", *sorted(set(questions["namespace"]))] for cat in sorted(set(questions["category"]))]
    table = []
    for ns, cat in groups:
        keep = questions
        if ns != "all":
            keep = keep.filter(pl.col("namespace") == ns)
        if cat != "all":
            keep = keep.filter(pl.col("category") == cat)
        if keep.height < 2:
            continue
        ids = keep["qid"].to_list()
        got = compare_runs(runs["without"].filter(pl.col("qid").is_in(ids)), runs["with"].filter(pl.col("qid").is_in(ids)),
                           [args.metric], seed=0).row(0, named=True)
        row = {"conversation": ns, "category": cat, "questions": keep.height,
               "without": round(got["mean_a"], 4), "with": round(got["mean_b"], 4), "delta": round(got["delta"], 4),
               "delta_low": round(got["delta_low"], 4), "delta_high": round(got["delta_high"], 4),
               "p_value": round(got["p_value"], 4)}
        row["verdict"] = verdict(row)
        table.append(row)
        print(f"{ns:<10} {cat:<12} n {keep.height:>4}  without {row['without']:.3f}  with {row['with']:.3f}  "
              f"delta {row['delta']:+.4f} [{row['delta_low']:+.4f}, {row['delta_high']:+.4f}]  p {row['p_value']:.3f}  "
              f"{row['verdict']}", flush=True)
    temporal = [r for r in table if r["category"] == "temporal" and r["conversation"] != "all"]
    texts = pl.Series([str(m.get("title") or "") + " " + str(m["content"]) for m in dataset.memories]).str.to_lowercase()
    has_time = dict(zip([m["id"] for m in dataset.memories], timex.dated(texts).tolist()))
    gold = dataset.qrels.join(dataset.questions.select("qid", "category"), on="qid")
    dated_share = {"all turns": round(sum(has_time.values()) / max(len(has_time), 1), 3)}
    for cat in sorted(set(gold["category"])):
        ids = gold.filter(pl.col("category") == cat)["memory_id"].to_list()
        dated_share[f"{cat} gold turns"] = round(sum(has_time.get(i, False) for i in ids) / max(len(ids), 1), 3)
    print(f"share holding a time expression: {dated_share}", flush=True)
    report("temporal_by_conversation", {
        "dataset": "locomo dev", "metric": args.metric,
        "lever": f"the temporal list (weight {lab.fusion.weights.get('temporal', 0.0):g}) and question-time analysis",
        "share_holding_a_time_expression": dated_share,
        "table": table,
        "temporal_questions": {"helps": [r["conversation"] for r in temporal if r["verdict"] == "helps"],
                               "hurts": [r["conversation"] for r in temporal if r["verdict"] == "hurts"],
                               "no_clear_change": [r["conversation"] for r in temporal if r["verdict"] == "no clear change"]},
    })


if __name__ == "__main__":
    main()
