"""Errata overlays (issue 61 #1): label corrections kept beside a dataset, scored beside the official
labels (`lab eval --errata FILE`), refused whole when they do not fit the data; the shipped LoCoMo
overlay's checks hold on the real dev file."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from conftest import require_dataset
from lab.config import FAKE_MODEL
from lab.errors import ValidationError
from lab.eval.dataset_ref import DatasetRef
from lab.eval.errata import apply_errata, load_errata
from lab.eval.runner import EvalOptions
from lab.flow.evaluate import EvalCandidate, Overrides, evaluate
from lab.workspace import Workspace

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "datasets" / "errata" / "locomo.yaml"


def _load(name: str):
    return DatasetRef(name).at(Workspace().datasets_root, ROOT).load()


def _overlay(tmp_path: Path, corrections: list[dict], dataset: str = "demo", name: str = "e.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"errata": 1, "dataset": dataset, "corrections": corrections}))
    return path


def _entry(**over) -> dict:
    return {"qid": "q1", "field": "category", "old": "x", "new": "y", "source": "s", "verified": "v", **over}


def test_the_shipped_locomo_overlay_fits_the_dev_file_and_every_check_holds():
    require_dataset("locomo")
    data = _load("locomo")
    errata = load_errata(SHIPPED)
    assert errata.dataset == "locomo" and len(errata.corrections) == 3
    assert all(c.check for c in errata.corrections)  # each re-verified on the data, not taken on trust
    corrected, changes = apply_errata(data, errata)
    assert changes["qid"].to_list() == ["conv-26:q140", "conv-42:q59", "conv-42:q142"]
    gold = corrected.qrels.filter(pl.col("qid") == "conv-42:q142")["memory_id"].to_list()
    assert gold == ["conv-42:D17:1", "conv-42:D17:2"]
    # the official dataset is untouched: the overlay is beside it, not patched in
    assert data.qrels.filter(pl.col("qid") == "conv-42:q142")["memory_id"].to_list() == ["conv-42:D17:2"]
    assert corrected.memories is data.memories and corrected.name == data.name


def test_lab_eval_scores_the_official_and_the_corrected_labels_side_by_side_on_locomo(tmp_path):
    require_dataset("locomo")
    ws = Workspace(eval_root=tmp_path / "eval", embed_cache=tmp_path / "cache")
    (done,) = evaluate(EvalCandidate(("bm25",)), Overrides(model=FAKE_MODEL), DatasetRef("locomo"), EvalOptions(),
                       ws, out=tmp_path / "runs", tracked=True, errata=load_errata(SHIPPED))
    metrics = json.loads((done.folder / "metrics.json").read_text())
    e = metrics["errata"]
    import mlflow  # tracked: the corrected figures beside the official ones, never instead

    logged = mlflow.MlflowClient().get_run(done.run_id).data
    assert logged.metrics["recall_at_10"] == pytest.approx(metrics["metrics"]["recall@10"])
    assert logged.metrics["corrected.recall_at_10"] == pytest.approx(e["corrected"]["recall@10"])
    assert logged.tags["lab.errata_sha256"] == e["sha256"]
    assert e["official"]["recall@10"] == metrics["metrics"]["recall@10"]  # the official figure stays the figure
    table = pl.read_parquet(done.folder / "errata.parquet")
    assert table.height == 3 and {"recall@10", "recall@10_corrected", "source", "verified"} <= set(table.columns)
    # the corrected mean is the official one moved by exactly the corrected questions
    n = metrics["questions"]
    moved = (table["recall@10_corrected"] - table["recall@10"]).sum() / n
    assert e["corrected"]["recall@10"] == pytest.approx(e["official"]["recall@10"] + moved, abs=1e-12)
    assert e["questions_changed"] == table.filter(
        (pl.col("recall@10") != pl.col("recall@10_corrected")) | (pl.col("ndcg@10") != pl.col("ndcg@10_corrected"))
        | (pl.col("mrr") != pl.col("mrr_corrected")) | (pl.col("recall@5") != pl.col("recall@5_corrected"))
        | (pl.col("hit@10") != pl.col("hit@10_corrected"))).height
    report = (done.folder / "report.md").read_text()
    assert "## Official and corrected labels" in report and "| conv-42:q142 | evidence | conv-42:D17:2 |" in report
    assert f"| recall@10 | {e['official']['recall@10']:.4f} | {e['corrected']['recall@10']:.4f} |" in report


def test_a_corrected_question_text_is_searched_again(tmp_path):
    """A question field correction changes what is asked: its candidates are searched anew."""
    data = _load("demo")
    row = data.questions.row(0, named=True)
    gold = data.qrels.filter(pl.col("qid") == row["qid"])["memory_id"][0]
    text = next(m["content"] for m in data.memories if m["id"] == gold)
    path = _overlay(tmp_path, [_entry(qid=row["qid"], field="question", old=row["question"], new=text)])
    ws = Workspace(eval_root=tmp_path / "eval", embed_cache=tmp_path / "cache")
    (done,) = evaluate(EvalCandidate(("bm25",)), Overrides(model=FAKE_MODEL), DatasetRef("demo"), EvalOptions(),
                       ws, out=tmp_path / "runs", tracked=False, errata=load_errata(path))
    table = pl.read_parquet(done.folder / "errata.parquet")
    assert table["mrr_corrected"][0] == 1.0  # the memory's own text asked: BM25 ranks it first


@pytest.mark.parametrize("entries,dataset,said", [
    ([_entry(qid="nope")], "demo", r"no question 'nope' in demo"),
    ([_entry(qid="Q", field="category", old="not-the-category")], "demo", r"the data holds '.*', the overlay expects "
                                                                          r"'not-the-category': written for other data"),
    ([_entry()], "locomo", r"corrects dataset 'locomo', not 'demo'"),
    ([_entry(qid="Q", field="evidence", old="GOLD", new=["no-such-memory"])], "demo",
     r"new evidence 'no-such-memory' is not a memory of namespace"),
    ([_entry(qid="Q", field="evidence", old="GOLD", new="OTHER", check={"text": "zebrafish quokka"})], "demo",
     r"check failed: 'zebrafish quokka' is not in the added memory"),
])
def test_an_overlay_that_does_not_fit_the_data_is_refused_naming_the_entry_and_nothing_is_applied(
        tmp_path, entries, dataset, said):
    data = _load("demo")
    q = data.questions.row(0, named=True)
    gold = sorted(data.qrels.filter(pl.col("qid") == q["qid"])["memory_id"].to_list())
    other = next(m["id"] for m in data.memories if m["namespace"] == q["namespace"] and m["id"] not in gold)
    fill = {"Q": q["qid"], "GOLD": gold, "OTHER": [other]}
    for e in entries:
        e.update({k: fill.get(v, v) if isinstance(v, str) else v for k, v in e.items()})
        if e["field"] == "category" and e["old"] == "x":
            e["old"] = q["category"]
    before = (data.qrels.clone(), data.questions.clone())
    with pytest.raises(ValidationError, match=said) as err:
        apply_errata(data, load_errata(_overlay(tmp_path, entries, dataset)))
    assert "corrections[0]" in str(err.value) or "corrects dataset" in str(err.value)
    assert data.qrels.equals(before[0]) and data.questions.equals(before[1])


@pytest.mark.parametrize("raw,said", [
    ({"dataset": "demo", "corrections": [_entry()]}, r"errata: expected the format version 1, got None"),
    ({"errata": 1, "dataset": "demo", "corrections": []}, r"corrections: expected a non-empty list"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(field="answer")]},
     r"field must be one of evidence, category, question, got 'answer' \(no figure lab computes reads an answer\)"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(new="x")]}, r"old and new are the same"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(), _entry(new="z")]},
     r"corrections\[1\] corrects q1 category again \(corrections\[0\] did\)"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(verified="")]}, r"corrections\[0\]\.verified: expected "
                                                                            r"non-empty text"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(field="evidence", old=["a"], new=[])]},
     r"new evidence is empty"),
    ({"errata": 1, "dataset": "demo", "corrections": [_entry(why="x")]}, r"unknown key\(s\) \['why'\]"),
])
def test_a_malformed_overlay_is_refused_naming_the_file_and_the_entry(tmp_path, raw, said):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValidationError, match=said) as err:
        load_errata(path)
    assert str(path) in str(err.value)


def test_the_command_refuses_a_bad_overlay_before_loading_and_errata_with_systems(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("errata: 2\ndataset: demo\ncorrections: []\n")
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "bm25", "--errata",
                          str(bad), "--no-track", "--out", str(tmp_path / "runs")], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert got.returncode == 2 and "errata: expected the format version 1, got 2" in got.stderr
    assert not (tmp_path / "runs").exists()
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", "lab", "--errata",
                          str(SHIPPED), "--no-track"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert got.returncode == 2 and "--errata scores lab's presets or a --config on the corrected labels" in got.stderr
