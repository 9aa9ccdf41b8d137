"""`lab gate --export --no-track` is refused before any suite is judged: export registers the model
in MLflow, so without tracking there is nothing to judge for."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REFUSAL = "export needs tracking (the model is registered in MLflow): drop --no-track"


def _gate_file(tmp_path: Path) -> Path:
    # a suite whose dataset is nowhere: judging it would fail naming the missing dataset, so the
    # refusal can only come first if nothing was judged
    path = tmp_path / "gate.yaml"
    path.write_text(yaml.safe_dump({"model": "lab-refusal", "suites": {"gone": {"dataset": str(tmp_path / "no-such.yaml"),
                                                                                 "min": {"recall@10": 0.1}}}}))
    return path


def test_run_gate_refuses_export_without_tracking_before_judging(tmp_path: Path):
    from lab.errors import ValidationError
    from lab.gate.checks import load_gate
    from lab.gate.run import JudgeOptions, run_gate

    gate = load_gate(_gate_file(tmp_path))
    out = tmp_path / "out"
    with pytest.raises(ValidationError) as caught:
        run_gate(gate, "lab", judging=JudgeOptions(root=tmp_path / "eval"), out_root=out, track=False, export=True)
    assert str(caught.value) == REFUSAL
    assert not out.exists() and not (tmp_path / "eval").exists()  # no report folder, no evaluation store


def test_the_gate_cli_refuses_export_without_tracking_before_judging(tmp_path: Path):
    env = {**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval"), "LAB_DATASETS": str(tmp_path / "datasets"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    out = tmp_path / "out"
    got = subprocess.run([sys.executable, "-m", "lab.cli", "gate", "--config", str(_gate_file(tmp_path)), "--export",
                          "--no-track", "--out", str(out)], capture_output=True, text=True, env=env, timeout=120,
                         cwd=tmp_path)
    assert got.returncode == 2, got.stderr  # 2: invalid input, as before, but before any work
    assert got.stderr.strip() == f"error: {REFUSAL}"
    assert "no-such.yaml" not in got.stderr + got.stdout  # the missing dataset was never reached
    assert not out.exists() and not (tmp_path / "eval").exists()
