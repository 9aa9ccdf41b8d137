"""N runs in one table (lab.eval.comparison): `lab compare A B C` and the table `lab eval --system A B C`
ends with; third-party output goes to the run folder's system.log, not between lab's lines."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lab.errors import ValidationError
from lab.eval.comparison import compare_many, render, two_run_lines
from lab.eval.metrics import compare_runs
from lab.eval.multiple import maxt_pvalues

ROOT = Path(__file__).resolve().parent.parent


def _table(values: list[float]) -> pl.DataFrame:
    return pl.DataFrame({"qid": [f"q{i}" for i in range(len(values))], "recall@10": values})


def test_a_hand_computed_case():
    """Four questions: B gains on two and loses on none; C equals A. With four questions the 16 sign
    assignments are enumerated: B's statistic |1 + 1| / sqrt(2) is reached when the two live
    differences keep alike signs (2 of their 4 assignments, times 4 for the zero ones: 8 of 16, p 0.5;
    C's zero column never raises the maximum); C's differences are all zero (p 1)."""
    a, b, c = _table([0, 1, 0, 1]), _table([1, 1, 1, 1]), _table([0, 1, 0, 1])
    got = compare_many({"a": a, "b": b, "c": c}, ["recall@10"], n_resamples=2000)
    assert got.questions == 4 and got.baseline == "a"
    assert got.means["b"]["recall@10"][0] == 1.0 and got.means["a"]["recall@10"][0] == 0.5
    change = got.changes["b"]["recall@10"]
    assert change["delta"] == 0.5 and (change["better"], change["worse"]) == (2, 0)
    assert change["p_corrected"] == 0.5
    assert got.changes["c"]["recall@10"]["p_corrected"] == 1.0
    assert maxt_pvalues(np.array([[1.0], [0.0], [1.0], [0.0]]))[0] == change["p_corrected"]


def test_two_runs_give_lab_compares_own_p_value():
    rng = np.random.default_rng(3)
    a, b = _table(list(rng.random(40))), _table(list(rng.random(40)))
    pair = compare_runs(a, b, ["recall@10"]).row(0, named=True)
    got = compare_many({"a": a, "b": b}, ["recall@10"])
    assert got.changes["b"]["recall@10"]["p"] == pair["p_value"]
    assert got.changes["b"]["recall@10"]["delta"] == pytest.approx(pair["delta"])
    assert two_run_lines(got)[0].startswith("recall@10: b better on ")


def test_runs_are_paired_on_shared_questions_and_bad_input_is_named():
    a, b = _table([1, 0, 1]), _table([1, 1])
    assert compare_many({"a": a, "b": b}, ["recall@10"]).questions == 2
    with pytest.raises(ValidationError, match=r"--baseline 'z' is not one of the runs compared: \['a', 'b'\]"):
        compare_many({"a": a, "b": b}, ["recall@10"], "z")
    with pytest.raises(ValidationError, match=r"run 'b' has no column\(s\) \['ndcg@10'\]"):
        compare_many({"a": a.with_columns(pl.lit(0.0).alias("ndcg@10")), "b": b}, ["ndcg@10"])
    with pytest.raises(ValidationError, match="at least two runs"):
        compare_many({"a": a}, ["recall@10"])


def test_markdown_and_latex_tables():
    got = compare_many({"base_run": _table([0, 1, 0, 1]), "new": _table([1, 1, 1, 1])}, ["recall@10"])
    md = render(got, "markdown").splitlines()
    assert md[0] == "| run | recall@10 | recall@10 change |" and md[2].startswith("| base_run | 0.5000 [")
    tex = render(got, "latex")
    assert tex.startswith("\\begin{tabular}{lrr}") and "base\\_run & 0.5000" in tex and "\\end{tabular}" in tex
    with pytest.raises(ValidationError, match="format must be text, markdown or latex, got 'html'"):
        render(got, "html")


def test_systems_end_with_one_table_and_their_noise_goes_to_the_run_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", "toy_systems:WordOverlap",
                          "toy_systems:Noisy", "--baseline", "noisy", "--no-track", "--quiet", "--out",
                          str(tmp_path / "runs")], capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "Filed drawer" not in got.stdout + got.stderr and "deprecated option" not in got.stderr
    log = (tmp_path / "runs" / "demo-system-noisy" / "system.log").read_text()
    assert "Filed drawer" in log and "UserWarning: a deprecated option" in log
    assert "WARNING thirdparty: index rebuilt" in log
    table = got.stdout[got.stdout.index("\nrun "):]
    rows = [line.split()[0] for line in table.strip().splitlines()[1:3]]
    assert rows == ["word-overlap", "noisy"]
    flat = " ".join(table.split())
    assert "change: mean paired difference against noisy" in flat
    assert "measured one system after another on one shared machine" in flat
    assert max(len(line) for line in got.stdout.splitlines() if not line.startswith(("run ", "word-", "noisy "))) < 200

    runs = [str(tmp_path / "runs" / n) for n in ("demo-system-word-overlap", "demo-system-noisy")]
    md = subprocess.run([sys.executable, "-m", "lab", "compare", *runs, "--format", "markdown"],
                        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("| run | recall@5 | recall@10 |")
    assert "speed (ingest memories/s" in md.stdout
    two = subprocess.run([sys.executable, "-m", "lab", "compare", *runs], capture_output=True, text=True, timeout=120,
                         cwd=ROOT)
    assert "paired randomization test" in two.stdout and "120 paired questions" in two.stdout
    assert "recall@10: demo-system-noisy better on 0, worse on 0, equal on 120 of 120 questions" in two.stdout
    as_json = subprocess.run([sys.executable, "-m", "lab", "compare", *runs, runs[0], "--json"],
                             capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert json.loads(as_json.stdout)["baseline"] == "demo-system-word-overlap"


def _run_folder(path: Path, values: list[float]) -> Path:
    from lab.eval.run_folder import maker, publish

    def write(folder: Path) -> None:
        (folder / "metrics.json").write_text(json.dumps({"dataset": "demo", "metrics": {"recall@10": 0.5}}))
        _table(values).write_parquet(folder / "per_question.parquet")

    return publish(path, maker("search configuration", path.name, "demo"), write)


def _put(name: str, data: bytes):
    def damage(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).write_bytes(data)
    return damage


def _link(name: str, target: str):
    def damage(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).symlink_to(target)
    return damage


@pytest.mark.parametrize("label,damage,said", [
    ("metrics.json not JSON", _put("metrics.json", b"{oops"),
     r"b/metrics.json: the run's metrics is not valid JSON \(Expecting property name"),
    ("metrics.json with NaN", _put("metrics.json", b'{"dataset": "demo", "metrics": {"recall@10": NaN}}'),
     r"b/metrics.json: the run's metrics holds the number NaN, which lab never writes"),
    ("metrics.json deep nesting", _put("metrics.json", b"[" * 100000 + b"]" * 100000),
     r"b/metrics.json: the run's metrics nests deeper than a JSON reader follows"),
    ("metrics.json a list", _put("metrics.json", b"[]"), r"b/metrics.json: the run's metrics are not an object"),
    ("metrics.json not UTF-8", _put("metrics.json", b'{"dataset": "\xff"}'),
     r"b/metrics.json: the run's metrics is not UTF-8 text"),
    ("metrics.json -> /dev/zero", _link("metrics.json", "/dev/zero"),
     r"b/metrics.json: the run's metrics is not a regular file"),
    ("per_question.parquet garbage", _put("per_question.parquet", b"PAR1garbagePAR1"),
     r"b/per_question.parquet: the per-question table is not a readable Parquet file"),
    ("per_question.parquet -> /dev/urandom", _link("per_question.parquet", "/dev/urandom"),
     r"b/per_question.parquet: the per-question table is not a regular file"),
    ("per_question.parquet missing", lambda d: (d / "per_question.parquet").unlink(),
     r"b: not a run folder \(no per_question.parquet\)"),
    ("made_by.json a list", _put("made_by.json", b"[]"), r"b/made_by.json: the run's maker record is a JSON list"),
])
def test_lab_compare_refuses_a_damaged_run_folder_in_one_line_naming_the_file(tmp_path, capsys, label, damage, said):
    from lab.cli import main

    a, b = _run_folder(tmp_path / "a", [0.0, 1.0, 0.0, 1.0]), _run_folder(tmp_path / "b", [1.0, 1.0, 0.0, 1.0])
    assert main(["compare", str(a), str(b)]) == 0
    capsys.readouterr()
    damage(b)
    code = main(["compare", str(a), str(b)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code in (2, 3) and len(err) == 1, err
    assert err[0].startswith("error: ") and __import__("re").search(said, err[0]), err[0]
