"""Abstention: the decision (a threshold on the best candidate's cosine), carried by the library,
REST, MCP and the proxy of a real `lab serve`; measured by `lab eval --abstention` (threshold fitted
on tune, reported on held-out questions) into the run folder and MLflow; held by the gate."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import numpy as np
import polars as pl
import pytest

from conftest import ROOT, require_dataset
from lab.config import FAKE_MODEL, AbstainConfig
from lab.errors import ValidationError
from lab.eval.abstention import AbstentionOptions, auroc, fit_threshold, measure, unanswerable_questions
from lab.eval.dataset import QUESTIONS_SCHEMA, EvalDataset
from lab.search.abstain import decide
from lab.search.presets import resolve

STORED = "Melanie's daughter Rosa plays the violin every Sunday"
ABSTAINING = replace(resolve("lab"), abstain=AbstainConfig(threshold=0.9))  # the fake embedder: 1.0 for the same text


def test_auroc_and_the_fitted_threshold_on_hand_computed_cases():
    # pairs (answerable, unanswerable): 0.9>0.1, 0.9>0.85, 0.8>0.1, 0.8<0.85 -> 3 of 4
    assert auroc(np.array([0.9, 0.8]), np.array([0.1, 0.85])) == 0.75
    assert auroc(np.array([0.5]), np.array([0.5])) == 0.5  # a tie counts half
    assert auroc(np.array([0.5]), np.array([])) is None
    scores, recall = np.array([0.6, 0.2, 0.9, 0.5]), np.array([1.0, 1.0, 1.0, 0.0])
    # nothing may be lost: abstain only below the lowest answerable score
    assert fit_threshold(scores, recall, 0.0) == 0.2
    # a quarter may be lost: below 0.5 costs 0.25 (the 0.2 question), below 0.6 still 0.25 (0.5 found
    # nothing), below 0.9 would cost 0.5; the threshold sits halfway between 0.5 and 0.6
    assert fit_threshold(scores, recall, 0.25) == pytest.approx(0.55)
    with pytest.raises(ValidationError, match="no answerable tune question"):
        fit_threshold(np.array([]), np.array([]), 0.01)


def test_the_auroc_interval_is_seeded_stratified_and_says_when_too_few_hold_it():
    from lab.eval.abstention import MIN_PER_SIDE, auroc_interval, figures, too_few

    pos, neg = np.linspace(0.3, 0.9, 40), np.linspace(0.1, 0.5, 15)
    area, low, high = auroc_interval(pos, neg)
    assert area == auroc(pos, neg) and low < area < high <= 1.0
    assert auroc_interval(pos, neg) == (area, low, high)  # seeded: the same interval every time
    separated = auroc_interval(np.array([0.9, 0.8]), np.array([0.1, 0.2]))
    assert separated == (1.0, 1.0, 1.0)  # every resample keeps both sides (stratified): never undefined
    assert auroc_interval(pos, np.array([])) is None
    # fewer than MIN_PER_SIDE on a side: named, with both counts
    assert too_few(MIN_PER_SIDE, MIN_PER_SIDE) is None
    assert "only 15 unanswerable and 40 answerable" in too_few(15, 40)
    rows = pl.DataFrame({"score": [*pos, *neg], "answerable": [True] * 40 + [False] * 15,
                         "recall@10": [1.0] * 40 + [None] * 15})
    got = figures(rows, 0.4, "recall@10")
    assert got["auroc_ci95"] == [round(low, 4), round(high, 4)] and "only 15 unanswerable" in got["small_n"]


def test_the_gate_warns_when_too_few_questions_hold_the_abstention_figures(tmp_path):
    from lab.errors import LabWarning
    from lab.gate.checks import abstention_checks, load_gate

    gate = tmp_path / "gate.yaml"
    gate.write_text("suites:\n  s:\n    dataset: demo\n    abstention: {auroc: 0.5}\n")
    suite = load_gate(gate).suites[0]
    part = {"answerable": 200, "unanswerable": 6, "precision": 1.0, "recall": 0.5, "auroc": 0.8, "cost": 0.0,
            "small_n": "only 6 unanswerable and 200 answerable questions: fewer than 30 on a side"}
    with pytest.warns(LabWarning, match="gate suite s: abstention figures on only 6 unanswerable"):
        checks = abstention_checks(suite, {"threshold": 0.4, "metric": "recall@10", "validation": part})
    assert checks[0].passed and "too few to hold: only 6 unanswerable" in checks[0].note


def test_the_decision_names_its_evidence():
    assert decide(0.3, AbstainConfig()).abstain is False  # no threshold: never abstains, still says the score
    assert decide(0.3, AbstainConfig()).to_dict() == {"abstain": False, "score": 0.3, "threshold": None}
    said = decide(0.3, AbstainConfig(threshold=0.5))
    assert said.abstain and said.reason == "nothing relevant stored: best cosine 0.3000 < threshold 0.5000"
    assert decide(None, AbstainConfig(threshold=0.5)).reason == "nothing relevant stored: no candidate at all"
    with pytest.raises(ValidationError, match=r"abstain.threshold must be a finite number >= -1 and <= 1, got 2"):
        AbstainConfig(threshold=2)


def test_cross_haystack_negatives_stay_within_their_part_and_one_namespace_is_refused():
    questions = pl.DataFrame([(f"q{i}", ns, f"question {i}", "c") for i, ns in enumerate("aabbccdd")],
                             schema=QUESTIONS_SCHEMA, orient="row")
    parts = pl.DataFrame({"qid": questions["qid"], "part": ["tune"] * 6 + ["validation"] * 2})
    parts = parts.with_columns(pl.when(pl.col("qid").is_in(["q0", "q1", "q2", "q3"])).then(pl.lit("tune"))
                               .otherwise(pl.lit("validation")).alias("part"))
    data = EvalDataset("t", [], questions, pl.DataFrame(schema={"qid": pl.String, "memory_id": pl.String,
                                                                "relevance": pl.Int64}))
    negatives, kind = unanswerable_questions(data, parts)
    assert kind.startswith("cross-haystack")
    asked = dict(zip(negatives["qid"], negatives["namespace"]))
    # tune holds a and b, validation c and d: each question is asked in the other namespace of its part
    assert asked == {"q0@b": "b", "q1@b": "b", "q2@a": "a", "q3@a": "a", "q4@d": "d", "q5@d": "d",
                     "q6@c": "c", "q7@c": "c"}
    single = replace(data, questions=questions.with_columns(pl.lit("a").alias("namespace")))
    with pytest.raises(ValidationError, match="t: it has one namespace and no unanswerable questions"):
        unanswerable_questions(single, parts)


def test_search_and_context_abstain_below_the_threshold(pipe):
    pipe.save_many([{"namespace": "n", "content": STORED}, {"namespace": "n", "content": "the pool size is 64"}],
                   progress=False)
    from lab.retriever import Retriever

    with Retriever.open(pipe.store.root, embedder=pipe.embedder) as r:
        found = r.search_response(STORED, "n", config=ABSTAINING)
        assert not found.abstention.abstain and found.abstention.score == pytest.approx(1.0)
        away = r.search_response("zebra migration statistics", "n", config=ABSTAINING)
        assert away.abstention.abstain and away.abstention.score < 0.9 and away.abstention.threshold == 0.9
        assert away.results  # the results are kept: the caller can still look
        ctx = r.context("zebra migration statistics", "n", config=ABSTAINING)
        assert ctx.items == [] and ctx.render() == "" and ctx.to_dict()["abstention"]["abstain"] is True
        assert r.context(STORED, "n", config=ABSTAINING).items  # an answerable question assembles as before
        assert not r.search_response("zebra", "n").abstention.abstain  # a config without a threshold never abstains


def test_rest_mcp_and_the_proxy_carry_the_abstention(tmp_path):
    pytest.importorskip("mcp")
    from serving import ChatUpstream, Server, write_bundle

    bundle = write_bundle(tmp_path / "bundle", config=ABSTAINING)
    with ChatUpstream() as upstream, Server(bundle, tmp_path / "store", "--mcp", "--proxy-upstream", upstream.url) as srv:
        with srv.client() as c:
            assert c.post("/v1/namespaces", json={"name": "family"}).status_code == 201
            memory_id = c.post("/v1/memories", json={"namespace": "family", "content": STORED}).json()["id"]
            hit = c.post("/v1/search", json={"query": STORED, "namespace": "family"}).json()
            assert hit["abstention"]["abstain"] is False and hit["results"][0]["memory_id"] == memory_id
            miss = c.post("/v1/search", json={"query": "zebra migration statistics", "namespace": "family"}).json()
            assert miss["abstention"] == {**miss["abstention"], "abstain": True, "threshold": 0.9}
            assert miss["abstention"]["score"] < 0.9
            ctx = c.post("/v1/context", json={"query": "zebra migration statistics", "namespace": "family"}).json()
            assert ctx["abstention"]["abstain"] is True and ctx["text"] == "" and ctx["citations"] == []
            # the proxy injects nothing then, and says why in a header
            asked = {"model": "echo", "messages": [{"role": "user", "content": "zebra migration statistics"}]}
            reply = c.post("/v1/chat/completions", json=asked, headers={"X-Lab-Namespace": "family"})
            assert reply.status_code == 200 and reply.headers["x-lab-memories"] == ""
            assert reply.headers["x-lab-abstain"] == f"score={miss['abstention']['score']}; threshold=0.9"
            assert upstream.received[-1]["body"]["messages"] == asked["messages"]
            asked["messages"][0]["content"] = STORED
            reply = c.post("/v1/chat/completions", json=asked, headers={"X-Lab-Namespace": "family"})
            assert "x-lab-abstain" not in reply.headers and reply.headers["x-lab-memories"] == memory_id

        import asyncio

        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def agent() -> tuple[dict, dict]:
            async with Client(streamable_http_client(srv.url + "/mcp")) as m:
                found = await m.call_tool("memory_search", {"query": "zebra migration statistics", "namespace": "family"})
                ctx = await m.call_tool("memory_context", {"query": "zebra migration statistics", "namespace": "family"})
                return found.structured_content, ctx.structured_content

        found, ctx = asyncio.run(agent())
        assert found["abstention"] == miss["abstention"] and ctx["abstention"]["abstain"] and ctx["text"] == ""


@pytest.fixture(scope="module")
def lme_fixture(tmp_path_factory):
    from longmemeval_fixture import build_fixture

    return build_fixture(require_dataset("longmemeval-sample/longmemeval_s_sample.json"),
                         tmp_path_factory.mktemp("lme"))


def test_longmemeval_abs_questions_are_the_negatives_asked_in_their_own_haystack(lme_fixture, tmp_path):
    from lab.embed.fake import FakeEmbedder
    from lab.eval import longmemeval as lme
    from lab.eval.runner import evaluate
    from lab.eval.stores import eval_retriever

    data = lme.load_longmemeval(lme_fixture, verify=False)
    retriever = eval_retriever(data, root=tmp_path, embedder=FakeEmbedder())
    result = evaluate(retriever, data, resolve("bm25"), root=tmp_path)
    table, summary = measure(retriever, data, resolve("bm25"), result.per_query, AbstentionOptions(), root=tmp_path)
    assert summary["negatives"] == "the dataset's own"
    negatives = table.filter(~pl.col("answerable"))
    assert sorted(negatives["qid"]) == sorted(data.unanswerable["qid"])
    assert (negatives["namespace"] == negatives["qid"].map_elements(lambda q: f"lme-{q}", return_dtype=pl.String)).all()
    assert table["score"].null_count() == 0 and set(table["part"]) == {"tune", "validation"}
    counted = summary["tune"]["answerable"] + summary["validation"]["answerable"]
    assert counted == 3 and summary["tune"]["unanswerable"] + summary["validation"]["unanswerable"] == 3
    from lab.eval.tables import read_tables, write_tables  # a prepared copy (DVC's) keeps them

    assert read_tables(write_tables(data, tmp_path / "prepared")).unanswerable.equals(data.unanswerable)


def test_lab_eval_abstention_writes_the_run_folder_and_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "bm25", "--model",
                          FAKE_MODEL, "--budget", "0", "--abstention", "--abstention-cost", "0.05", "--quiet",
                          "--out", str(tmp_path / "runs"), "--tracking-uri", uri],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")})
    assert got.returncode == 0, got.stderr[-2000:]
    assert "abstention: threshold" in got.stdout and "cross-haystack" in got.stdout
    folder = tmp_path / "runs" / "demo+fake-bm25"
    measured = json.loads((folder / "metrics.json").read_text())["abstention"]
    assert measured["max_cost"] == 0.05 and measured["split"] == "by namespace"
    assert measured["tune"]["cost"] <= 0.05 + 1e-9  # fitted within its budget on tune
    table = pl.read_parquet(folder / "abstention.parquet")
    assert table.filter(~pl.col("answerable")).height == table.filter(pl.col("answerable")).height
    assert (folder / "abstention.png").stat().st_size > 10_000 and "## Abstention" in (folder / "report.md").read_text()
    from lab.track import client

    _, c, _ = client(uri)
    run = c.search_runs([c.get_experiment_by_name("lab").experiment_id])[0]
    assert run.data.metrics["abstention.threshold"] == measured["threshold"]
    assert run.data.metrics["abstention.validation.auroc"] == measured["validation"]["auroc"]
    refused = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--abstention", "--k", "5"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert refused.returncode == 2 and "--abstention costs recall@10: --k must include 10" in refused.stderr


def test_the_gate_holds_abstention_minimums(tmp_path):
    from lab.gate.checks import abstention_checks, load_gate

    gate = tmp_path / "gate.yaml"
    gate.write_text("suites:\n  s:\n    dataset: demo\n    abstention: {auroc: 0.9, precision: 0.9, cost: 0.02, "
                    "max_cost: 0.01}\n")
    suite = load_gate(gate).suites[0]
    part = {"answerable": 10, "unanswerable": 10, "precision": 0.95, "recall": 0.4, "auroc": 0.85, "cost": 0.03}
    checks = {c.name: c for c in abstention_checks(suite, {"threshold": 0.4, "metric": "recall@10",
                                                           "validation": part})}
    assert {n: c.passed for n, c in checks.items()} == {"abstention auroc": False, "abstention precision": True,
                                                        "abstention recall@10 cost": False}
    assert checks["abstention auroc"].value == 0.85 and checks["abstention recall@10 cost"].threshold == "<= 0.02"
    gate.write_text("suites:\n  s:\n    dataset: demo\n    abstention: {aucroc: 0.9}\n")
    with pytest.raises(ValidationError, match=r"suites.s.abstention: unknown key\(s\) \['aucroc'\]"):
        load_gate(gate)


def test_a_figure_without_a_denominator_says_why_in_the_figures_the_cli_and_the_report():
    from lab.cli.eval import _abstention_line
    from lab.eval.abstention import figures

    rows = pl.DataFrame({"score": [0.9, 0.8, 0.7], "answerable": [True, True, False], "recall@10": [1.0, 0.5, 0.0]})
    got = figures(rows, 0.1, "recall@10")  # nothing scores below 0.1: no question abstains
    assert got["precision"] is None and got["recall"] == 0.0
    assert got["undefined"] == {"precision": "no question scored below the threshold, so none abstained: precision "
                                             "has no denominator"}
    only_answerable = figures(rows.filter(pl.col("answerable")), 0.85, "recall@10")
    assert set(only_answerable["undefined"]) == {"recall", "auroc"}
    assert "undefined" not in figures(rows, 0.75, "recall@10")  # one abstains, of each kind there is one
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        _abstention_line({"abstention": {"threshold": 0.1, "metric": "recall@10", "negatives": "held out",
                                         "validation": got, "tune": got}})
    text = printed.getvalue()
    assert "precision -  recall 0.0" in text and "precision -: no question scored below the threshold" in text
    assert "None" not in text
