"""The fault suite's short form (benchmarks/faults/run.py --short): kills, two writers, damage,
bad input and security, every case passing. The full form is a README command."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_the_fault_suite_short_form_passes(tmp_path):
    out = tmp_path / "faults.json"
    got = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "faults" / "run.py"), "--short", "--out", str(out)],
                         capture_output=True, text=True, timeout=1800, cwd=ROOT)
    assert got.returncode == 0, got.stdout[-6000:] + got.stderr[-3000:]
    summary = json.loads(out.read_text())
    assert summary["failed"] == 0 and summary["bad_input_cases"] >= 60
    assert {g for g, n in summary["by_group"].items() if n} == {"kills", "writers", "damage", "input", "security"}
