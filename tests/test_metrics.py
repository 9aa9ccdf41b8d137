"""Retrieval metrics against hand-computed values and ranx; bootstrap, randomization test, ragas adapter."""
from __future__ import annotations

from math import log2

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.errors import ValidationError
from lab.eval.metrics import (
    bootstrap_ci,
    by_category,
    compare_runs,
    mean_metrics,
    metric_columns,
    paired_randomization_test,
    retrieval_metrics,
)

RUN_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "rank": pl.Int64}
QRELS_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "relevance": pl.Int64}


def run_table(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=RUN_SCHEMA, orient="row")


def qrels_table(rows: list[tuple[str, str, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=QRELS_SCHEMA, orient="row")


# q1: graded, relevant a (2) at position 2 and c (1) at position 4.
# q2: x relevant at position 1; its ranks have gaps (10, 20), which must not matter.
# q3: judged but never retrieved -> all zeros.
# q4: only a non-relevant judgement -> left out. q5: run only -> ignored.
RUN = run_table([
    ("q1", "b", 1), ("q1", "a", 2), ("q1", "d", 3), ("q1", "c", 4),
    ("q2", "x", 10), ("q2", "y", 20),
    ("q4", "n", 1),
    ("q5", "a", 1),
])
QRELS = qrels_table([
    ("q1", "a", 2), ("q1", "c", 1), ("q1", "e", 0),
    ("q2", "x", 1),
    ("q3", "z", 1),
    ("q4", "n", 0),
])
KS = (1, 3, 5)


@pytest.fixture(scope="module")
def tiny() -> dict[str, dict[str, float]]:
    out = retrieval_metrics(RUN, QRELS, ks=KS)
    return {row["qid"]: row for row in out.iter_rows(named=True)}


def test_rows_and_columns(tiny):
    assert list(tiny) == ["q1", "q2", "q3"]
    assert list(next(iter(tiny.values()))) == ["qid", *metric_columns(KS)]
    assert metric_columns(KS) == [
        "recall@1", "recall@3", "recall@5", "hit@1", "hit@3", "hit@5",
        "precision@1", "precision@3", "precision@5", "mrr", "ndcg@1", "ndcg@3", "ndcg@5",
    ]


def test_recall_hit_precision_hand_computed(tiny):
    q1, q2, q3 = tiny["q1"], tiny["q2"], tiny["q3"]
    assert (q1["recall@1"], q1["recall@3"], q1["recall@5"]) == (0, 1 / 2, 2 / 2)
    assert (q1["hit@1"], q1["hit@3"], q1["hit@5"]) == (0, 1, 1)
    assert q1["precision@1"] == 0
    assert q1["precision@3"] == pytest.approx(1 / 3, abs=1e-15)
    assert q1["precision@5"] == pytest.approx(2 / 5, abs=1e-15)
    assert (q2["recall@1"], q2["hit@1"], q2["precision@1"]) == (1, 1, 1)
    assert q2["precision@5"] == pytest.approx(1 / 5, abs=1e-15)
    assert all(v == 0 for k, v in q3.items() if k != "qid")


def test_mrr_and_ndcg_hand_computed(tiny):
    q1, q2 = tiny["q1"], tiny["q2"]
    assert q1["mrr"] == 1 / 2 and q2["mrr"] == 1 / 1
    ideal = 2 / log2(2) + 1 / log2(3)  # a (2) then c (1)
    assert q1["ndcg@1"] == 0
    assert q1["ndcg@3"] == pytest.approx((2 / log2(3)) / ideal, abs=1e-12)
    assert q1["ndcg@5"] == pytest.approx((2 / log2(3) + 1 / log2(5)) / ideal, abs=1e-12)
    assert (q2["ndcg@1"], q2["ndcg@3"], q2["ndcg@5"]) == (1, 1, 1)


def test_metric_subset_and_unsorted_ks():
    out = retrieval_metrics(RUN, QRELS, ks=[5, 1, 5], metrics=["mrr", "recall"])
    assert out.columns == ["qid", "recall@1", "recall@5", "mrr"]


def test_input_order_and_equal_ranks_are_deterministic():
    shuffled = RUN.sample(fraction=1.0, shuffle=True, seed=3)
    assert retrieval_metrics(shuffled, QRELS).equals(retrieval_metrics(RUN, QRELS))
    # Equal ranks are broken by memory_id: "a" comes before "b".
    tied = run_table([("q", "b", 1), ("q", "a", 1)])
    out = retrieval_metrics(tied, qrels_table([("q", "a", 1)]), ks=(1,))
    assert out["mrr"].to_list() == [1.0] and out["hit@1"].to_list() == [1.0]


def test_empty_run_scores_zero():
    out = retrieval_metrics(run_table([]), QRELS, ks=(1,))
    assert out["qid"].to_list() == ["q1", "q2", "q3"]
    assert out.select(pl.exclude("qid")).sum_horizontal().sum() == 0


@pytest.mark.parametrize(
    "run, qrels, kwargs, fragment",
    [
        (run_table([("q", "a", 1), ("q", "a", 2)]), QRELS, {}, "repeats"),
        (run_table([("q", "a", 0)]), QRELS, {}, "rank 0"),
        (RUN.drop("rank"), QRELS, {}, "rank"),
        (RUN, QRELS.drop("relevance"), {}, "relevance"),
        (RUN, qrels_table([("q", "a", 1), ("q", "a", 2)]), {}, "repeats"),
        (RUN, QRELS, {"ks": (0, 5)}, "0"),
        (RUN, QRELS, {"ks": ()}, "empty"),
        (RUN, QRELS, {"metrics": ("recall", "map")}, "map"),
        (RUN, QRELS.with_columns(pl.col("relevance").cast(pl.Float64)), {}, "integer"),
        (RUN.with_columns(pl.lit(None, dtype=pl.String).alias("memory_id")), QRELS, {}, "null"),
    ],
)
def test_bad_input_raises(run, qrels, kwargs, fragment):
    with pytest.raises(ValidationError, match=fragment):
        retrieval_metrics(run, qrels, **kwargs)


# --- ranx cross-check ------------------------------------------------------------------


def random_case(seed: int, graded: bool, n_queries: int = 200) -> tuple[dict, dict]:
    """ranx-style dicts: qrels {q: {doc: rel}}, run {q: {doc: distinct score}}."""
    rng = np.random.default_rng(seed)
    docs = np.array([f"d{i:02d}" for i in range(60)])
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, dict[str, float]] = {}
    for i in range(n_queries):
        q = f"q{i:03d}"
        judged = rng.choice(docs, size=rng.integers(1, 9), replace=False)
        rels = rng.integers(1, 4, size=judged.size) if graded else np.ones(judged.size, dtype=int)
        qrels[q] = {str(d): int(r) for d, r in zip(judged, rels)}
        qrels[q][str(rng.choice(np.setdiff1d(docs, judged)))] = 0  # a judged non-relevant doc
        if i % 17 == 0:
            continue  # no results for this query at all
        retrieved = rng.choice(docs, size=rng.integers(1, 31), replace=False)
        scores = rng.permutation(retrieved.size) + rng.random()  # distinct: no ties
        run[q] = {str(d): float(s) for d, s in zip(retrieved, scores)}
    return qrels, run


def to_tables(qrels: dict, run: dict) -> tuple[pl.DataFrame, pl.DataFrame]:
    run_rows = []
    for q, docs in run.items():
        ranked = sorted(docs, key=lambda d: -docs[d])
        run_rows += [(q, d, r) for r, d in enumerate(ranked, start=1)]
    qrel_rows = [(q, d, rel) for q, docs in qrels.items() for d, rel in docs.items()]
    return run_table(run_rows), qrels_table(qrel_rows)


@pytest.mark.filterwarnings("ignore::Warning")
@pytest.mark.parametrize("graded", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_matches_ranx(graded, seed):
    from ranx import Qrels, Run, evaluate

    qrels, run = random_case(seed, graded)
    ks = (1, 3, 5, 10, 20, 50)  # 50 exceeds every run length (at most 30)
    ours = retrieval_metrics(*to_tables(qrels, run), ks=ks)
    rq = Qrels(qrels)
    rr = Run(run).make_comparable(rq)
    names = {"mrr": "mrr"}
    for k in ks:
        names |= {f"recall@{k}": f"recall@{k}", f"hit@{k}": f"hit_rate@{k}",
                  f"precision@{k}": f"precision@{k}", f"ndcg@{k}": f"ndcg@{k}"}
    theirs = evaluate(rq, rr, list(names.values()), return_mean=False)
    assert list(rq.keys()) == ours["qid"].to_list()  # ranx orders queries by id as we do
    assert ours.height == 200
    for col, ranx_name in names.items():
        np.testing.assert_allclose(ours[col].to_numpy(), theirs[ranx_name], rtol=0, atol=1e-9, err_msg=col)
    # The case must exercise the interesting branches, or agreement proves little.
    assert 0 < ours["hit@1"].mean() < 1 and (ours["mrr"] == 0).any()


# --- properties ------------------------------------------------------------------------


@st.composite
def ranked_case(draw):
    universe = [f"m{i}" for i in range(12)]
    retrieved = draw(st.permutations(universe).map(lambda p: p[: draw(st.integers(0, 12))]))
    relevant = draw(st.lists(st.sampled_from(universe), min_size=1, max_size=6, unique=True))
    grades = draw(st.lists(st.integers(1, 3), min_size=len(relevant), max_size=len(relevant)))
    run = run_table([("q", m, r) for r, m in enumerate(retrieved, start=1)])
    qrels = qrels_table([("q", m, g) for m, g in zip(relevant, grades)])
    return run, qrels


@settings(max_examples=150, deadline=None)
@given(ranked_case())
def test_metric_properties(case):
    run, qrels = case
    ks = list(range(1, 14))
    row = retrieval_metrics(run, qrels, ks=ks).row(0, named=True)
    n_rel = qrels.height
    for k in ks:
        recall, hit, prec, ndcg = row[f"recall@{k}"], row[f"hit@{k}"], row[f"precision@{k}"], row[f"ndcg@{k}"]
        assert 0 <= recall <= 1 and 0 <= prec <= 1 and 0 <= ndcg <= 1 + 1e-12
        assert hit >= recall and (recall == 0 or hit == 1)
        assert round(prec * k) == round(recall * n_rel)  # both count the same hits
        assert (hit == 1) == (row["mrr"] >= 1 / k)
        if k > 1:
            assert recall >= row[f"recall@{k - 1}"] and hit >= row[f"hit@{k - 1}"]
    assert row["recall@13"] == len(set(run["memory_id"]) & set(qrels["memory_id"])) / n_rel


# --- aggregation ---------------------------------------------------------------------


def test_mean_metrics_and_by_category(tiny):
    per_query = retrieval_metrics(RUN, QRELS, ks=KS)
    means = mean_metrics(per_query)
    assert list(means) == metric_columns(KS)
    assert means["recall@3"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    assert means["mrr"] == pytest.approx((1 / 2 + 1 + 0) / 3)
    cats = pl.DataFrame({"qid": ["q3", "q1", "q2", "q9"], "category": ["b", "a", "a", "c"]})
    out = by_category(per_query, cats)
    assert out["category"].to_list() == ["a", "b"] and out["n"].to_list() == [2, 1]
    assert out["recall@3"].to_list() == pytest.approx([(1 / 2 + 1) / 2, 0])
    with pytest.raises(ValidationError, match="q3"):
        by_category(per_query, cats.filter(pl.col("qid") != "q3"))
    with pytest.raises(ValidationError, match="zero questions"):
        mean_metrics(per_query.clear())


# --- bootstrap and randomization test ------------------------------------------------


def test_bootstrap_ci_contains_mean_and_is_reproducible():
    values = np.random.default_rng(7).random(300)
    mean, low, high = bootstrap_ci(values, n_resamples=2000, seed=1)
    assert mean == pytest.approx(values.mean())
    assert low < mean < high
    assert (high - low) < 0.2  # sd/sqrt(n) ~ 0.017, so a 95% interval is ~0.065 wide
    assert bootstrap_ci(values, n_resamples=2000, seed=1) == (mean, low, high)
    assert bootstrap_ci(values, n_resamples=2000, seed=2) != (mean, low, high)
    narrow = bootstrap_ci(values, n_resamples=2000, confidence=0.5, seed=1)
    assert low < narrow[1] < narrow[2] < high
    assert bootstrap_ci(np.full(10, 0.25)) == (0.25, 0.25, 0.25)


@pytest.mark.parametrize(
    "values, kwargs", [(np.array([]), {}), (np.array([0.1, np.nan]), {}), (np.ones(3), {"confidence": 1.0}),
                       (np.ones(3), {"n_resamples": 0}), (np.ones((2, 2)), {})],
)
def test_bootstrap_rejects_bad_input(values, kwargs):
    with pytest.raises(ValidationError):
        bootstrap_ci(values, **kwargs)


def test_randomization_test():
    rng = np.random.default_rng(11)
    a = rng.random(200)
    assert paired_randomization_test(a, a.copy()) == 1.0
    better = np.clip(a + 0.2 + rng.normal(0, 0.05, 200), 0, 1)
    p = paired_randomization_test(a, better, n_resamples=5000)
    assert p < 0.01 and p == 1 / 5001  # no flip reaches the observed difference
    assert paired_randomization_test(better, a, n_resamples=5000) == p  # two-sided
    noise = rng.random(200)
    p_null = paired_randomization_test(a, noise, seed=3)
    assert p_null > 0.01 and p_null == paired_randomization_test(a, noise, seed=3)
    with pytest.raises(ValidationError, match="199"):
        paired_randomization_test(a, a[:199])


def test_compare_runs():
    rng = np.random.default_rng(5)
    qids = [f"q{i:03d}" for i in range(150)]
    a = pl.DataFrame({"qid": qids, "recall@5": rng.random(150), "mrr": rng.random(150)})
    b = a.with_columns((pl.col("recall@5") + 0.1).clip(0, 1)).sample(fraction=1.0, shuffle=True, seed=1)
    b = pl.concat([b, pl.DataFrame({"qid": ["extra"], "recall@5": [1.0], "mrr": [1.0]})])
    out = compare_runs(a, b, ["recall@5", "mrr"], n_resamples=2000)
    assert out.columns == ["metric", "n", "mean_a", "mean_b", "delta", "delta_low", "delta_high", "p_value"]
    rec, mrr = out.row(0, named=True), out.row(1, named=True)
    assert rec["n"] == 150 and rec["mean_a"] == pytest.approx(a["recall@5"].mean())
    assert rec["delta"] == pytest.approx(rec["mean_b"] - rec["mean_a"])
    assert 0 < rec["delta_low"] < rec["delta"] < rec["delta_high"] and rec["p_value"] < 0.01
    assert (mrr["delta"], mrr["delta_low"], mrr["delta_high"], mrr["p_value"]) == (0, 0, 0, 1)
    with pytest.raises(ValidationError, match="no qid"):
        compare_runs(a, b.with_columns(("x" + pl.col("qid")).alias("qid")), ["mrr"])
    with pytest.raises(ValidationError, match="ndcg@10"):
        compare_runs(a, b, ["ndcg@10"])


def test_a_large_run_scores_every_query():
    # correctness at scale; the timing lives in benchmarks/eval.py, never in a test
    rng = np.random.default_rng(0)
    nq, depth = 10_000, 100
    qid = pl.Series("q", np.repeat(np.arange(nq), depth)).cast(pl.String)
    mem = pl.Series("m", rng.integers(0, 1_000_000, nq * depth) // depth * depth + np.tile(np.arange(depth), nq))
    run = pl.DataFrame({"qid": qid, "memory_id": mem.cast(pl.String), "rank": np.tile(np.arange(1, depth + 1), nq)})
    qrels = run.filter(pl.col("rank").is_in([3, 40])).select("qid", "memory_id", relevance=pl.lit(1))
    out = retrieval_metrics(run, qrels, ks=(1, 5, 10))
    assert out.height == nq and out["mrr"].to_list() == [1 / 3] * nq


# --- ragas adapter -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ragas_metrics():
    pytest.importorskip("ragas")
    from lab.eval.ragas_adapter import ragas_metrics

    return ragas_metrics


def test_ragas_hand_example(ragas_metrics):
    out = ragas_metrics([
        {"qid": "q2", "retrieved_ids": ["a", "b"], "reference_ids": ["a", "c"],
         "retrieved_texts": ["the cat sat on the mat", "stock prices fell sharply"],
         "reference_texts": ["the cat sat on the mat", "a dog barked at night outside"]},
        {"qid": "q1", "retrieved_ids": ["a", "b", "c", "d"], "reference_ids": ["d"],
         "retrieved_texts": ["zz", "yy", "xx", "a dog barked"], "reference_texts": ["a dog barked"]},
        {"qid": "q3", "retrieved_ids": [], "reference_ids": ["d"],
         "retrieved_texts": [], "reference_texts": ["a dog barked"]},
    ])
    assert out.columns == ["qid", "ragas_id_recall", "ragas_id_precision", "ragas_text_recall", "ragas_text_precision"]
    rows = {r["qid"]: r for r in out.iter_rows(named=True)}
    assert list(rows) == ["q1", "q2", "q3"]
    assert (rows["q2"]["ragas_id_recall"], rows["q2"]["ragas_id_precision"]) == (1 / 2, 1 / 2)
    assert (rows["q1"]["ragas_id_recall"], rows["q1"]["ragas_id_precision"]) == (1 / 1, 1 / 4)
    assert rows["q2"]["ragas_text_recall"] == 1 / 2
    # ragas's text precision is average precision (with a 1e-10 in the denominator).
    assert rows["q2"]["ragas_text_precision"] == pytest.approx(1 / 1, abs=1e-9)
    assert rows["q1"]["ragas_text_precision"] == pytest.approx(1 / 4, abs=1e-9)
    assert all(v == 0 for k, v in rows["q3"].items() if k != "qid")


def test_ragas_without_texts_and_bad_rows(ragas_metrics):
    out = ragas_metrics([{"qid": "q", "retrieved_ids": ["a", "b"], "reference_ids": ["a", "c"]}])
    assert out.columns == ["qid", "ragas_id_recall", "ragas_id_precision"]
    assert ragas_metrics([]).columns == out.columns
    with pytest.raises(ValidationError, match="'q'"):
        ragas_metrics([{"qid": "q", "retrieved_ids": ["a"], "reference_ids": ["a"]}] * 2)
    with pytest.raises(ValidationError, match="reference_ids"):
        ragas_metrics([{"qid": "q", "retrieved_ids": ["a"], "reference_ids": []}])
    with pytest.raises(ValidationError, match="retrieved_ids"):
        ragas_metrics([{"qid": "q", "retrieved_ids": "a", "reference_ids": ["a"]}])
    with pytest.raises(ValidationError, match="every row"):
        ragas_metrics([
            {"qid": "q", "retrieved_ids": ["a"], "reference_ids": ["a"]},
            {"qid": "r", "retrieved_ids": ["a"], "reference_ids": ["a"], "retrieved_texts": ["x"], "reference_texts": ["x"]},
        ])


@pytest.mark.filterwarnings("ignore::Warning")
def test_ragas_id_metrics_agree_with_ours_at_k(ragas_metrics):
    qrels, run = random_case(seed=4, graded=False, n_queries=120)
    run_tab, qrels_tab = to_tables(qrels, run)
    k = 5
    ours = retrieval_metrics(run_tab, qrels_tab, ks=(k,))
    top = run_tab.filter(pl.col("rank") <= k).sort("qid", "rank").group_by("qid", maintain_order=True).agg("memory_id")
    top_ids = dict(zip(top["qid"].to_list(), top["memory_id"].to_list()))
    rows = [
        {"qid": q, "retrieved_ids": top_ids.get(q, []), "reference_ids": [d for d, rel in docs.items() if rel >= 1]}
        for q, docs in qrels.items()
    ]
    theirs = ragas_metrics(rows)
    assert theirs["qid"].to_list() == ours["qid"].to_list()
    np.testing.assert_allclose(theirs["ragas_id_recall"].to_numpy(), ours[f"recall@{k}"].to_numpy(), atol=1e-12)
    # Set precision equals precision@k wherever a full top k was retrieved.
    full = np.array([len(top_ids.get(q, [])) == k for q in qrels])
    assert full.sum() > 50
    np.testing.assert_allclose(
        theirs["ragas_id_precision"].to_numpy()[full], ours[f"precision@{k}"].to_numpy()[full], atol=1e-12
    )
