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


# the edges: the command line and the server resolve their settings from the environment; the
# workspace module is where that resolution lives
EDGES = ("lab/cli/", "lab/serve/", "lab/workspace.py")
# a module's own location, used to find lab's own code (never the project's folders): the code
# digest that keys the candidate cache, and the git commit a run records
OWN_CODE = ("lab/eval/cache.py", "lab/track/__init__.py")


def _below_the_edges():
    for path in sorted((ROOT / "lab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EDGES):
            yield rel, path.read_text(encoding="utf-8")


def test_no_layer_below_the_edges_reads_the_environment_or_locates_the_project():
    env = [rel for rel, text in _below_the_edges() if "os.environ" in text or "getenv(" in text]
    assert env == [], f"read the environment below the edges (take it from lab.workspace.current()): {env}"
    located = [rel for rel, text in _below_the_edges() if "__file__" in text and rel not in OWN_CODE]
    assert located == [], f"paths from __file__ below the edges (use the workspace's project): {located}"


def test_the_environment_check_would_catch_a_new_read(tmp_path):
    planted = ROOT / "lab" / "search" / "_planted_for_test.py"
    planted.write_text('import os\nROOT = os.environ.get("X")\n', encoding="utf-8")
    try:
        found = [rel for rel, text in _below_the_edges() if "os.environ" in text]
    finally:
        planted.unlink()
    assert found == ["lab/search/_planted_for_test.py"]
