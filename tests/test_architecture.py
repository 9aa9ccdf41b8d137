"""The layer contract in pyproject.toml holds, and would catch a new upward import."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def lint(cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(cwd), "PATH": str(Path(sys.executable).parent), "NO_COLOR": "1"}
    return subprocess.run([str(LINT), "--config", str(cwd / "pyproject.toml")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layers_contract_is_kept():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 kept, 0 broken" in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    view = tmp_path / "lab" / "search" / "view.py"
    # the search layer reaching up into the facade: what the architecture exists to prevent
    view.write_text(view.read_text() + "\nfrom lab.pipeline import Pipeline  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    assert "lab.search.view -> lab.pipeline" in proc.stdout, proc.stdout
