"""Evaluation: loaders on the real files, evidence repair, BEIR, goldens, the candidate cache,
run folders, comparison, regressions. Stores use the fake embedder unless a test says otherwise."""
from __future__ import annotations

import json

import polars as pl
from pathlib import Path

import pytest

from lab.config import FusionConfig, SearchConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.eval.beir import load_beir
from lab.eval.goldens import load_golden
from lab.eval.locomo import load_locomo, repair_evidence
from lab.eval.candidate_cache import candidate_table, forget_loaded
from lab.eval.regressions import check, run_regressions
from lab.eval.report import compare, write_run
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_retriever
from lab import workspace
from tests.conftest import ROOT, require_dataset


@pytest.mark.parametrize("raw,ids,dropped", [
    ("D1:3", ["D1:3"], False), ("D8:6; D9:17", ["D8:6", "D9:17"], False), ("D:11:26", ["D11:26"], False),
    ("D", [], True), ("D99:1", [], True),
])
def test_evidence_repair(raw, ids, dropped):
    known = {"D1:3", "D8:6", "D9:17", "D11:26"}
    got, why = repair_evidence(raw, known)
    assert got == ids and (why is not None) == dropped


@pytest.mark.slow
def test_locomo_dev_loads_with_gold_and_reports_what_it_drops():
    path = require_dataset("locomo/locomo10-dev.json")
    d = load_locomo(path)
    assert len(d.memories) == 2760 and d.questions.height == 997 and d.report["questions_in_file"] == 999
    assert {r["qid"] for r in d.report["dropped"]} == {"conv-26:q31", "conv-26:q47", "conv-42:q59", "conv-42:q89"}
    assert {r["as"][0] for r in d.report["evidence_repaired"]} == {"D8:6", "D11:26"}
    assert set(d.questions["category"].unique()) == {"multi-hop", "temporal", "open-domain", "single-hop", "adversarial"}
    ids = {m["id"] for m in d.memories}
    assert set(d.qrels["memory_id"]) <= ids  # every gold id is a stored memory
    q = d.questions.filter(pl.col("qid") == "conv-26:q38")
    assert sorted(d.qrels.filter(pl.col("qid") == "conv-26:q38")["memory_id"]) == ["conv-26:D8:6", "conv-26:D9:17"]
    assert q["namespace"].item() == "conv-26"
    facts = load_locomo(path, observations=True, summaries=True)
    derived = [m for m in facts.memories if m["type"] == "fact"]
    assert derived and all(facts.credit[m["id"]].startswith(m["namespace"]) for m in derived if m["id"] in facts.credit)
    assert any(m["type"] == "topic" for m in facts.memories)
    assert all(e["relation"] == "derived_from" for e in facts.edges)


@pytest.mark.slow
def test_scifact_loads_as_beir():
    d = load_beir(require_dataset("scifact"), "train")
    assert len(d.memories) == 5183 and d.questions.height == 809 and d.qrels.height == 919
    assert d.questions["namespace"].unique().to_list() == ["scifact"]
    with pytest.raises(ValidationError, match="known splits: \\['train'\\]"):
        load_beir(require_dataset("scifact"), "test")


def test_any_beir_folder_works_and_bad_lines_name_the_file(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "T", "text": "alpha beta"}\n'
                                           '{"_id": "d2", "text": "gamma"}\n')
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "alpha?"}\n{"_id": "q2", "text": "none"}\n')
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\tdX\t1\n")
    d = load_beir(tmp_path, "test")
    assert d.questions["qid"].to_list() == ["q1"] and d.report["qrels_unknown_document"] == 1
    (tmp_path / "corpus.jsonl").write_text('{"_id": "d1"}\nnot json\n')
    with pytest.raises(ValidationError, match="corpus.jsonl line 2"):
        load_beir(tmp_path, "test")


def test_demo_golden_is_valid_and_covers_every_category():
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    cats = dict(d.questions.group_by("category").len().iter_rows())
    assert d.questions.height >= 80
    for c in ("paraphrase", "typo", "temporal", "multi-hop", "lexical", "semantic", "superseded", "save-then-search"):
        assert cats.get(c, 0) >= 5, c
    assert d.saves and d.stale.height


def test_golden_errors_name_the_question(tmp_path):
    bad = tmp_path / "g.yaml"
    bad.write_text("questions:\n  - {id: a, namespace: atlas, question: q, expected: [nope], category: lexical}\n")
    with pytest.raises(ValidationError, match=r"question 1 \(a\): memory id\(s\) \['nope'\]"):
        load_golden(bad)


@pytest.fixture
def demo_eval(tmp_path, monkeypatch):
    workspace.use(eval_root=tmp_path / "eval")
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    retriever = eval_retriever(d, embedder=FakeEmbedder(), root=tmp_path / "eval")
    yield d, retriever, tmp_path / "eval"
    retriever.close()


def test_candidate_cache_is_reused_and_fusion_changes_need_no_search(demo_eval, monkeypatch):
    d, pipe, root = demo_eval
    cfg = SearchConfig(name="two", signals=("vector", "lexical"))
    first, info = candidate_table(pipe, d, cfg, root=root)
    assert not info["hit"] and first.height
    def boom(*a, **k):
        raise AssertionError("searched or embedded again")

    monkeypatch.setattr(pipe, "candidates", boom)
    monkeypatch.setattr(pipe, "embed_queries", boom)
    again, info = candidate_table(pipe, d, cfg.__class__(**{**cfg.__dict__, "fusion": FusionConfig(k=1)}), root=root)
    assert info["hit"] and again.equals(first)
    r60 = evaluate(pipe, d, cfg, EvalOptions(ks=(1, 10)), cands=first)
    r1 = evaluate(pipe, d, SearchConfig(name="k1", fusion=FusionConfig(k=1)), EvalOptions(ks=(1, 10)), cands=first)
    assert r60.per_query.height == r1.per_query.height == d.questions.height
    assert r60.metrics["metrics"] != r1.metrics["metrics"]


def test_a_store_in_another_root_keeps_its_candidate_tables_there(tmp_path):
    """An evaluation store built under a temporary root (a benchmark's fold, a test) keeps its
    candidate tables in that root, not in the workspace's, where they outlived the store."""
    workspace.use(eval_root=tmp_path / "workspace")
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    forget_loaded()
    retriever = eval_retriever(d, embedder=FakeEmbedder(), root=tmp_path / "scratch")
    try:
        evaluate(retriever, d, SearchConfig(name="two", signals=("vector", "lexical")), EvalOptions(ks=(10,)))
    finally:
        retriever.close()
    assert list((tmp_path / "scratch" / "candidates").glob("*.parquet"))
    assert not (tmp_path / "workspace" / "candidates").exists()


def test_encodings_kept_beside_the_cache_give_the_same_evaluation(demo_eval):
    """A warm evaluation reads the table's string encodings from disk; the result must be the
    one a fresh encoding gives, and an unreadable encodings file is recomputed, not trusted."""
    d, pipe, root = demo_eval
    cfg = SearchConfig(name="hyb", signals=("vector", "lexical", "entity"))
    forget_loaded()
    cands, info = candidate_table(pipe, d, cfg, root=root)
    codes = Path(info["cache"]).with_suffix(".codes.npz")
    first = evaluate(pipe, d, cfg, EvalOptions(ks=(1, 10)), cands=cands)
    assert codes.is_file()
    forget_loaded()  # a new process: the table and its encodings come from disk
    cands, _ = candidate_table(pipe, d, cfg, root=root)
    again = evaluate(pipe, d, cfg, EvalOptions(ks=(1, 10)), cands=cands)
    assert again.metrics["metrics"] == first.metrics["metrics"] and again.run.equals(first.run)
    codes.write_bytes(b"not an npz")
    forget_loaded()
    cands, _ = candidate_table(pipe, d, cfg, root=root)
    third = evaluate(pipe, d, cfg, EvalOptions(ks=(1, 10)), cands=cands)
    assert third.run.equals(first.run)
    import numpy as np

    with np.load(codes) as z:  # rewritten
        assert len(z["qid.values"]) == d.questions.height


def test_save_then_search_memories_are_saved_after_the_build_and_found(demo_eval):
    """Save-then-search memories go through the normal save path after the indexes were built
    (so they sit in the lexical delta, as a fresh save does) and are found by search at once."""
    d, retriever, root = demo_eval
    by_ns: dict[str, list[dict]] = {}
    for qid in sorted(d.saves):
        by_ns.setdefault(d.saves[qid]["namespace"], []).append(d.saves[qid])
    for ns, saved in by_ns.items():
        idx = retriever.index(ns)
        delta_memories = {idx.memory_of[label] for label in idx.delta_labels}
        assert delta_memories == {r["id"] for r in saved}, ns
        for record in saved:
            hits = retriever.search(record["content"], ns, k=1, config=SearchConfig(name="vec", signals=("vector",)))
            assert hits[0].memory_id == record["id"]
    cands, _ = candidate_table(retriever, d, SearchConfig(name="lex", signals=("lexical", "vector")), root=root)
    found = [q for q, r in d.saves.items()
             if cands.filter((pl.col("qid") == q) & (pl.col("memory_id") == r["id"]) & (pl.col("rank") > 0)).height]
    assert len(found) >= 4, found  # paraphrased questions: the fake embedder finds 5 of the 12


def test_run_folder_compare_and_trec(demo_eval, tmp_path):
    d, pipe, root = demo_eval
    a = evaluate(pipe, d, SearchConfig(name="vec", signals=("vector",)), EvalOptions(ks=(1, 5, 10), budget=500))
    b = evaluate(pipe, d, SearchConfig(name="hyb", signals=("vector", "lexical")), EvalOptions(ks=(1, 5, 10), budget=500))
    ra, rb = write_run(a, d.qrels, tmp_path / "a"), write_run(b, d.qrels, tmp_path / "b")
    for name in ("config.yaml", "metrics.json", "per_question.parquet", "run.trec", "qrels.trec", "report.md",
                 "recall_at_k.png", "categories.png"):
        assert (ra / name).is_file(), name
    metrics = json.loads((ra / "metrics.json").read_text())
    assert 0 <= metrics["context"]["context_recall"] <= 1 and metrics["signal_health"]["signals"]["vector"]
    first = (ra / "run.trec").read_text().splitlines()[0].split()
    assert first[1] == "Q0" and first[3] == "1" and first[5] == "vec"
    from ranx import Qrels, Run, evaluate as ranx_eval

    ranx_value = ranx_eval(Qrels.from_file(str(ra / "qrels.trec"), kind="trec"),
                           Run.from_file(str(ra / "run.trec"), kind="trec"), "recall@10")
    assert ranx_value == pytest.approx(metrics["metrics"]["recall@10"], abs=1e-9)
    table = compare(ra, rb)
    row = table.filter(pl.col("metric") == "recall@10").row(0, named=True)
    assert row["delta"] == pytest.approx(b.metrics["metrics"]["recall@10"] - a.metrics["metrics"]["recall@10"])
    assert 0 <= row["p_value"] <= 1


def test_regression_check_statuses():
    assert check({"recall@10": 0.70}, {"recall@10": 0.70}, 0.005, 0.02)[0] == "OK"
    assert check({"recall@10": 0.71}, {"recall@10": 0.70}, 0.005, 0.02)[0] == "OK"
    assert check({"recall@10": 0.69}, {"recall@10": 0.70}, 0.005, 0.02)[0] == "OKISH"
    assert check({"recall@10": 0.60}, {"recall@10": 0.70}, 0.005, 0.02)[0] == "FAIL"
    assert check({}, {"recall@10": 0.70}, 0.005, 0.02)[0] == "FAIL"


@pytest.mark.slow
def test_contextual_indexing_lifts_lexical_recall_on_locomo(tmp_path):
    """On the real LoCoMo dev set, indexing each turn with the two turns before it finds more
    gold turns by BM25 alone than the plain index."""
    from lab.config import ChunkConfig, SaveConfig

    d = load_locomo(require_dataset("locomo/locomo10-dev.json"))
    bm25 = SearchConfig(name="bm25", signals=("lexical",))
    recall = {}
    for turns in (0, 2):
        cfg = SaveConfig(chunk=ChunkConfig(context_turns=turns))
        pipe = eval_retriever(d, cfg, embedder=FakeEmbedder(), root=tmp_path / f"ctx{turns}", progress=False)
        try:
            recall[turns] = evaluate(pipe, d, bm25, EvalOptions(ks=(10,))).metrics["metrics"]["recall@10"]
        finally:
            pipe.close()
    assert recall[0] > 0.5  # BM25 does not depend on the embedder: the plain figure is the real one
    assert recall[2] > recall[0] + 0.08, recall


def test_regression_conditions_do_not_leak_options_into_each_other(tmp_path, monkeypatch):
    workspace.use(eval_root=tmp_path / "eval")
    spec = tmp_path / "regressions.yaml"
    spec.write_text(
        "conditions:\n"
        "  - {name: first, dataset: demo, preset: bm25, ks: [5], expected: {recall@5: 0.0}}\n"
        "  - {name: second, dataset: demo, preset: bm25, expected: {recall@100: 1.01}}\n", encoding="utf-8")
    first, second = run_regressions(spec, out_root=tmp_path / "runs", embedder=FakeEmbedder())
    assert first.status == "OK" and second.status == "FAIL"
    assert "recall@5" in first.measured and "recall@10" not in first.measured
    # the second starts from the default cutoffs, not from the first's
    assert {"recall@1", "recall@10", "recall@100"} <= set(second.measured)
    bad = tmp_path / "bad.yaml"
    bad.write_text("conditions:\n  - {name: x, dataset: demo, preset: bm25, expected: {}, kz: [5]}\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=r"unknown key\(s\) \['kz'\]"):
        list(run_regressions(bad, embedder=FakeEmbedder()))


@pytest.mark.parametrize("raw,said", [
    ("1e400", r"reference_time: '1e400' is not an ISO 8601 date-time"),
    (".inf", r"reference_time: expected an ISO 8601 string, got float"),
    ('"tomorrow"', r"reference_time: 'tomorrow' is not an ISO 8601 date-time"),
    ("5", r"reference_time: expected an ISO 8601 string, got int"),
    ("[2026]", r"reference_time: expected an ISO 8601 string, got list"),
])
def test_goldens_check_and_eval_refuse_the_same_reference_time_with_one_line(tmp_path, capsys, raw, said):
    """One parser (lab.config.parse_time, search's own) at load: before, `lab goldens check` printed
    any value as the dataset's "now" and `lab eval` refused it later, without naming the file."""
    from lab.cli import main

    golden = tmp_path / "g.yaml"
    golden.write_text((ROOT / "goldens" / "demo.yaml").read_text().replace(
        'reference_time: "2026-03-14T18:00:00Z"', f"reference_time: {raw}"))
    lines = []
    for argv in (["goldens", "check", str(golden)],
                 ["eval", "--dataset", str(golden), "--preset", "bm25", "--no-track", "--quiet", "--out",
                  str(tmp_path / "runs")]):
        assert main(argv) == 2
        lines.append(capsys.readouterr().err.strip())
    assert lines[0] == lines[1] and "\n" not in lines[0]
    assert lines[0].startswith(f"error: {golden}: ") and __import__("re").search(said, lines[0]), lines[0]


def test_a_yaml_date_time_as_reference_time_is_read_as_iso_text_both_ways(tmp_path):
    """Unquoted, YAML reads a date-time: kept as ISO 8601 text, the instant search reads."""
    from lab.config import parse_time
    from lab.eval.goldens import describe_golden

    golden = tmp_path / "g.yaml"
    golden.write_text((ROOT / "goldens" / "demo.yaml").read_text().replace(
        'reference_time: "2026-03-14T18:00:00Z"', "reference_time: 2026-03-14 20:00:00+02:00"))
    assert load_golden(golden).reference_time == "2026-03-14T18:00:00Z"
    assert describe_golden(golden)["reference_time"] == "2026-03-14T18:00:00Z"
    assert parse_time(load_golden(golden).reference_time, "reference_time") == parse_time(
        load_golden(ROOT / "goldens" / "demo.yaml").reference_time, "reference_time")


def _build_demo_store(root: str) -> str:
    from lab.eval.goldens import load_golden
    from lab.eval.stores import eval_store

    return str(eval_store(load_golden(ROOT / "goldens" / "demo.yaml"), root=Path(root), embedder=FakeEmbedder()))


def test_two_processes_asking_for_one_evaluation_store_build_it_once(tmp_path):
    """Two test workers or evaluations at once: the second waits for the first's build (without the
    lock both saved every memory, and the store held each twice)."""
    import multiprocessing

    from lab.store.store import Store

    with multiprocessing.get_context("spawn").Pool(2) as pool:
        paths = pool.map(_build_demo_store, [str(tmp_path / "eval")] * 2)
    assert paths[0] == paths[1]
    stored = Store.open(paths[0], read_only=True).memories_table.stored()
    assert stored.height == stored["id"].n_unique() > 300
