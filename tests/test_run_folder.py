"""Run folders are written whole or not at all, say what made them, and are never mixed: a preset's
run and a system's run of the same name land in two folders; a folder made by something else is
refused with nothing written; a failure mid-write leaves the earlier run as it was."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.config import FAKE_MODEL
from lab.errors import ConflictError
from lab.eval.run_folder import MADE_BY, maker, publish

ROOT = Path(__file__).resolve().parent.parent
PRESET = maker("search configuration", "lab", "demo", None, {"context_turns": 2})
SYSTEM = maker("memory system", "lab", "demo", None, None)


def _files(**content: str):
    def write(folder: Path) -> None:
        for name, text in content.items():
            (folder / name).write_text(text)
    return write


def test_a_run_is_replaced_whole_by_the_same_maker(tmp_path):
    out = tmp_path / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "1", "categories.png": "plot"}))
    publish(out, PRESET, _files(**{"metrics.json": "2"}))
    assert sorted(p.name for p in out.iterdir()) == [MADE_BY, "metrics.json"]  # the old plot went with its run
    assert (out / "metrics.json").read_text() == "2"
    assert json.loads((out / MADE_BY).read_text())["kind"] == "search configuration"
    assert [p.name for p in tmp_path.iterdir()] == ["demo-lab"]  # no temporary folder left


def test_a_folder_made_by_another_is_refused_and_nothing_written(tmp_path):
    out = tmp_path / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "preset"}))
    with pytest.raises(ConflictError, match=r"holds a run of the search configuration 'lab' on demo, "
                                            r"not of the memory system 'lab' on demo: nothing was written"):
        publish(out, SYSTEM, _files(**{"metrics.json": "system"}))
    assert (out / "metrics.json").read_text() == "preset"


def test_a_folder_that_is_no_run_folder_is_refused(tmp_path):
    out = tmp_path / "demo-lab"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConflictError, match=r"exists and is not a run folder \(it holds notes.txt\)"):
        publish(out, PRESET, _files(**{"metrics.json": "1"}))
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_a_failure_mid_write_leaves_the_earlier_run(tmp_path):
    out = tmp_path / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "first"}))

    def half(folder: Path) -> None:
        (folder / "metrics.json").write_text("second")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        publish(out, PRESET, half)
    assert (out / "metrics.json").read_text() == "first"
    assert [p.name for p in tmp_path.iterdir()] == ["demo-lab"]


def test_a_killed_write_is_cleared_by_the_next(tmp_path):
    out = tmp_path / "demo-lab"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    left = tmp_path / f".demo-lab.writing-{int(dead.stdout)}"  # a process that is gone
    left.mkdir()
    (left / "metrics.json").write_text("half")
    alive = tmp_path / f".demo-lab.writing-{os.getppid()}"  # a process still running: maybe writing now
    alive.mkdir()
    publish(out, PRESET, _files(**{"metrics.json": "1"}))
    assert not left.exists() and alive.exists()


def test_a_preset_run_and_a_system_run_of_one_name_get_two_folders(tmp_path):
    """The reported mix: `lab eval --preset lab` then `--system lab` wrote one folder."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    base = [sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--no-track", "--quiet", "--model",
            FAKE_MODEL, "--out", str(tmp_path / "runs")]
    for extra in (["--preset", "rrf-k60"], ["--system", "toy_systems:WordOverlap"]):
        got = subprocess.run(base + extra, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
        assert got.returncode == 0, got.stderr[-2000:]
    folders = sorted(p.name for p in (tmp_path / "runs").iterdir())
    assert folders == ["demo+fake-rrf-k60", "demo-system-word-overlap"]
    made = {f: json.loads((tmp_path / "runs" / f / MADE_BY).read_text())["kind"] for f in folders}
    assert made == {"demo+fake-rrf-k60": "search configuration", "demo-system-word-overlap": "memory system"}
