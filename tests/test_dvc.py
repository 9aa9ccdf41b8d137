"""The DVC pipeline: `dvc repro` from a clean clone runs every stage on the demo data, and a second
`dvc repro` does nothing; metrics, params and plots are readable; prepared tables round-trip."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def test_prepared_tables_round_trip(tmp_path):
    from lab.eval.goldens import load_dataset
    from lab.eval.tables import read_tables, write_tables

    demo = load_dataset("demo")
    write_tables(demo, tmp_path / "t")
    back = load_dataset(str(tmp_path / "t"))
    assert back.fingerprint() == demo.fingerprint() and back.memories == demo.memories
    assert back.questions.equals(demo.questions) and back.qrels.equals(demo.qrels) and back.saves == demo.saves
    # a table altered after preparing is refused, naming the folder
    import polars as pl

    mem = pl.read_parquet(tmp_path / "t" / "memories.parquet")
    mem.head(mem.height - 1).write_parquet(tmp_path / "t" / "memories.parquet")
    with pytest.raises(ValidationError, match="changed since they were prepared"):
        read_tables(tmp_path / "t")
    with pytest.raises(ValidationError, match="no prepared dataset"):
        read_tables(tmp_path)


@pytest.mark.parametrize("change, message", [
    ({"dataset": "nope"}, "profiles has no entry for dataset 'nope'"),
    ({"extra": 1}, "unknown key"),
    ({"index": {"context_turns": 2, "stem": True}}, r"index: unknown key\(s\) \[.stem.\]; allowed: \[.context_turns., .time_in_text., .views.\]"),
    ({"profiles": {"demo": {"sweep": "s.yaml"}}}, "profiles.demo.gate. is required"),
    ({"model": 3}, "model: expected a string, got 3"),
])
def test_bad_params_name_the_problem(tmp_path, change, message):
    import yaml

    from lab.flow.params import load_params

    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({**params, **change}))
    with pytest.raises(ValidationError, match=message):
        load_params(tmp_path / "params.yaml")


@pytest.mark.slow
def test_dvc_repro_from_a_clean_clone_then_nothing_to_do(tmp_path):
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(ROOT / ".venv")  # the stages call .venv/bin/lab, as from a set-up checkout
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    dvc = str(BIN / "dvc")
    first = subprocess.run([dvc, "repro"], cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    for stage in ("prepare", "index", "candidates", "sweep", "gate", "export"):
        assert f"Running stage '{stage}'" in first.stdout
    # the committed dvc.lock records what this run does: each stage's command, parameters (a lock
    # behind params.yaml, e.g. without index.views, is stale), dependencies and outputs, and the same
    # prepared data in every checkout. (Output hashes of stores and run records differ run to run:
    # Delta commits carry timestamps, exports carry run ids; a repro rewrites those lines.)
    committed = yaml.safe_load(subprocess.run(["git", "show", "HEAD:dvc.lock"], cwd=clone, capture_output=True,
                                              text=True, check=True).stdout)["stages"]
    written = yaml.safe_load((clone / "dvc.lock").read_text())["stages"]
    shape = lambda st: {"cmd": st["cmd"], "params": st.get("params"),  # noqa: E731
                        "deps": [d["path"] for d in st.get("deps", [])], "outs": [o["path"] for o in st.get("outs", [])]}
    assert {n: shape(st) for n, st in committed.items()} == {n: shape(st) for n, st in written.items()}, \
        "the committed dvc.lock is stale: refresh it with `dvc repro` and commit it"
    assert committed["prepare"]["outs"] == written["prepare"]["outs"]  # path-free: the same bytes anywhere
    # every hash but the run-specific outputs' (docs/pipelines.md) is the committed one: a fresh
    # clone's `dvc repro` leaves git status clean but for those lines
    run_specific = {".lab/dvc/eval/stores", ".lab/dvc/sweep", ".lab/dvc/gate", ".lab/dvc/bundle", ".lab/dvc/export.json"}
    def hashes(stages: dict) -> dict:
        return {(name, kind, e["path"]): e.get("md5") for name, st in stages.items()
                for kind in ("deps", "outs") for e in st.get(kind, [])}

    before, after = hashes(committed), hashes(written)
    differ = sorted({key[2] for key in after if after[key] != before.get(key)} - run_specific)
    assert not differ, f"dvc repro in a clean clone rewrote {differ}: refresh dvc.lock with `dvc repro` and commit it"
    second = subprocess.run([dvc, "repro"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0 and "Running stage" not in second.stdout, second.stdout
    assert "Data and pipelines are up to date" in second.stdout
    metrics = json.loads(subprocess.run([dvc, "metrics", "show", "--json"], cwd=clone, env=env, capture_output=True,
                                        text=True, check=True).stdout)
    flat = json.dumps(metrics)
    # one short row per stage (every figure is under metrics/details/), not one ~60-column table
    columns = {k for rev in metrics.values() for f in rev["data"].values() for k in f.get("data", {})}
    assert 8 <= len(columns) <= 24, sorted(columns)
    assert '"verdict": "GO"' in flat and "recall@10" in flat
    gate = json.loads((clone / ".lab/dvc/metrics/gate.json").read_text())
    assert gate["verdict"] == "GO" and gate["checks_failed"] == 0
    assert (clone / ".lab/dvc/bundle/manifest.json").is_file()
    params = subprocess.run([dvc, "params", "diff", "--all"], cwd=clone, env=env, capture_output=True, text=True)
    assert params.returncode == 0 and "context_turns" in params.stdout
    plots = subprocess.run([dvc, "plots", "show", "-o", str(tmp_path / "plots")], cwd=clone, env=env,
                           capture_output=True, text=True)
    assert plots.returncode == 0 and (tmp_path / "plots" / "index.html").is_file(), plots.stderr
    # a parameter change reruns what depends on it, and only that
    text = (clone / "params.yaml").read_text().replace("model: lab-memory", "model: lab-memory-b")
    (clone / "params.yaml").write_text(text)
    third = subprocess.run([dvc, "repro"], cwd=clone, env=env, capture_output=True, text=True, timeout=600)
    assert third.returncode == 0, third.stdout[-3000:] + third.stderr[-3000:]
    assert "Running stage 'export'" in third.stdout and "Running stage 'sweep'" not in third.stdout


def test_lab_datasets_says_where_it_looked_and_how_to_place_what_is_missing(tmp_path):
    out = subprocess.run([str(BIN / "lab"), "datasets", "--datasets", str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "locomo   MISSING" in text and "scifact  MISSING" in text and "demo     FOUND" in text
    assert f"looked in {tmp_path / 'locomo'}" in text and "git clone https://github.com/snap-research/LoCoMo" in text
    assert "CC BY-NC 4.0" in text and "1c9979aed9f236d0" in text
    # a BEIR folder of one's own is listed; a changed file is reported as differing
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "corpus.jsonl").write_text("{}\n")
    (tmp_path / "mine" / "queries.jsonl").write_text("{}\n")
    (tmp_path / "locomo").mkdir()
    (tmp_path / "locomo" / "locomo10-dev.json").write_text("[]")
    got = json.loads(subprocess.run([str(BIN / "lab"), "datasets", "--datasets", str(tmp_path), "--json"],
                                    capture_output=True, text=True, check=True).stdout)
    by_name = {e["name"]: e for e in got}
    assert by_name["locomo"]["status"] == "differs"
    assert by_name[str(tmp_path / "mine")]["status"] == "found"
