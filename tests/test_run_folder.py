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
from lab.errors import ConflictError, LabError, ValidationError
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

    with pytest.raises(LabError, match=r"run folder .*demo-lab cannot be written: disk full; the earlier run, if any, "
                                       r"is as it was"):
        publish(out, PRESET, half)  # one line naming the folder, not a traceback
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


# a real process that publishes a second run and is held exactly between publish()'s two renames:
# os.rename is wrapped so that, right after the earlier run was renamed aside, it says so in a
# file and waits to be killed (nothing else in publish is changed)
BETWEEN_RENAMES = r"""
import os, sys, time
from pathlib import Path
from lab.eval.run_folder import maker, publish

real = os.rename

def held(src, dst, *args, **kwargs):
    real(src, dst, *args, **kwargs)
    if ".replaced-" in os.fspath(dst):
        Path(sys.argv[2]).write_text(os.fspath(dst))
        time.sleep(600)

os.rename = held
publish(Path(sys.argv[1]), maker("search configuration", "lab", "demo", None, {"context_turns": 2}),
        lambda folder: (folder / "metrics.json").write_text("second"))
"""


def _kill_between_renames(out: Path, tmp_path: Path) -> int:
    """Start a process publishing "second" into ``out``, SIGKILL it between the two renames; its pid."""
    import signal
    import time

    said = tmp_path / "between"
    child = subprocess.Popen([sys.executable, "-c", BETWEEN_RENAMES, str(out), str(said)], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not said.exists() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert said.exists(), f"the writer never reached the point between the renames (exit {child.poll()})"
        os.kill(child.pid, signal.SIGKILL)
    finally:
        child.kill()
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    return child.pid


def test_a_kill_between_the_two_renames_keeps_a_whole_copy_and_the_next_write_puts_it_back(tmp_path):
    out = tmp_path / "runs" / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "first"}))
    pid = _kill_between_renames(out, tmp_path)
    hidden = sorted(p.name for p in out.parent.iterdir())
    assert hidden == [f".demo-lab.replaced-{pid}", f".demo-lab.writing-{pid}"]  # no folder at out now
    for name, text in ((f".demo-lab.replaced-{pid}", "first"), (f".demo-lab.writing-{pid}", "second")):
        assert (out.parent / name / "metrics.json").read_text() == text  # both copies whole...
        assert (out.parent / name / MADE_BY).is_file()  # ...and complete
    # the next write (here one of another maker, refused) first puts the newest whole copy back:
    # before the fix it cleared both leftovers as garbage, and its own run took the empty place
    with pytest.raises(ConflictError, match=r"holds a run of the search configuration 'lab' on demo"):
        publish(out, SYSTEM, _files(**{"metrics.json": "system"}))
    assert (out / "metrics.json").read_text() == "second"
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo-lab"]
    publish(out, PRESET, _files(**{"metrics.json": "third"}))
    assert (out / "metrics.json").read_text() == "third"
    assert sorted(p.name for p in out.parent.iterdir()) == ["demo-lab"]


def test_a_leftover_without_its_maker_record_is_never_put_back(tmp_path):
    """A folder killed mid-write has no made_by.json (it is put in last): it is no run to restore."""
    out = tmp_path / "demo-lab"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    half = tmp_path / f".demo-lab.writing-{int(dead.stdout)}"
    half.mkdir()
    (half / "metrics.json").write_text("half")
    publish(out, PRESET, _files(**{"metrics.json": "whole"}))
    assert (out / "metrics.json").read_text() == "whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo-lab"]


def test_a_symlinked_run_folder_is_written_through_and_the_link_kept(tmp_path):
    elsewhere = tmp_path / "other-disk" / "demo-lab"
    publish(elsewhere, PRESET, _files(**{"metrics.json": "first", "categories.png": "plot"}))
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "demo-lab").symlink_to(elsewhere, target_is_directory=True)
    got = publish(runs / "demo-lab", PRESET, _files(**{"metrics.json": "second"}))
    assert got == runs / "demo-lab" and got.is_symlink() and got.resolve() == elsewhere.resolve()
    assert sorted(p.name for p in elsewhere.iterdir()) == [MADE_BY, "metrics.json"]  # replaced whole
    assert (elsewhere / "metrics.json").read_text() == "second"
    assert [p.name for p in runs.iterdir()] == ["demo-lab"]  # before: .demo-lab.replaced-PID, for good
    assert [p.name for p in elsewhere.parent.iterdir()] == ["demo-lab"]


def test_a_symlink_to_nothing_or_to_a_folder_of_other_files_is_refused_and_nothing_touched(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "demo-lab").symlink_to(tmp_path / "gone", target_is_directory=True)
    with pytest.raises(ValidationError, match=r"demo-lab is a symlink to '.*gone', which does not resolve to a folder"):
        publish(runs / "demo-lab", PRESET, _files(**{"metrics.json": "1"}))
    (runs / "demo-lab").unlink()
    home = tmp_path / "home"
    home.mkdir()
    (home / "notes.txt").write_text("keep me")
    (runs / "demo-lab").symlink_to(home, target_is_directory=True)
    with pytest.raises(ConflictError, match=r"home exists and is not a run folder \(it holds notes.txt\)"):
        publish(runs / "demo-lab", PRESET, _files(**{"metrics.json": "1"}))
    assert sorted(p.name for p in home.iterdir()) == ["notes.txt"] and (runs / "demo-lab").is_symlink()
    assert sorted(p.name for p in runs.iterdir()) == ["demo-lab"] and sorted(p.name for p in tmp_path.iterdir()) == [
        "home", "runs"]


def test_a_link_an_earlier_version_left_aside_is_removed_and_its_target_kept(tmp_path):
    target = tmp_path / "other-disk"
    target.mkdir()
    (target / "metrics.json").write_text("theirs")
    out = tmp_path / "runs" / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "1"}))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (out.parent / f".demo-lab.replaced-{int(dead.stdout)}").symlink_to(target, target_is_directory=True)
    publish(out, PRESET, _files(**{"metrics.json": "2"}))
    assert [p.name for p in out.parent.iterdir()] == ["demo-lab"]
    assert (target / "metrics.json").read_text() == "theirs"


@pytest.mark.parametrize("label,content,problem", [
    ("not JSON", b"{oops", r"is not valid JSON \(Expecting property name"),
    ("a list", b"[]", r"is a JSON list, not an object with kind, name, dataset"),
    ("binary", b"\x00\xff\xfe", r"is not UTF-8 text \(byte 1\)"),
    ("deep", b"[" * 100000 + b"]" * 100000, r"nests deeper than a JSON reader follows"),
    ("no name", b'{"kind": "search configuration", "dataset": "demo"}', r"has no text name"),
    ("NaN", b'{"kind": "x", "name": "y", "dataset": "z", "n": NaN}', r"holds the number NaN"),
])
def test_a_damaged_made_by_json_is_refused_naming_the_file_and_nothing_written(tmp_path, label, content, problem):
    out = tmp_path / "demo-lab"
    publish(out, PRESET, _files(**{"metrics.json": "first"}))
    (out / MADE_BY).write_bytes(content)
    with pytest.raises(ValidationError, match=rf"run folder .*demo-lab cannot be replaced: .*demo-lab/made_by.json: "
                                              rf"the run's maker record {problem}.*nothing was written"):
        publish(out, PRESET, _files(**{"metrics.json": "second"}))
    assert (out / "metrics.json").read_text() == "first" and (out / MADE_BY).read_bytes() == content
    assert [p.name for p in tmp_path.iterdir()] == ["demo-lab"]


def test_a_damaged_made_by_json_at_the_command_line_is_one_line(tmp_path):
    """`lab eval` into a folder whose made_by.json is damaged: exit 2, one line naming the file."""
    env = {**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    cmd = [sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "bm25", "--no-track", "--quiet",
           "--model", FAKE_MODEL, "--out", str(tmp_path / "runs")]
    first = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert first.returncode == 0, first.stderr[-2000:]
    (tmp_path / "runs" / "demo+fake-bm25" / MADE_BY).write_text("[]")
    got = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    # the evaluation's own warning (the demo's 120 questions are too few to hold a figure) comes first
    said = [line for line in (got.stdout + got.stderr).strip().splitlines() if not line.startswith("warning: ")]
    assert got.returncode == 2 and len(said) == 1 and "Traceback" not in got.stderr
    assert said[0].startswith("error: run folder ") and "demo+fake-bm25/made_by.json: the run's maker record is a " \
                                                        "JSON list" in said[0]


def test_a_place_that_cannot_hold_a_run_folder_is_one_error_naming_it(tmp_path):
    """`--out` under a file: before, mkdir's FileExistsError came out as a traceback."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(ValidationError, match=r"run folder .*afile/demo-lab cannot be written: .*afile is a file, not a "
                                              r"folder: nothing was written"):
        publish(tmp_path / "afile" / "demo-lab", PRESET, _files(**{"metrics.json": "1"}))
    assert (tmp_path / "afile").read_text() == "x"
