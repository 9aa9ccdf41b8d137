"""The fault suite's short form (benchmarks/faults/run.py --short): every group, every case passing.
Its time is reported in its summary, not asserted here: a speed figure is a benchmark's, and the
tests run on two workers at once. The full form is a README command (docs/faults.md)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# groups that start a server on a MiniLM store (each checks the real query encoder once)
SERVER_GROUPS = {"kills", "writers", "input", "security", "ids", "mcp", "proxy", "origin", "keys"}
# the fourth security pass's surfaces: the passthrough, concurrent MCP opens, the OpenAPI document,
# object stores, adapter v2, hostile files, a tracking server and Ray (docs/faults.md)
NEW_SURFACES = {"passthrough", "mcp_open", "schema", "objectstore", "adapter_v2", "files", "tracking", "ray"}
GROUPS = SERVER_GROUPS | {"damage", "adapters"} | NEW_SURFACES

pytestmark = pytest.mark.slow


def test_the_fault_suite_short_form_passes(tmp_path):
    out = tmp_path / "faults.json"
    got = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "faults" / "run.py"), "--short", "--out", str(out)],
                         capture_output=True, text=True, timeout=1800, cwd=ROOT)
    summary = json.loads(out.read_text())
    failed = [f"{o['group']}: {o['case']}: {o['observed'][:300]}" for o in summary["outcomes"] if not o["ok"]]
    assert got.returncode == 0 and not failed, "\n".join(failed) + "\n" + got.stderr[-3000:]
    assert summary["bad_input_cases"] >= 60
    assert {g for g, n in summary["by_group"].items() if n} == GROUPS
    # every kill was placed while its process ran, and every server group ran the real query encoder
    kills = [o for o in summary["outcomes"] if o["group"] == "kills" and "killed" in o["observed"]]
    assert len(kills) >= 5 and all("running at the kill" in o["observed"] for o in kills)
    real = {o["group"] for o in summary["outcomes"] if o["case"] == "server runs the real query encoder" and o["ok"]}
    assert real == SERVER_GROUPS
