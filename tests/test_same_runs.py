"""benchmarks/same_runs.py: two run-folder trees are the same run but for their clocks, and it exits 1 otherwise."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "same_runs.py"


def _run_folder(root: Path, trec: str, seconds: float, written: str) -> None:
    folder = root / "demo-bm25"
    folder.mkdir(parents=True)
    (folder / "run.trec").write_text(trec)
    (folder / "metrics.json").write_text(json.dumps({"metrics": {"recall@10": 0.67}, "written_at": written,
                                                     "info": {"fuse_and_score_s": seconds}}))
    (folder / "made_by.json").write_text(json.dumps({"at": written}))


def _compare(before: Path, after: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), str(before), str(after)], capture_output=True, text=True,
                          timeout=60)


def test_runs_differing_only_in_their_clocks_are_the_same(tmp_path):
    _run_folder(tmp_path / "a", "q1 Q0 m1 1 0.5 bm25\n", 0.12, "2026-11-27T10:00:00")
    _run_folder(tmp_path / "b", "q1 Q0 m1 1 0.5 bm25\n", 0.31, "2026-11-27T11:00:00")
    got = _compare(tmp_path / "a", tmp_path / "b")
    assert got.returncode == 0, got.stdout
    assert "2 of 2 files the same" in got.stdout  # made_by.json is not compared


def test_a_changed_ranking_or_metric_exits_1_naming_the_file(tmp_path):
    _run_folder(tmp_path / "a", "q1 Q0 m1 1 0.5 bm25\n", 0.12, "t")
    _run_folder(tmp_path / "b", "q1 Q0 m2 1 0.5 bm25\n", 0.12, "t")
    got = _compare(tmp_path / "a", tmp_path / "b")
    assert got.returncode == 1
    assert "DIFF     demo-bm25/run.trec" in got.stdout
    metrics = tmp_path / "b" / "demo-bm25" / "metrics.json"
    (tmp_path / "b" / "demo-bm25" / "run.trec").write_text("q1 Q0 m1 1 0.5 bm25\n")
    metrics.write_text(metrics.read_text().replace("0.67", "0.68"))
    got = _compare(tmp_path / "a", tmp_path / "b")
    assert got.returncode == 1 and "DIFF     demo-bm25/metrics.json" in got.stdout
