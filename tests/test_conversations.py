"""Your conversations and your questions (issue 61 #5): the documented JSONL format, its example in
docs/evaluation.md checked and evaluated as written, bad lines refused naming the line and field; and
`lab datasets check` over every format lab reads."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from conftest import require_dataset
from lab.config import FAKE_MODEL
from lab.errors import ValidationError
from lab.eval.conversations import load_conversations_jsonl

ROOT = Path(__file__).resolve().parent.parent


def _example() -> str:
    page = (ROOT / "docs" / "evaluation.md").read_text()
    section = page[page.index("## Your own conversations"):page.index("## How an evaluation runs")]
    return re.findall(r"```json\n(.*?)```", section, flags=re.S)[0]


def _lab(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})}, timeout=300)


def test_the_manuals_conversations_example_checks_and_evaluates_as_written(tmp_path):
    (tmp_path / "mine.jsonl").write_text(_example())
    got = _lab("datasets", "check", "mine.jsonl", "--json", cwd=tmp_path)
    assert got.returncode == 0, got.stderr
    held = json.loads(got.stdout)
    assert (held["format"], held["memories"], held["questions"], held["namespaces"]) == ("conversations JSONL", 9, 5, 2)
    assert held["problems"] == [] and held["reference_times"] == 2
    data = load_conversations_jsonl(tmp_path / "mine.jsonl")
    assert data.qrels.filter(pl.col("qid") == "ana:q3")["memory_id"].to_list() == ["ana:t4", "ana:t6"]
    first = next(m for m in data.memories if m["id"] == "ana:t1")
    assert first["content"].startswith("Ana: I booked") and first["metadata"]["episode"] == "ana:s1"
    assert data.reference_times == {"ana": "2026-03-20T09:00:00Z", "ben": "2026-02-11T10:00:00Z"}  # now, or the last turn
    got = _lab("eval", "--dataset", "mine.jsonl", "--preset", "bm25", "--model", FAKE_MODEL, "--no-track", "--quiet",
               "--out", "runs", cwd=tmp_path, env={"LAB_EVAL_ROOT": str(tmp_path / "eval")})
    assert got.returncode == 0, got.stderr[-2000:]
    assert "mine" in got.stdout and "5 q" in got.stdout
    per_q = pl.read_parquet(tmp_path / "runs" / "mine+fake-bm25" / "per_question.parquet")
    assert per_q.filter(pl.col("qid") == "ben:q1")["mrr"].item() == 1.0  # "E4017" asked, its turn first under BM25


def _line(**over) -> dict:
    base = {"conversation": "c", "turns": [{"id": "t1", "speaker": "A", "time": "2026-01-01T00:00:00Z", "text": "hi"},
                                           {"id": "t2", "speaker": "B", "time": "2026-01-02T00:00:00Z", "text": "yo"}],
            "questions": [{"id": "q1", "question": "who said hi?", "evidence": ["t1"]}]}
    return {**base, **over}


@pytest.mark.parametrize("lines,said", [
    (["{oops"], r"line 1: not JSON"),
    ([_line(turns=[{"id": "t1", "speaker": "A", "time": "yesterday", "text": "hi"}])], r"line 1 \(c\) turn 1: time"),
    ([_line(questions=[{"id": "q1", "question": "?", "evidence": ["t9"]}])],
     r"line 1 \(c\) question 1: evidence \['t9'\] not a turn of conversation 'c'"),
    ([_line(turns=[{"id": "t1", "speaker": "A", "time": "2026-01-01T00:00:00Z", "text": "a"}] * 2)],
     r"line 1 \(c\) turn 2: turn id 't1' again"),
    ([_line(), _line()], r"line 2: conversation 'c' again \(line 1 has it\)"),
    ([_line(questions=[{"id": "q1", "question": "?", "evidence": []}])], r"question 1: evidence: expected a non-empty "
                                                                           r"list of turn ids"),
    ([_line(conversation="../etc")], r"line 1: conversation must be 1-128 letters"),
    ([_line(mood="x")], r"line 1: unknown key\(s\) \['mood'\]"),
    ([{"conversation": "c", "turns": []}], r"line 1: missing \['questions'\]"),
])
def test_a_bad_conversations_line_is_refused_naming_the_line_and_the_field(tmp_path, lines, said):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    with pytest.raises(ValidationError, match=said) as err:
        load_conversations_jsonl(path)
    assert str(path) in str(err.value)
    got = _lab("datasets", "check", str(path), cwd=tmp_path)
    assert got.returncode == 2 and got.stderr.startswith("error: ") and str(path) in got.stderr


def test_datasets_check_names_gold_no_system_can_find_and_exits_1(tmp_path):
    """A BEIR folder (as `lab datasets export` writes one, namespaces in metadata) whose judgement
    names a document of another namespace, and one naming no document at all."""
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    docs = [{"_id": "d1", "text": "alpha", "metadata": {"namespace": "a"}},
            {"_id": "d2", "text": "beta", "metadata": {"namespace": "b"}}]
    queries = [{"_id": "q1", "text": "alpha?", "metadata": {"namespace": "a"}},
               {"_id": "q2", "text": "beta?", "metadata": {"namespace": "a"}},
               {"_id": "q3", "text": "gamma?", "metadata": {"namespace": "a"}}]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    (folder / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td9\t1\n")
    got = _lab("datasets", "check", str(folder), cwd=tmp_path)
    assert got.returncode == 1, got.stderr
    assert "problem    gold d2 of q2 is a memory of namespace 'b', not the question's 'a'" in got.stdout
    assert "problem    1 relevance judgement(s) name no document of corpus.jsonl" in got.stdout
    assert got.stdout.startswith("FAIL ")


def test_datasets_check_reads_the_shared_datasets_and_says_what_their_loaders_did():
    require_dataset("locomo")
    got = _lab("datasets", "check", "locomo", "--json", cwd=ROOT)
    assert got.returncode == 0, got.stderr
    held = json.loads(got.stdout)
    assert (held["format"], held["questions"], held["memories"]) == ("LoCoMo", 997, 2760)
    assert "question conv-26:q31 dropped: no usable evidence ([])" in held["loader"]
    assert any("conv-42:q59: evidence id 'D10:19'" in line for line in held["loader"])
    require_dataset("longmemeval/longmemeval_s_dev.json.gz")
    got = _lab("datasets", "check", "longmemeval-s-dev", "--json", cwd=ROOT)
    assert got.returncode == 0, got.stderr
    held = json.loads(got.stdout)
    assert held["format"] == "LongMemEval" and held["unanswerable"] > 0 and held["reference_times"] == 250
