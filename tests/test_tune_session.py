"""The interactive tuning session: its fast numbers equal `lab eval`'s, and its pooled assembler
equals the batch assembler, on the demo data (fake embedder) and on LoCoMo dev (real model, slow)."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lab.config import AssembleConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.eval.runner import EvalOptions, evaluate, fused_run
from lab.tune.assembly import BatchAssembler
from lab.tune.session import CURVE_KS, HEADLINE, TuneSession
from tests.conftest import require_dataset

ASSEMBLIES = [AssembleConfig(), AssembleConfig(budget=400, critical_ratio=0.5, middle_ratio=0.3, recency_ratio=0.2),
              AssembleConfig(budget=150, dedupe_threshold=0.5, counter="exact"), AssembleConfig(budget=40),
              AssembleConfig(budget=900, recent_hours=1e5, recency_threshold=0.0, reference_time="2024-01-01T00:00:00+00:00")]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return TuneSession.open("demo", root=tmp_path_factory.mktemp("eval"), embedder=FakeEmbedder())


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(np.nan_to_num(np.asarray(a, float), nan=-1.0), np.nan_to_num(np.asarray(b, float), nan=-1.0))


def _check_equal_to_eval(session: TuneSession, knobs: dict) -> None:
    search, asm = session.configure({**session.knobs(), **knobs})
    got = session.numbers(search, asm)
    ref = evaluate(session.retriever, session.dataset, search, EvalOptions(ks=CURVE_KS, budget=asm.budget, assemble=asm))
    per_q = ref.per_query.sort("qid")
    order = np.argsort(np.asarray(session.qids, dtype=object))
    for m in ("recall@1", "recall@5", "recall@10", "recall@30", "ndcg@10", "mrr", "context_recall", "context_tokens"):
        assert np.allclose(got.per_query[m][order], per_q[m].cast(pl.Float64).to_numpy(), rtol=0, atol=1e-12), m
    for m in HEADLINE[:4]:
        assert got.means[m] == pytest.approx(ref.metrics["metrics"][m], abs=1e-12)
        lo, hi = got.ci95[m]
        assert lo <= got.means[m] <= hi


@pytest.mark.parametrize("knobs", [{}, {"fusion.k": 60, "fusion.weights.lexical": 0.2},
                                   {"fusion.method": "weighted_sum", "assemble.budget": 500},
                                   {"fusion.k": 0, "assemble.critical_ratio": 0.6, "assemble.recency_ratio": 0.0},
                                   {"fusion.neighbour_boost": 0.6, "fusion.weights.lexical@plain": 2.0}])
def test_session_numbers_equal_lab_eval(demo, knobs):
    _check_equal_to_eval(demo, knobs)


def test_pooled_assembler_equals_batch_assembler(demo):
    for k in (1.0, 30.0):
        search = replace(demo.candidate.search, fusion=replace(demo.candidate.search.fusion, k=k))
        run = fused_run(demo.prepared, search, EvalOptions(), demo.dataset)
        ref = BatchAssembler.for_run(demo.retriever, demo.dataset, run, search, demo.qids).evaluate(ASSEMBLIES)
        idx, _, score = demo.numbers(search).fused
        got = demo.pool.assembler(idx, score).evaluate(ASSEMBLIES)
        for m in ref:
            assert _same(ref[m], got[m]), (k, m)


def test_outputs_and_knob_errors(demo):
    base = demo.baseline
    table = base.table(base)
    assert table["metric"].to_list() == list(HEADLINE) and table["delta"].abs().max() == 0
    curve = base.curve()
    assert curve["k"].to_list() == list(CURVE_KS) and curve["recall"].is_sorted()
    cats = base.by_category()
    assert set(cats["category"]) == set(demo.dataset.questions["category"])
    assert cats.filter(pl.col("metric") == "recall@10")["n"].sum() == demo.dataset.questions.height
    with pytest.raises(ValidationError, match="fusion.k"):
        demo.configure({"fusion.k": -1})
    with pytest.raises(ValidationError, match="unknown knob"):
        demo.configure({"fusion.kk": 1})
    with pytest.raises(ValidationError, match="critical_ratio \\+ assemble.recency_ratio"):
        demo.configure({"assemble.critical_ratio": 0.8, "assemble.recency_ratio": 0.5})


def test_error_analysis_views(demo):
    search, asm = demo.configure({"fusion.k": 60, "fusion.weights.vector": 0.2})
    n = demo.numbers(search, asm)
    misses = demo.misses(n, k=10)
    # every miss is a gold memory outside the top 10, and every question below full recall@10 has one
    assert misses.filter(pl.col("fused_rank") <= 10).height == 0
    below = {q for q, r in zip(demo.qids, n.per_query["recall@10"]) if r < 1}
    assert set(misses["qid"]) == below
    assert misses["gold_text"].null_count() == 0 and {"vector", "lexical"} <= set(misses.columns)
    one = misses.filter(pl.col("category") == misses["category"][0])
    assert demo.misses(n, k=10, category=misses["category"][0]).height == one.height
    rescues = demo.rescues(n)
    assert set(rescues["rescue"]) <= {"lexical", "semantic"}
    assert (rescues.filter(pl.col("rescue") == "lexical")["vector"].null_count()
            == rescues.filter(pl.col("rescue") == "lexical").height)
    ctx = demo.context(demo.qids[0], n)
    assert ctx.used <= asm.budget and ctx.items
    with pytest.raises(ValidationError, match="unknown question"):
        demo.context("no-such-question", n)


def test_log_records_an_mlflow_run_with_the_same_numbers(demo, tmp_path):
    from lab import track, workspace

    where = track.Tracking.of(workspace.current())  # the test process's tracking store (conftest's)
    search, asm = demo.configure({"fusion.k": 20})
    run_id, folder = demo.log(search, asm, out=tmp_path / "runs", uri=where)
    _, c, _ = track.client(where)
    got = c.get_run(run_id).data.metrics
    assert got["recall_at_10"] == pytest.approx(demo.numbers(search, asm).means["recall@10"])
    assert (folder / "per_query.parquet").is_file() or any(folder.iterdir())
    # onboarding: the experiment opens on runs (not GenAI traces), the questions are the run's input
    # dataset, and each metric's interval is one table row
    run = c.get_run(run_id)
    assert c.get_experiment(run.info.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert [(d.dataset.name, d.dataset.digest) for d in run.inputs.dataset_inputs] == [
        ("demo", f"{demo.dataset.fingerprint()}-{demo.dataset.gold_fingerprint()}")]
    table = json.loads(Path(c.download_artifacts(run_id, "metrics_ci.json")).read_text())
    row = dict(zip(table["columns"], table["data"][0]))
    assert {"metric", "mean", "ci95_low", "ci95_high"} <= set(table["columns"]) and row["ci95_low"] <= row["mean"]


@pytest.mark.slow
def test_locomo_numbers_equal_lab_eval():
    require_dataset("locomo/locomo10-dev.json")
    session = TuneSession.open("locomo")
    _check_equal_to_eval(session, {"fusion.k": 20, "assemble.budget": 1200})


def test_what_a_change_did_question_by_question(demo):
    """The tune notebook's change view: the paired table agrees with `lab compare`'s function on
    the same per-question values, the fixed/broken list is exactly the questions whose recall@10
    moved, a question's ranked list is the fused run's, and the budget curve grows with the budget."""
    from lab.eval.metrics import compare_runs
    from lab.notebook import views

    search, asm = demo.configure({**demo.knobs(), "fusion.k": 60, "fusion.weights.lexical": 0.2})
    tuned = demo.numbers(search, asm)
    paired = demo.paired(tuned)
    frame = lambda n: pl.DataFrame({"qid": demo.qids, "recall@10": n.per_query["recall@10"]})  # noqa: E731
    ref = compare_runs(frame(demo.baseline), frame(tuned), ["recall@10"], n_resamples=2000, seed=demo.seed)
    row = paired.filter(pl.col("metric") == "recall@10").row(0, named=True)
    assert row["delta"] == pytest.approx(ref["delta"][0]) and row["p_value"] == pytest.approx(ref["p_value"][0])
    assert "95% CI of the change" in views.paired_markdown(paired)

    moved = demo.changes(tuned)
    delta = tuned.per_query["recall@10"] - demo.baseline.per_query["recall@10"]
    assert moved.height == int((np.abs(delta) > 1e-12).sum()) > 0
    assert set(moved.filter(pl.col("change") == "fixed")["qid"]) == {q for q, d in zip(demo.qids, delta) if d > 0}
    assert demo.changes(demo.baseline).height == 0  # no change, nothing listed

    qid = moved["qid"][0]
    ranked = demo.ranked(qid, tuned)
    run = demo.run_frame(tuned).filter((pl.col("qid") == qid) & (pl.col("rank") <= 10)).sort("rank")
    assert ranked["memory_id"].to_list() == run["memory_id"].to_list()
    assert set(ranked.filter(pl.col("gold"))["memory_id"]) <= demo.gold_of(qid)
    with pytest.raises(ValidationError, match="unknown question 'nope'"):
        demo.ranked("nope", tuned)

    curve = demo.budget_curve(tuned, (200, 800, 3000))
    assert curve["context_tokens"].is_sorted() and curve["context_recall"].is_sorted()
    assert curve["context_tokens"][0] <= 200

    namespace = demo.dataset.questions["namespace"][0]
    live = demo.live_search("billing incident", namespace, search, k=5)
    direct = demo.retriever.search("billing incident", namespace, k=5, config=search)
    assert live["memory_id"].to_list() == [h.memory_id for h in direct]
    assert demo.live_search("   ", namespace, search).height == 0
