"""Failure buckets (issue 61 #2): each question by where its best gold memory ended up and what
lost it, checked on hand-made lists and against the run's own hit@k on the demo goldens."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from lab.embed.fake import FakeEmbedder
from lab.eval.failures import BUCKETS, bucket_markdown, bucket_summary, failure_buckets

ROOT = Path(__file__).resolve().parent.parent


def _lists(rows):
    return pl.DataFrame(rows, schema={"qid": pl.String, "memory_id": pl.String, "signal": pl.String,
                                      "rank": pl.Int32, "score": pl.Float64}, orient="row")


def test_each_question_lands_in_the_bucket_of_its_best_gold_and_names_what_lost_it():
    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4", "q5", "q2"], "memory_id": ["g1", "g2", "g3", "g4", "g5", "g2b"],
                          "relevance": [1, 1, 1, 1, 1, 1]})
    run = pl.DataFrame({"qid": ["q1", "q2", "q2", "q3", "q4", "q5"], "memory_id": ["g1", "g2b", "g2", "g3", "x", "y"],
                        "rank": [3, 8, 12, 40, 1, 1], "score": [1.0] * 6})
    cands = _lists([("q1", "g1", "vector", 3, 0.9), ("q2", "g2", "vector", 2, 0.9), ("q2", "g2b", "lexical", 7, 1.0),
                    ("q3", "g3", "lexical", 30, 1.0), ("q4", "g4", "lexical", 60, 1.0),
                    ("q5", "g5", "_cosine", 0, 0.8)])  # a feature row is not a list: q5's gold is in none
    questions = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4", "q5"], "category": ["a", "a", "b", "b", "b"]})
    got = {r["qid"]: r for r in failure_buckets(run, cands, qrels, questions).iter_rows(named=True)}
    assert {q: r["bucket"] for q, r in got.items()} == {"q1": "top 5", "q2": "rank 6-10", "q3": "rank 11-100",
                                                        "q4": "fused below 100", "q5": "not in candidates"}
    # q2: vector had a gold memory at 2, fusion put the best one at 8: fusion lost it, from vector
    assert (got["q2"]["fused_rank"], got["q2"]["best_list"], got["q2"]["best_list_rank"], got["q2"]["lost_by"],
            got["q2"]["lists_with_gold"]) == (8, "vector", 2, "fusion", 2)
    assert (got["q3"]["lost_by"], got["q4"]["lost_by"], got["q5"]["lost_by"], got["q1"]["lost_by"]) == (
        "lists", "fusion", "lists", None)  # lexical's 30 is below 10: the list; 60 is within 100: fusion
    assert got["q4"]["fused_rank"] is None and got["q5"]["best_list"] is None
    summary = bucket_summary(failure_buckets(run, cands, qrels, questions))
    assert [summary["all"][b]["count"] for b in BUCKETS] == [1, 1, 1, 1, 1]
    assert summary["all"]["rank 6-10"]["fusion_lost_from"] == {"vector": 1}
    assert summary["by_category"]["b"]["questions"] == 3 and summary["by_category"]["a"]["top 5"]["share"] == 0.5
    table = bucket_markdown(summary)
    assert "| all | 5 | 1 (20%) | 1 (20%) [1] | 1 (20%) | 1 (20%) [1] | 1 (20%) |" in table


@pytest.fixture(scope="module")
def demo():
    from lab.eval.goldens import load_golden
    from lab.eval.stores import eval_retriever

    import tempfile

    root = Path(tempfile.mkdtemp(prefix="failures-"))
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    retriever = eval_retriever(d, embedder=FakeEmbedder(), root=root)
    yield d, retriever, root
    retriever.close()


def test_buckets_agree_with_the_runs_hit_at_k_and_reach_the_run_folder_and_report(demo, tmp_path):
    from lab.eval.report import write_run
    from lab.eval.runner import EvalOptions, evaluate
    from lab.search.presets import preset

    d, retriever, root = demo
    config = replace(preset("lab"), depth=100)  # lists as deep whatever the ks
    full = evaluate(retriever, d, config, root=root)  # a run 100 deep (the default ks)
    shallow = evaluate(retriever, d, config, EvalOptions(ks=(1, 5, 10)), root=root)  # a run 10 deep: fused again to 100
    assert full.failures.equals(shallow.failures)
    pq = full.per_query.join(full.failures.select("qid", "bucket"), on="qid", how="inner")
    assert pq.height == full.failures.height == d.qrels.filter(pl.col("relevance") > 0)["qid"].n_unique()
    top5 = pq.filter(pl.col("bucket") == "top 5")
    assert top5.height == int(pq["hit@5"].sum()) and pq.filter(pl.col("bucket").is_in(["top 5", "rank 6-10"])).height == int(pq["hit@10"].sum())
    assert pq.filter(pl.col("bucket") == "rank 11-100").height == int((pq["hit@100"] - pq["hit@10"]).sum())
    folder = write_run(full, d.qrels, tmp_path / "run")
    assert pl.read_parquet(folder / "failures.parquet").equals(full.failures)
    saved = json.loads((folder / "metrics.json").read_text())["failure_buckets"]
    assert sum(saved["all"][b]["count"] for b in BUCKETS) == full.failures.height
    assert set(saved["by_category"]) == set(full.failures["category"].unique().to_list())
    report = (folder / "report.md").read_text()
    assert "## Where the gold ended up" in report and f"| all | {full.failures.height} |" in report
    assert (folder / "failure_buckets.png").stat().st_size > 1000
