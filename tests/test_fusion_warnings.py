"""Fusion sanity warnings (issue 61 #3): a "hybrid" that never fused is said in one `warning:`
line and recorded, in `lab eval` (and so the gate), the sweep and `lab serve`'s start."""
from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import polars as pl
import pytest

from lab.embed.fake import FakeEmbedder
from lab.errors import LabWarning
from lab.eval.health import fused_warnings, list_warnings

ROOT = Path(__file__).resolve().parent.parent


def _lists(rows):
    return pl.DataFrame(rows, schema={"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32},
                        orient="row")


def test_lists_whose_ids_never_meet_or_that_answer_almost_nothing_are_named():
    rows = [(f"q{q}", f"m{q}-{r}", "vector", r) for q in range(4) for r in (1, 2)]
    rows += [(f"q{q}", f"M{q}-{r}", "lexical", r) for q in range(4) for r in (1, 2)]  # the same memories, other ids
    rows += [("q0", "m0-1", "temporal", 1)]  # a conditional list answering one question is no news
    got = list_warnings(_lists(rows), 4, ("vector", "lexical", "temporal"))
    assert got == ["lists lexical and vector never share a memory id over 4 questions: their ids may not match, so "
                   "fusion cannot combine them"]
    sparse = _lists([("q0", "m0-1", "vector", 1), ("q0", "m0-1", "lexical", 1), ("q1", "m1-1", "lexical", 1),
                     ("q2", "m2-1", "lexical", 1), ("q3", "m3-1", "lexical", 1)])
    (line,) = list_warnings(sparse, 4, ("vector", "lexical"))
    assert line.startswith("list vector returned nothing for 75% of 4 questions")
    (line,) = list_warnings(sparse.filter(pl.col("signal") == "lexical"), 4, ("vector", "lexical"))
    assert line.startswith("list vector returned nothing for 100% of 4 questions")  # enabled, never answered


def test_a_fused_ranking_equal_to_one_list_is_named_unless_the_other_lists_weigh_nothing():
    lists = _lists([(q, f"{q}-{r}", "vector", r) for q in ("a", "b") for r in (1, 2)]
                   + [(q, f"{q}-x{r}", "lexical", r) for q in ("a", "b") for r in (1, 2)])
    run = lists.filter(pl.col("signal") == "vector").select("qid", "memory_id", "rank")
    (line,) = fused_warnings(lists, run, {"vector": 1.0, "lexical": 0.01})
    assert line.startswith("the fused top 10 equals list vector's on 100% of 2 questions")
    assert fused_warnings(lists, run, {"vector": 1.0, "lexical": 0.0}) == []  # BM25 weighed out on purpose


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    from lab.eval.goldens import load_golden
    from lab.eval.stores import eval_retriever

    root = tmp_path_factory.mktemp("warnings")
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    retriever = eval_retriever(d, embedder=FakeEmbedder(), root=root)
    yield d, retriever, root
    retriever.close()


def test_lab_eval_warns_of_a_fusion_that_added_nothing_and_records_it_and_the_lab_preset_is_quiet(demo, tmp_path):
    from lab.eval.report import write_run
    from lab.eval.runner import evaluate
    from lab.search.presets import preset

    d, retriever, root = demo
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabWarning)  # the default has nothing to say about fusion
        # (the demo's 120 questions are too few to hold a figure: that warning is test_statistics')
        warnings.filterwarnings("ignore", message=r".*questions hold these figures", category=LabWarning)
        assert evaluate(retriever, d, preset("lab"), root=root).metrics["warnings"] == []
    base = preset("rrf-k60")
    # BM25 weighed next to nothing, and superseded memories kept where the vector list put them
    lopsided = replace(base, name="lopsided", fusion=replace(base.fusion, superseded="keep", weights={
        **base.fusion.weights, "lexical": 0.0001}))
    with pytest.warns(LabWarning, match=r"demo / lopsided: the fused top 10 equals list vector's on 1\d\d% of|"
                                        r"demo / lopsided: the fused top 10 equals list vector's on 9[5-9]% of"):
        result = evaluate(retriever, d, lopsided, root=root)
    assert any(line.startswith("the fused top 10 equals list vector's") for line in result.metrics["warnings"])
    folder = write_run(result, d.qrels, tmp_path / "run")
    assert json.loads((folder / "metrics.json").read_text())["warnings"] == result.metrics["warnings"]


def test_the_sweep_says_and_records_what_its_lists_say(monkeypatch, tmp_path):
    from lab.tune import sweep as sweep_mod
    from lab.tune.spec import parse_spec

    monkeypatch.setattr(sweep_mod, "list_warnings", lambda cands, n, enabled: [f"lists of {n} questions checked"])
    spec = parse_spec({"name": "w", "dataset": "demo", "strategy": "grid", "objective": "recall@10", "ks": [10],
                       "validation": 0.3, "top_n": 1, "space": {"fusion.k": [2, 60]}})
    with pytest.warns(LabWarning, match=r"sweep w: lists of \d+ questions checked"):
        result = sweep_mod.run_sweep(spec, out_root=tmp_path / "sweeps", progress=False, embedder=FakeEmbedder(),
                                     root=tmp_path / "eval", track=False)
    assert result.info["warnings"] and result.info["warnings"][0].startswith("lists of")


def test_lab_serve_repeats_at_start_what_the_gate_s_evaluation_warned():
    from lab.cli.serve import _gated_warnings

    manifest = {"metrics": {"demo": {"warnings": ["list vector returned nothing for 90% of 120 questions: ..."]},
                            "locomo": {"warnings": []}}}
    with pytest.warns(LabWarning, match=r"^the served configuration, judged on suite demo: list vector returned "
                                        r"nothing for 90%"):
        _gated_warnings(manifest)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LabWarning)
        _gated_warnings({"metrics": {"demo": {"dataset": "demo"}}})  # a bundle of before: nothing to say
