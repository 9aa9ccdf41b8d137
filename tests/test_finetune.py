"""Fine-tuning the store's model on gold (issue 60 #1, `lab adapt --kind finetune`): end to end on
the demo with the real model (a few steps), tracked in MLflow and loaded by `lab eval --model`;
seeded training; the refusals (a model that cannot be trained, a missing extra, a write cut short)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from lab.config import DEFAULT_MODEL, FinetuneConfig
from lab.errors import ValidationError
from tests.sharing_gold import sharing_gold


def _tiny_columns():
    texts = ["the billing cluster pool size is 32", "Ledgerline is owned by the payments team",
             "the outage was caused by a full disk", "the deploy checklist lives in the wiki"]
    return {"anchor": ["pool size?", "who owns Ledgerline?", "why the outage?", "where is the checklist?"],
            "positive": texts, "negative_1": texts[1:] + texts[:1]}


@pytest.mark.slow
def test_the_same_triplets_and_seed_give_the_same_weights():
    from lab.embed.st import model_dir
    from lab.tune.finetune import train_finetune

    settings = FinetuneConfig(batch_size=2, max_steps=2, seed=3)
    first, loss = train_finetune(model_dir(), _tiny_columns(), settings)
    second, again = train_finetune(model_dir(), _tiny_columns(), settings)
    assert [s for s, _ in loss] == [1, 2] and loss == again
    a, b = first.encode(["pool size"]), second.encode(["pool size"])
    assert (a == b).all()


@pytest.mark.slow
def test_lab_adapt_finetune_on_the_demo_writes_a_tracked_model_that_lab_eval_embeds_with(tmp_path, capsys):
    from lab.cli import main
    from lab.track.connect import client

    out = tmp_path / "ft-demo"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["adapt", "--dataset", "demo", "--kind", "finetune", "--max-steps", "2", "--batch-size", "8",
                 "--out", str(out), "--tracking-uri", uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"].startswith(f"st:{out.resolve()}#") and report["base"] == DEFAULT_MODEL
    cv = report["cross_validation"]
    assert [f["held_out"] for f in cv["per_fold"]] == ["atlas", "household", "research"]
    assert {row["metric"] for row in cv["pooled"]} == {"recall@10", "ndcg@10"}
    meta = json.loads((out / "lab-finetune.json").read_text())
    assert meta["base"] == DEFAULT_MODEL and meta["trained"]["questions"] == report["questions"] > 100
    assert meta["trained"]["held_out"] == cv["pooled"] and meta["settings"]["max_steps"] == 2
    _, c, _ = client(uri)
    run = c.get_run(report["run_id"])
    assert run.data.tags["lab.kind"] == "adapt" and run.data.params["model"] == report["model"]
    assert [m.step for m in c.get_metric_history(report["run_id"], "loss")] == [1, 2]
    assert "model/lab-finetune.json" in {a.path for a in c.list_artifacts(report["run_id"], "model")}
    # lab eval embeds every memory again with it, and the run folder records it as the store's model
    runs = tmp_path / "runs"
    assert main(["eval", "--dataset", "demo", "--preset", "vector", "--model", f"st:{out}", "--out", str(runs),
                 "--no-track", "--quiet"]) == 0
    capsys.readouterr()
    (folder,) = list(runs.iterdir())
    assert json.loads((folder / "metrics.json").read_text())["models"]["store"] == report["model"]


def test_only_a_sentence_transformers_model_is_fine_tuned_and_the_trainer_needs_its_extra(monkeypatch):
    from lab.embed.base import MissingExtra
    from lab.tune.finetune import base_folder, train_finetune

    with pytest.raises(ValidationError, match=r"fine-tuning needs a sentence-transformers model; the store's model "
                                              r"is 'all-MiniLM-L6-v2-int8'"):
        base_folder("all-MiniLM-L6-v2-int8")
    monkeypatch.setitem(sys.modules, "accelerate", None)  # as if not installed
    with pytest.raises(MissingExtra, match=r"pip install -e '\.\[finetune\]'"):
        train_finetune(Path("."), _tiny_columns(), FinetuneConfig())


def test_a_write_cut_short_leaves_the_old_model_and_no_half_folder(tmp_path):
    from lab.tune.finetune import META, write_finetuned

    class Dies:
        def save(self, folder: str) -> None:
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise KeyboardInterrupt  # the process stopped while the weights were being written

    (tmp_path / "ft").mkdir()
    (tmp_path / "ft" / META).write_text("{}")
    with pytest.raises(KeyboardInterrupt):
        write_finetuned(tmp_path / "ft", Dies(), {})
    with pytest.raises(KeyboardInterrupt):
        write_finetuned(tmp_path / "new", Dies(), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft"] and (tmp_path / "ft" / META).read_text() == "{}"
    (tmp_path / "other").mkdir()
    with pytest.raises(ValidationError, match="exists and is not a fine-tuned model folder"):
        write_finetuned(tmp_path / "other", Dies(), {})


def test_lab_adapt_finetune_refuses_gold_too_small(tmp_path, capsys):
    from lab.cli import main
    from tests.conftest import demo_golden_subset

    path = demo_golden_subset(tmp_path / "five", 5)
    assert main(["adapt", "--dataset", str(path), "--kind", "finetune", "--max-steps", "1",
                 "--out", str(tmp_path / "m"), "--no-track"]) != 0
    assert "gold too small to fine-tune on: demo has 5 questions with gold, at least 8 needed" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_a_gated_candidate_on_a_local_model_packs_it_so_the_champion_loads_where_the_folder_is_not(tmp_path):
    """A fine-tuned model is a local st:PATH folder: the exported bundle carries a copy, and the
    pyfunc model (a fresh process) loads it with the original folder gone, under its recorded id."""
    import os
    import shutil
    import subprocess

    import yaml

    from lab.embed.st import model_dir
    from lab.gate.checks import load_gate
    from lab.gate.run import JudgeOptions, run_gate

    local = tmp_path / "tuned"
    shutil.copytree(model_dir(), local)  # stands in for `lab adapt --kind finetune`'s folder
    # its held-out judgement, as `lab adapt --kind finetune` records it: the gate's adapter_beats_base reads it
    held_out = [{"metric": "recall@10", "n": 120, "mean_a": 0.52, "mean_b": 0.61, "delta": 0.09, "delta_low": 0.04,
                 "delta_high": 0.13, "p_value": 0.001},
                {"metric": "ndcg@10", "n": 120, "mean_a": 0.40, "mean_b": 0.39, "delta": -0.01, "delta_low": -0.03,
                 "delta_high": 0.01, "p_value": 0.4}]
    (local / "lab-finetune.json").write_text(json.dumps({"format": 1, "kind": "finetune", "trained": {
        "dataset": "locomo", "held_out": held_out}}))
    candidate = tmp_path / "best.yaml"
    candidate.write_text(yaml.safe_dump({"name": "tuned", "save": {"embed": {"model": f"st:{local}"}}}))
    gate_file = tmp_path / "gate.yaml"
    gate_file.write_text(yaml.safe_dump({"model": "lab-tuned", "adapter_beats_base": ["ndcg@10"], "suites": {
        "demo": {"dataset": "demo", "min": {"recall@10": 0.1}}}}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    refused = run_gate(load_gate(gate_file), str(candidate), judging=JudgeOptions(root=tmp_path / "eval"),
                       out_root=tmp_path / "gate-refused", uri=uri, export=True)
    (beats,) = [c for c in refused.checks if c.suite == "fine-tune"]
    assert refused.verdict == "NO-GO" and not beats.passed and beats.value == -0.03
    assert beats.name == "fine-tune beats base ndcg@10 (held out)" and "held-out questions of locomo" in beats.note
    gate_file.write_text(yaml.safe_dump({"model": "lab-tuned", "adapter_beats_base": ["recall@10"], "suites": {
        "demo": {"dataset": "demo", "min": {"recall@10": 0.1}}}}))
    report = run_gate(load_gate(gate_file), str(candidate), judging=JudgeOptions(root=tmp_path / "eval"),
                      out_root=tmp_path / "gate", uri=uri, export=True)
    assert report.verdict == "GO" and [c.value for c in report.checks if c.suite == "fine-tune"] == [0.04]
    bundle = Path(report.export.bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    (model_id,) = manifest["packed_models"]
    assert model_id.startswith(f"st:{local.resolve()}#") and (bundle / manifest["packed_models"][model_id]).is_dir()
    shutil.rmtree(local)  # from here on only the bundle's copy exists
    code = ("import mlflow, pandas as pd; m = mlflow.pyfunc.load_model('models:/lab-tuned@champion'); "
            "r = m.unwrap_python_model().retriever; "
            "out = m.predict(pd.DataFrame({'query': ['billing service failure'], 'namespace': ['atlas'], 'k': [3]})); "
            "print(r.embedder.model_id, len(out.iloc[0]['memory_ids']))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split()[-2:] == [model_id, "3"]  # the recorded id, read from the packed copy


def test_a_held_out_questions_gold_is_never_a_training_positive_of_its_fold(monkeypatch):
    """Fine-tuning moves the memories' vectors: a held-out answer trained on as another question's
    positive would flatter the held-out figures, so the judgement leaves it out of its fold's training."""
    import numpy as np

    import lab.tune.finetune as ft
    from lab.embed.st import model_dir
    from lab.tune.learn import fold_groups

    gold, dataset = sharing_gold()
    of = fold_groups(dataset.questions, 5)
    first = sorted(set(of.values()))[0]
    held = np.asarray([r for r, q in enumerate(gold.qids) if of[q] == first])
    train = np.asarray([r for r, q in enumerate(gold.qids) if of[q] != first])
    avoid = ft.held_out_gold_texts(gold, dataset, held)
    unguarded = ft.triplets(gold, dataset, train, 1)["positive"]
    assert avoid & set(unguarded)  # the data does share gold across folds: the guard below has work to do
    guarded = ft.triplets(gold, dataset, train, 1, avoid)
    assert guarded["positive"] and not avoid & set(guarded["positive"])
    assert len(guarded["positive"]) == sum(p not in avoid for p in unguarded)

    class Trained(Exception):
        pass

    seen = {}

    def record(base, columns, settings, progress=None):
        seen["positive"] = list(columns["positive"])
        raise Trained

    monkeypatch.setattr(ft, "train_finetune", record)
    with pytest.raises(Trained):
        ft.cross_validate_finetune(gold, dataset, model_dir(), FinetuneConfig(max_steps=1))
    assert seen["positive"] == guarded["positive"]  # the first fold's training, as `lab adapt` judges it
