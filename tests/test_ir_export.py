"""Datasets out in standard IR formats (issue 61 #5): `lab datasets export` as BEIR and TREC, read
back by lab unchanged, and ranx and trec_eval itself (pytrec_eval) giving lab's recall@10, nDCG@10
and MRR to 1e-9 on the exported qrels and lab's own run file, on the demo and on LoCoMo dev."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from conftest import ROOT, require_dataset
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError

METRICS = {"recall@10": ("recall@10", "recall_10"), "ndcg@10": ("ndcg@10", "ndcg_cut_10"), "mrr": ("mrr", "recip_rank")}


def _load(name: str):
    from lab.eval.dataset_ref import DatasetRef
    from lab.workspace import Workspace

    if name == "locomo":
        require_dataset("locomo")
    ws = Workspace()
    return DatasetRef(name).at(ws.datasets_root, ROOT).load()


def _trec(path: Path, run: bool) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if run:
            out.setdefault(parts[0], {})[parts[2]] = float(parts[4])
        else:
            out.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", ["demo", "locomo"])
def test_ranx_and_trec_eval_give_labs_figures_on_the_exported_qrels_and_labs_run_file(name, tmp_path):
    import pytrec_eval
    from ranx import Qrels, Run, evaluate as ranx_evaluate

    from lab.eval.ir_export import export_dataset
    from lab.eval.report import write_run
    from lab.eval.runner import evaluate
    from lab.eval.stores import eval_retriever
    from lab.search.presets import preset

    dataset = _load(name)
    export_dataset(dataset, tmp_path / "trec", "trec")
    retriever = eval_retriever(dataset, embedder=FakeEmbedder(), root=tmp_path / "eval")
    result = evaluate(retriever, dataset, preset("lab"), root=tmp_path / "eval")
    folder = write_run(result, dataset.qrels, tmp_path / "run")
    retriever.close()
    qrels, run = _trec(tmp_path / "trec" / "qrels.trec", run=False), _trec(folder / "run.trec", run=True)
    lab = result.per_query
    official = pytrec_eval.RelevanceEvaluator(qrels, {te for _, te in METRICS.values()}).evaluate(run)
    by_ranx = ranx_evaluate(Qrels.from_file(str(tmp_path / "trec" / "qrels.trec"), kind="trec"),
                            Run.from_file(str(folder / "run.trec"), kind="trec"), [r for r, _ in METRICS.values()])
    assert set(qrels) == set(lab["qid"].to_list())  # the same questions are judged
    for metric, (ranx_name, trec_name) in METRICS.items():
        ours = float(lab[metric].mean())
        trec = sum(official.get(q, {}).get(trec_name, 0.0) for q in qrels) / len(qrels)  # unanswered: 0, as lab
        assert trec == pytest.approx(ours, abs=1e-9), metric
        assert float(by_ranx[ranx_name]) == pytest.approx(ours, abs=1e-9), metric
        per_q = dict(zip(lab["qid"].to_list(), lab[metric].to_list()))
        assert max(abs(official.get(q, {}).get(trec_name, 0.0) - v) for q, v in per_q.items()) < 1e-9, metric


def test_a_beir_export_reads_back_as_the_same_dataset_with_its_namespaces(tmp_path):
    from lab.eval.beir import load_beir
    from lab.eval.ir_export import export_dataset

    dataset = _load("demo")
    done = export_dataset(dataset, tmp_path / "demo", "beir")
    assert done["files"] == ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"] and done["namespaces"] == 3
    back = load_beir(tmp_path / "demo", split="test")
    cols = ["qid", "namespace", "question", "category"]
    with_gold = dataset.questions.filter(pl.col("qid").is_in(dataset.qrels["qid"].unique().to_list()))
    assert back.questions.select(cols).sort("qid").equals(with_gold.select(cols).sort("qid"))
    assert back.qrels.sort("qid", "memory_id").equals(
        dataset.qrels.filter(pl.col("relevance") > 0).select(back.qrels.columns).sort("qid", "memory_id"))
    ours = {m["id"]: m for m in [*dataset.memories, *dataset.saves.values()]}
    assert {m["id"] for m in back.memories} == set(ours)
    for m in back.memories:
        want = ours[m["id"]]
        assert (m["namespace"], m["content"], m["type"], str(m["created_at"])) == (
            want["namespace"], want["content"], want["type"], str(want["created_at"]))
        assert m.get("metadata") == (want.get("metadata") or None)


def test_an_export_into_a_folder_of_other_files_or_an_unknown_format_is_refused(tmp_path):
    from lab.eval.ir_export import export_dataset

    dataset = _load("demo")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ValidationError, match=r"--out .*busy exists and holds other files"):
        export_dataset(dataset, tmp_path / "busy", "trec")
    with pytest.raises(ValidationError, match=r"--format 'csv': known formats are beir, trec"):
        export_dataset(dataset, tmp_path / "new", "csv")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine" and not (tmp_path / "new").exists()
