"""The workspace travels with every unit of work (issue 56): on a Ray cluster a task runs with the
driver's workspace, not the built-in defaults, so `lab eval` with $LAB_DATASETS set and no
--datasets evaluates, on every worker, the dataset the driver loaded."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.config import FAKE_MODEL

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("ray") if not os.environ.get("CI") else None  # the ray extra: CI has it

TURNS = [("Ann", "I adopted a grey cat called Pixel from the shelter"), ("Bob", "Lovely, how old is Pixel?"),
         ("Ann", "Two years old, and she hates the vacuum cleaner"), ("Bob", "I started rowing on the river"),
         ("Ann", "Rowing sounds hard, which club did you join?"), ("Bob", "The Riverside club, on Saturdays"),
         ("Ann", "My sister moved to Lisbon for a design job"), ("Bob", "Lisbon has great tiles and trams"),
         ("Ann", "I am learning to bake sourdough bread"), ("Bob", "My starter died twice last winter")]
QUESTIONS = [("What is the name of Ann's cat?", "D1:1"), ("Which rowing club did Bob join?", "D1:6"),
             ("Where did Ann's sister move?", "D2:2"), ("What is Ann learning to bake?", "D2:4"),
             ("What does Pixel hate?", "D1:3")]


def _locomo_at(root: Path) -> None:
    """A small LoCoMo-shaped dev file under a datasets root of its own (what `--dataset locomo` reads)."""
    def session(turns: list[tuple[str, str]], n: int, start: int) -> list[dict[str, str]]:
        return [{"speaker": who, "dia_id": f"D{n}:{i}", "text": text} for i, (who, text) in enumerate(turns, start)]

    conversation = {"speaker_a": "Ann", "speaker_b": "Bob",
                    "session_1_date_time": "1:56 pm on 8 May, 2023", "session_1": session(TURNS[:6], 1, 1),
                    "session_2_date_time": "10:02 am on 9 June, 2023", "session_2": session(TURNS[6:], 2, 1)}
    qa = [{"question": q, "evidence": [e], "category": 4} for q, e in QUESTIONS]
    (root / "locomo").mkdir(parents=True)
    (root / "locomo" / "locomo10-dev.json").write_text(
        json.dumps([{"sample_id": "conv-t", "conversation": conversation, "qa": qa}]), encoding="utf-8")


def _eval(env: dict[str, str], out: Path, *what: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "locomo", *what, "--no-track", "--quiet",
                           "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.slow
def test_a_system_and_presets_on_a_two_node_cluster_read_the_drivers_datasets_root(tmp_path):
    """No --datasets: $LAB_DATASETS names a root where the workers' defaults hold no such file (or
    another one); every run file on the cluster equals the local one."""
    from ray_cluster import two_node_cluster

    datasets = tmp_path / "elsewhere" / "datasets"
    _locomo_at(datasets)
    with two_node_cluster() as cluster:
        for name, flags in (("local", ["--engine", "local"]), ("ray", ["--ray-address", cluster.address])):
            env = {**cluster.env, "LAB_DATASETS": str(datasets), "LAB_EVAL_ROOT": str(tmp_path / name / "eval"),
                   "LAB_EMBED_CACHE": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            out = tmp_path / name / "runs"
            # two presets of two candidate groups: on Ray each group is a task of its own
            _eval(env, out, "--preset", "lab", "bm25", "--model", FAKE_MODEL, *flags)
            _eval(env, out, "--system", "lab", *flags)
    local, ray = tmp_path / "local" / "runs", tmp_path / "ray" / "runs"
    folders = sorted(p.name for p in local.iterdir())
    assert folders == ["locomo+fake-bm25", "locomo+fake-lab", "locomo-system-lab"]
    assert folders == sorted(p.name for p in ray.iterdir())
    for folder in folders:
        for f in ("run.trec", "run.parquet", "per_question.parquet"):
            assert (local / folder / f).read_bytes() == (ray / folder / f).read_bytes(), (folder, f)
        metrics = [json.loads((d / folder / "metrics.json").read_text()) for d in (local, ray)]
        assert metrics[0]["questions"] == len(QUESTIONS) and metrics[0]["metrics"] == metrics[1]["metrics"], folder
