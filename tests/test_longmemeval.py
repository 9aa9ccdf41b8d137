"""LongMemEval from a file in the official format: the loader (a namespace per question, session
dates, the question's date as "now", evidence as gold, abstention questions apart, checksums),
the benchmark's own metrics against a hand-computed case, and evaluations on a fixture built from
the shared sample of real haystacks (tests/longmemeval_fixture.py)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import polars as pl
import pytest

from conftest import ROOT, require_dataset
from longmemeval_fixture import build_fixture
from lab.config import FAKE_MODEL
from lab.errors import LabWarning, ValidationError
from lab.eval import longmemeval as lme
from lab.eval import longmemeval_reader


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    sample = require_dataset("longmemeval-sample/longmemeval_s_sample.json")
    return build_fixture(sample, tmp_path_factory.mktemp("lme"))


def test_the_fixture_loads_a_namespace_per_question_with_dates_and_evidence(fixture):
    with pytest.warns(LabWarning, match=r"longmemeval_s_fixture.json: sha256 [0-9a-f]{64} is not one lab knows"):
        data = lme.load_longmemeval(fixture)
    assert "derived, not official" in (fixture.parent / "README.md").read_text()
    everything = json.loads(fixture.read_text())
    raw = [q for q in everything if not q["question_id"].endswith("_abs")]
    assert len(raw) == 3 and data.report["abstention_questions"] == [q["question_id"] + "_abs" for q in raw]
    assert data.questions["namespace"].to_list() == [f"lme-{q['question_id']}" for q in raw]
    assert data.questions["category"].to_list() == [q["question_type"] for q in raw]
    assert data.unanswerable["namespace"].to_list() == [f"lme-{q['question_id']}_abs" for q in raw]
    first = raw[0]
    ns = f"lme-{first['question_id']}"
    turns = [m for m in data.memories if m["namespace"] == ns]  # the official corpus: the user turns
    assert len(turns) == sum(t["role"] == "user" and bool(t["content"].strip()) for s in first["haystack_sessions"]
                             for t in s)
    # an abstention question shares its haystack's sessions, under ids of its own namespace
    assert len({m["id"] for m in data.memories}) == len(data.memories)
    sid, date = first["haystack_session_ids"][0], first["haystack_dates"][0]
    one = next(m for m in turns if m["id"] == f"{ns}:{sid}#0")
    assert one["metadata"]["session_id"] == sid and one["created_at"] == lme.parse_date(date, "t")
    assert data.reference_times[ns] == lme.parse_date(first["question_date"], "t")
    evidence = {f"{ns}:{s}#{t}" for s, sess in zip(first["haystack_session_ids"], first["haystack_sessions"])
                for t, turn in enumerate(sess) if turn.get("has_answer") and "answer" in s and turn["role"] == "user"}
    gold = set(data.qrels.filter(pl.col("qid") == first["question_id"])["memory_id"])
    assert evidence and gold == evidence


def test_time_signals_see_the_questions_date_not_the_haystacks_last(fixture, tmp_path, monkeypatch):
    """Each namespace's candidates are searched with its question's date as the reference time."""
    from lab.embed.fake import FakeEmbedder
    from lab.eval.candidate_cache import candidate_table
    from lab.eval.stores import eval_retriever
    from lab.search.presets import resolve

    data = lme.load_longmemeval(fixture, verify=False)
    retriever = eval_retriever(data, root=tmp_path, embedder=FakeEmbedder())
    seen = {}
    real = retriever.candidates

    def spy(queries, config=None, **kw):
        seen[queries[0].namespace] = config.reference_time
        return real(queries, config, **kw)

    monkeypatch.setattr(retriever, "candidates", spy)
    candidate_table(retriever, data, resolve("lab"), depth=10, root=tmp_path)
    assert seen == {ns: data.reference_times[ns] for ns in data.questions["namespace"]}


def test_a_wrong_shaped_file_is_refused_naming_the_first_bad_field(tmp_path):
    sample = require_dataset("longmemeval-sample/longmemeval_s_sample.json")
    with pytest.raises(ValidationError, match=r"longmemeval_s_sample.json question 1 \(852ce960\): missing field "
                                              r"'question'"):
        lme.load_longmemeval(sample)
    bad = tmp_path / "longmemeval_s_cleaned.json"
    bad.write_text(json.dumps([{**{k: [] for k in lme.REQUIRED}, "question_id": "q1", "question_type": "x",
                                "question": "q", "question_date": "yesterday"}]))
    with pytest.raises(ValidationError, match=r"q1 question_date: 'yesterday' is not a LongMemEval date"):
        lme.load_longmemeval(bad)
    bad.write_text('[{"question_id": "q1"')
    with pytest.raises(ValidationError, match="truncated"):
        lme.load_longmemeval(bad)


def test_the_reader_streams_one_question_at_a_time(fixture, monkeypatch, tmp_path):
    # two of the fixture's questions (an answerable one and an abstention, each a haystack of about 500
    # turns): every question spans many reads and one ends where the next begins; the other four are
    # more of the same at 97 bytes a read
    both = json.loads(fixture.read_text())
    two = tmp_path / fixture.name
    two.write_text(json.dumps([both[0], both[-1]]))
    assert not both[0]["question_id"].endswith("_abs") and both[-1]["question_id"].endswith("_abs")
    monkeypatch.setattr(longmemeval_reader, "CHUNK", 97)  # far smaller than one question: every question spans reads
    assert list(lme.iter_questions(two)) == [both[0], both[-1]]


def test_abstention_questions_are_kept_apart(fixture, tmp_path):
    raw = [q for q in json.loads(fixture.read_text()) if not q["question_id"].endswith("_abs")]
    raw.append({**raw[0], "question_id": raw[0]["question_id"] + "_abs", "question": "What is my cat's name?",
                "answer_session_ids": []})
    path = tmp_path / "longmemeval_s_cleaned.json"
    path.write_text(json.dumps(raw))
    data = lme.load_longmemeval(path, verify=False)
    assert data.report["abstention_questions"] == [raw[-1]["question_id"]]
    assert raw[-1]["question_id"] not in data.questions["qid"].to_list()
    assert data.unanswerable.row(0) == (raw[-1]["question_id"], f"lme-{raw[-1]['question_id']}",
                                        "What is my cat's name?", raw[0]["question_type"])
    assert f"lme-{raw[-1]['question_id']}" in {m["namespace"] for m in data.memories}  # its haystack is stored


def test_lab_eval_on_the_fixture_reports_longmemeval_metrics_for_lab_and_a_third_party_system(tmp_path):
    fixture = build_fixture(require_dataset("longmemeval-sample/longmemeval_s_sample.json"), tmp_path / "lme",
                            abstention=False)
    # one haystack (about 500 turns): Chroma embeds every turn through its own model
    fixture.write_text(json.dumps(json.loads(fixture.read_text())[:1]))
    env = {**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(fixture), "--preset", "bm25",
                          "--model", FAKE_MODEL, "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stderr.startswith("warning: longmemeval_s_fixture.json: sha256 ")
    assert "Session-level metrics: recall_all@5 = " in got.stdout and "Turn-level metrics: recall_all@5 = " in got.stdout
    metrics = json.loads((tmp_path / "runs" / "longmemeval-s-fixture+fake-bm25" / "metrics.json").read_text())
    assert metrics["longmemeval"]["questions"] == 1 and set(metrics["longmemeval"]["session"]) >= {
        "recall_any@5", "recall_all@5", "ndcg_any@10"}
    pytest.importorskip("chromadb")
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(fixture), "--system", "chroma",
                          "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert got.returncode == 0, got.stderr[-2000:]
    system = json.loads((tmp_path / "runs" / "longmemeval-s-fixture-system-chroma" / "metrics.json").read_text())
    assert system["longmemeval"]["session"]["recall_any@5"] >= 0.0 and system["questions"] == 1
    (logged,) = (tmp_path / "runs" / "longmemeval-s-fixture-system-chroma" / "longmemeval_retrievallog.jsonl"
                 ).read_text().splitlines()  # the official log of a third-party system's ranking too
    assert json.loads(logged)["retrieval_results"]["metrics"]["turn"] == system["longmemeval"]["turn"]  # one question


def _question(i: int = 0, **over) -> dict:
    q = {"question_id": f"q{i}", "question_type": "single-session-user", "question": f"what colour is item {i}?",
         "answer": "red", "question_date": "2023/05/30 (Tue) 23:40", "haystack_dates": ["2023/05/20 (Sat) 02:21"],
         "haystack_session_ids": [f"s{i}"], "answer_session_ids": [f"s{i}"],
         "haystack_sessions": [[{"role": "user", "content": f"item {i} is red", "has_answer": True},
                                {"role": "assistant", "content": "noted"}]]}
    return {**q, **over}


def _hostile(tmp_path, label):
    """The hostile files of the security probe (s5 cli_hostile), each as bytes."""
    if label == "deep nesting in a session":
        text = json.dumps([_question()])
        return text.replace('"haystack_sessions": [[', '"haystack_sessions": [[' + "[" * 20000, 1).replace(
            "]]", "]]" + "]" * 20000, 1).encode()
    if label == "binary":
        return b"\x00\xff" * 5000
    sessions = {"an empty evidence turn": [[{"role": "user", "content": "  \n", "has_answer": True},
                                            {"role": "assistant", "content": "noted"}]],
                "has_answer a string": [[{"role": "user", "content": "x", "has_answer": "yes"}]]}
    if label == "answer NaN":
        return json.dumps([_question()]).replace('"red"', "NaN", 1).encode()
    return json.dumps([_question(), _question(1, haystack_sessions=sessions[label])]).encode()


@pytest.mark.parametrize("label,said", [
    ("deep nesting in a session", r"question 1 \('q0'\): nested deeper than a JSON reader follows"),
    ("binary", r": not UTF-8 text \(byte 1 of a read\): a LongMemEval file is a JSON list of questions"),
    ("an empty evidence turn", r"q1 session s1 turn 0: an evidence turn \(has_answer\) has no text \(empty or only "
                               r"white space\), so it cannot be indexed"),
    ("has_answer a string", r"q1 session s1 turn 0: has_answer must be true or false, got 'yes'"),
    ("answer NaN", r"question 1 \(q0\): answer must be a text or a whole number, got nan"),
])
def test_a_hostile_file_is_refused_in_one_line_naming_the_file_question_and_problem(tmp_path, label, said):
    path = tmp_path / "longmemeval_s_cleaned.json"
    path.write_bytes(_hostile(tmp_path, label))
    with pytest.raises(ValidationError, match="longmemeval_s_cleaned.json" + r".*" + said) as got:
        lme.load_longmemeval(path, verify=False)
    assert "\n" not in str(got.value)


@pytest.mark.parametrize("label", ["deep nesting in a session", "binary", "an empty evidence turn"])
def test_lab_eval_refuses_a_hostile_file_of_any_name_in_one_line(tmp_path, label):
    """By `lab eval --dataset FILE` under a name that is not LongMemEval's: before, deep nesting and
    binary content crashed with a traceback (the file was taken for LoCoMo's and read whole)."""
    path = tmp_path / "mine.json"
    path.write_bytes(_hostile(tmp_path, label))
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(path), "--preset", "bm25", "--model",
                          FAKE_MODEL, "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")})
    said = (got.stdout + got.stderr).strip().splitlines()
    assert got.returncode == 2 and len(said) == 1 and "Traceback" not in got.stderr, got.stderr[-1500:]
    assert said[0].startswith(f"error: {path}" if label != "an empty evidence turn" else "error: mine.json q1")
    assert {"deep nesting in a session": "nested deeper", "binary": "not UTF-8 text",
            "an empty evidence turn": "has no text"}[label] in said[0]


def test_an_empty_turn_that_is_no_evidence_is_skipped_and_counted(tmp_path):
    """The official S file has a few empty turns: none is evidence, and an empty text has nothing to find."""
    path = tmp_path / "longmemeval_s_cleaned.json"
    sessions = [[{"role": "user", "content": "item 0 is red", "has_answer": True},
                 {"role": "assistant", "content": ""}]]
    path.write_text(json.dumps([_question(haystack_sessions=sessions), _question(1, answer=7)]))
    data = lme.load_longmemeval(path, verify=False, corpus="all")
    assert [m["id"] for m in data.memories] == ["lme-q0:s0#0", "lme-q1:s1#0", "lme-q1:s1#1"]
    assert data.report["empty_turns"] == 1 and data.report["empty_items_skipped"] == 1


def test_an_evaluation_where_no_gold_reaches_the_context_reports_no_first_position(tmp_path):
    """One question whose only turn BM25 cannot find: the context holds no gold, so the first gold
    position exists for no question; before, its mean (None) crashed the evaluation."""
    path = tmp_path / "longmemeval_s_cleaned.json"
    path.write_text(json.dumps([_question(haystack_sessions=[[{"role": "user", "content": "x", "has_answer": True}]])]))
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(path), "--preset", "bm25", "--model",
                          FAKE_MODEL, "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT,
                         env={**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")})
    assert got.returncode == 0 and "Traceback" not in got.stderr, got.stderr[-1500:]
    (folder,) = (tmp_path / "runs").iterdir()
    context = json.loads((folder / "metrics.json").read_text())["context"]
    assert context["context_first_gold"] is None and context["context_recall"] == 0.0
