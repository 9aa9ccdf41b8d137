"""LongMemEval's official retrieval protocol in lab: the corpus and its ids, the metric rules checked
against hand-computed cases (the widened k, turn-counted nDCG, ``noans`` sessions, the questions
left out), .json.gz files read as they come, the retrieval log, and the bad input the real files
hold or a user may hand in."""
from __future__ import annotations

import gzip
import itertools
import json
import math
import os
import pickle
import subprocess
import sys

import polars as pl
import pytest

from conftest import ROOT, require_dataset
from lab.config import FAKE_MODEL
from lab.errors import LabWarning, ValidationError
from lab.eval import longmemeval as lme
from lab.eval import longmemeval_reader
from lab.eval.dataset_ref import DatasetOptions, DatasetRef
from lab.eval.goldens import load_dataset
from lab.eval.longmemeval_corpus import corpus_items
from lab.eval.longmemeval_metrics import longmemeval_metrics, question_metrics, widened_k

# corpus order: a filler session s1 (user turns 1 and 3), the answer session answer_x (evidence
# at turns 1 and 5, none at 3), a filler s2
CORPUS = ["s1_1", "s1_3", "answer_x_1", "noans_x_3", "answer_x_5", "s2_1"]
RANKED = ["s1_1", "s1_3", "noans_x_3", "answer_x_5", "s2_1", "answer_x_1"]


def test_session_figures_from_a_turn_ranking_widen_k_and_count_every_gold_turn():
    """Sessions of the ranking: s1 s1 noans_x answer_x s2 answer_x (a noans turn is a session of
    its own). k=3 widens to 4 (the first 3 hold 2 sessions); k=5 widens past the corpus's end (7).
    The ideal DCG counts answer_x twice (two gold turns): 1 + 1/log2(2) = 2."""
    sessions = [c.rsplit("_", 1)[0] for c in RANKED]
    assert (widened_k(sessions, 1), widened_k(sessions, 3), widened_k(sessions, 5)) == (1, 4, 7)
    got = question_metrics(RANKED, CORPUS, "turn")["session"]
    assert (got["recall_any@1"], got["recall_all@1"], got["ndcg_any@1"]) == (0.0, 0.0, 0.0)
    assert (got["recall_any@3"], got["recall_all@3"]) == (1.0, 1.0)
    assert got["ndcg_any@3"] == pytest.approx((1 / math.log2(4)) / 2)  # gold at place 4 of the widened 4
    assert got["ndcg_any@5"] == pytest.approx((1 / math.log2(4) + 1 / math.log2(6)) / 2)


def test_turn_figures_and_the_official_dcg_weights():
    got = question_metrics(RANKED, CORPUS, "turn")["turn"]
    assert (got["recall_any@5"], got["recall_all@5"], got["recall_all@10"]) == (1.0, 0.0, 1.0)
    assert got["ndcg_any@5"] == pytest.approx(0.5 / 2) and got["ndcg_any@10"] == pytest.approx(
        (0.5 + 1 / math.log2(6)) / 2)
    assert set(got) == {f"{m}@{k}" for m in ("recall_any", "recall_all", "ndcg_any") for k in (1, 3, 5, 10, 30, 50)}
    # the official DCG: the second place weighs as much as the first (its discount is log2(2) = 1)
    second = question_metrics(["a_1", "answer_b_1"], ["a_1", "answer_b_1"], "turn")["turn"]
    assert (second["ndcg_any@1"], second["ndcg_any@3"]) == (0.0, 1.0)
    # no gold in the corpus: recall_all is 1 (all of nothing), recall_any and nDCG 0, as officially
    none = question_metrics(["a_1", "b_1"], ["a_1", "b_1"], "session")
    assert none["session"]["recall_all@1"] == 1.0 and none["session"]["recall_any@50"] == 0.0 and none["turn"] == {}


def _turns(*spec):
    """Turns from (role, text, has_answer) triples."""
    return [{"role": r, "content": c, "has_answer": h} for r, c, h in spec]


def _question(qid="q0", **over):
    q = {"question_id": qid, "question_type": "single-session-user", "question": "what colour is the bike?",
         "answer": "red", "question_date": "2023/05/30 (Tue) 23:40",
         "haystack_session_ids": ["s1", "answer_x"], "haystack_dates": ["2023/05/20 (Sat) 02:21"] * 2,
         "answer_session_ids": ["answer_x"],
         "haystack_sessions": [_turns(("user", "hello there", False), ("assistant", "hi", False)),
                               _turns(("user", "my bike is red", True), ("assistant", "nice", False),
                                      ("user", "", False), ("assistant", "noted", True), ("user", "bye", False))]}
    return {**q, **over}


def test_the_corpus_ids_are_the_official_ones_around_empty_and_assistant_turns():
    q = _question()
    user = corpus_items(q)
    assert [i.corpus_id for i in user] == ["s1_1", "answer_x_1", "noans_x_3", "noans_x_5"]  # numbered over every turn
    assert [i.corpus_id for i in corpus_items(q, corpus="all")] == [
        "s1_1", "s1_2", "answer_x_1", "noans_x_2", "noans_x_3", "answer_x_4", "noans_x_5"]
    # a session is noans when none of its corpus turns holds the answer: the user's, officially
    only_assistant = _question(haystack_sessions=[q["haystack_sessions"][0],
                                                  _turns(("user", "hi", False), ("assistant", "it is red", True))])
    assert [i.corpus_id for i in corpus_items(only_assistant, "session")] == ["s1", "noans_x"]
    assert [i.corpus_id for i in corpus_items(only_assistant, "session", "all")] == ["s1", "answer_x"]
    assert corpus_items(q, "session")[1].text == "my bike is red  bye"  # the user turns joined by one space


def _write(tmp_path, questions, name="longmemeval_s_cleaned.json"):
    path = tmp_path / name
    text = json.dumps(questions)
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def test_repeated_sessions_and_texts_keep_the_official_corpus_with_storable_memories(tmp_path):
    """The S file repeats a session in a few haystacks (the official corpus holds it twice under one
    id) and repeats texts (the store keeps one memory per text in a namespace): a repeated text is
    the first one's memory, ranked beside it; another text of a repeated session is ``@1``."""
    from lab.eval.longmemeval_metrics import full_rankings
    from lab.store.records import validate_id

    again = _turns(("user", "hello there", False), ("assistant", "hi", False), ("user", "something new", False))
    q = _question(haystack_session_ids=["s1", "answer_x", "s1"], haystack_dates=["2023/05/20 (Sat) 02:21"] * 3,
                  haystack_sessions=_question()["haystack_sessions"] + [again])
    data = lme.load_longmemeval(_write(tmp_path, [q]), verify=False)
    corpus = data.report["longmemeval"]["corpus"]["q0"]
    assert corpus == [["s1_1", "lme-q0:s1#0"], ["answer_x_1", "lme-q0:answer_x#0"], ["noans_x_3", None],
                      ["noans_x_5", "lme-q0:answer_x#4"], ["s1_1", "lme-q0:s1#0"], ["s1_3", "lme-q0:s1@1#2"]]
    ids = [m["id"] for m in data.memories]
    assert len(set(ids)) == len(ids) == 4 and all(validate_id(i) for i in ids)
    assert data.report["same_text_items"] == 1
    run = pl.DataFrame({"qid": ["q0", "q0"], "memory_id": ["lme-q0:s1@1#2", "lme-q0:s1#0"], "rank": [1, 2]})
    assert full_rankings(run, data.report["longmemeval"])["q0"] == [5, 0, 4, 1, 2, 3]


def test_the_official_population_leaves_out_abstention_and_assistant_only_evidence(tmp_path):
    assistant_only = _question("q1", haystack_sessions=[_question()["haystack_sessions"][0],
                                                        _turns(("user", "hi", False), ("assistant", "red", True))])
    path = _write(tmp_path, [_question(), assistant_only, _question("q2_abs", answer_session_ids=[])])
    data = lme.load_longmemeval(path, verify=False)
    info = data.report["longmemeval"]
    assert info["no_target"] == ["q1"] and info["abstention"] == ["q2_abs"]
    assert info["corpus"]["q0"] == [["s1_1", "lme-q0:s1#0"], ["answer_x_1", "lme-q0:answer_x#0"],
                                    ["noans_x_3", None], ["noans_x_5", "lme-q0:answer_x#4"]]  # the empty turn: no memory
    assert data.report["empty_turns"] == 2 and data.report["empty_items_skipped"] == 2  # a user turn of q0 and of q2_abs
    # q0's gold ranked first, q1 ranked nothing: were q1 scored, recall_any@1 would be 0.5
    run = pl.DataFrame({"qid": ["q0"], "memory_id": ["lme-q0:answer_x#0"], "rank": [1]})
    got = longmemeval_metrics(run, info)
    assert got["questions"] == 1 and got["excluded"] == {"abstention": 1, "no_target": 1, "gold_warnings": 0}
    assert got["excluded_ids"] == {"abstention": ["q2_abs"], "no_target": ["q1"]}
    from lab.eval.longmemeval_metrics import report_lines

    assert ("Left out of the means, as the official scoring does: abstention (`_abs`) q2_abs; no target turn q1."
            in report_lines(got))
    assert got["turn"]["recall_any@1"] == 1.0 and got["session"]["recall_all@1"] == 1.0
    assert got["headline"]["turn"] == {n: got["turn"][n] for n in ("recall_all@5", "ndcg_any@5", "recall_all@10",
                                                                     "ndcg_any@10", "recall_all@50", "ndcg_any@50")}


def test_a_gz_file_is_streamed_and_a_damaged_one_refused_in_one_line(tmp_path, monkeypatch):
    questions = [_question(), _question("q1")]
    path = _write(tmp_path, questions, "longmemeval_x.json.gz")
    monkeypatch.setattr(longmemeval_reader, "CHUNK", 7)  # every question spans many reads
    assert list(lme.iter_questions(path)) == questions
    with pytest.warns(LabWarning, match=r"longmemeval_x.json.gz: sha256 [0-9a-f]{64} is not one lab knows"):
        data = lme.load_longmemeval(path, granularity="session")
    assert data.name == "longmemeval-x+session" and data.report["sha256"] == lme.content_sha256(path)
    assert [m["id"] for m in data.memories if m["namespace"] == "lme-q0"] == ["lme-q0:s1", "lme-q0:answer_x"]
    truncated = tmp_path / "cut.json.gz"
    truncated.write_bytes(path.read_bytes()[:-30])
    plain = tmp_path / "plain.json.gz"
    plain.write_text(json.dumps(questions))
    for bad, said in ((truncated, "it ends early"), (plain, "Not a gzipped file")):
        for verify in (True, False):  # the checksum's read and the questions' read say the same
            with pytest.raises(ValidationError, match=f"^{bad}: not a readable gzip file: .*{said}") as got:
                lme.load_longmemeval(bad, verify=verify)
            assert "\n" not in str(got.value)


def test_duplicate_ids_and_mixed_granularities_are_refused_naming_the_ids(tmp_path):
    path = _write(tmp_path, [_question(), _question("q1"), _question(), _question("q1"), _question("q2")])
    with pytest.raises(ValidationError, match=r"duplicate question ids \['q0', 'q1'\]"):
        lme.load_longmemeval(path, verify=False)
    bare = _question("q1", haystack_session_ids=["a", "b"], haystack_sessions=_question()["haystack_sessions"][0])
    path = _write(tmp_path, [_question(), bare])
    with pytest.raises(ValidationError, match=r"mixes granularities: 'q0' holds sessions \(lists of turns\), "
                                              r"'q1' bare turns"):
        lme.load_longmemeval(path, verify=False)


def test_gold_that_disagrees_with_the_haystack_is_warned_naming_question_and_sessions(tmp_path):
    stray = _question("q1", haystack_sessions=[_turns(("user", "red bike", True)), _question()["haystack_sessions"][1]])
    missing = _question("q2", answer_session_ids=["answer_x", "answer_gone"])
    path = _write(tmp_path, [_question(), stray, missing])
    with pytest.warns(LabWarning, match=r"gold disagrees with the haystack in 2 question\(s\), scored as the official "
                                        r"code scores them: q1: evidence turns \(has_answer\) in session\(s\) \['s1'\], "
                                        r"which are not answer sessions; q2: answer session\(s\) \['answer_gone'\] not "
                                        r"in the haystack"):
        data = lme.load_longmemeval(path, verify=False)
    assert set(data.report["longmemeval"]["gold_warnings"]) == {"q1", "q2"}


def test_the_options_travel_with_the_dataset_reference_and_are_refused_elsewhere(tmp_path):
    path = _write(tmp_path, [_question()], "longmemeval_y.json.gz")
    ref = DatasetRef(str(path), options=DatasetOptions(granularity="session", corpus="all"))
    travelled = pickle.loads(pickle.dumps(ref.portable()))
    with pytest.warns(LabWarning):
        data = travelled.load()
    assert data.name == "longmemeval-y+session+all-turns" and data.report["longmemeval"]["corpus_roles"] == "all"
    with pytest.raises(ValidationError, match=r"--granularity and --corpus apply to a LongMemEval file, not 'demo'"):
        DatasetRef("demo", options=DatasetOptions(granularity="session")).load()


def test_lab_eval_writes_the_official_log_and_prints_the_headline(tmp_path):
    assistant_only = _question("q1", haystack_sessions=[_question()["haystack_sessions"][0],
                                                        _turns(("user", "hi", False), ("assistant", "red", True))])
    path = _write(tmp_path, [_question(), assistant_only, _question("q2_abs")], "longmemeval_z.json.gz")
    env = {**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(path), "--preset", "bm25", "--model",
                          FAKE_MODEL, "--granularity", "session", "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert got.returncode == 0, got.stderr[-2000:]
    assert ("LongMemEval official (session granularity, user corpus): 1 questions scored; excluded 1 abstention, "
            "1 with no target turn") in got.stdout
    folder = tmp_path / "runs" / "longmemeval-z+session+fake-bm25"
    metrics = json.loads((folder / "metrics.json").read_text())["longmemeval"]
    (entry,) = [json.loads(line) for line in (folder / "longmemeval_retrievallog.jsonl").read_text().splitlines()]
    (excluded,) = [json.loads(line) for line in (folder / "longmemeval_retrievallog_excluded.jsonl").read_text().splitlines()]
    assert entry["question_id"] == "q0" and excluded["question_id"] == "q1"
    assert entry["haystack_sessions"] == _question()["haystack_sessions"]  # what run_generation.py reads
    ranked = entry["retrieval_results"]["ranked_items"]
    assert sorted(i["corpus_id"] for i in ranked) == ["answer_x", "s1"] and ranked[0]["timestamp"] == "2023/05/20 (Sat) 02:21"
    assert entry["retrieval_results"]["metrics"]["session"] == metrics["session"] and metrics["turn"] == {}
    printed = f"Session-level metrics: recall_all@5 = {round(metrics['session']['recall_all@5'], 4)}"
    assert printed in got.stdout and "## LongMemEval (official retrieval protocol)" in (folder / "report.md").read_text()
    assert json.loads((folder / "longmemeval_exclusions.json").read_text())["no_target"] == ["q1"]
    cut = tmp_path / "longmemeval_cut.json.gz"
    cut.write_bytes(path.read_bytes()[:-30])
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(cut), "--preset", "bm25", "--model",
                          FAKE_MODEL, "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    said = (got.stdout + got.stderr).strip().splitlines()
    assert got.returncode == 2 and said == [f"error: {cut}: not a readable gzip file: it ends early (a truncated file?)"]


def test_a_real_slice_of_the_shared_half_read_as_it_comes(tmp_path):
    """The first questions of the shared development half, streamed off its .gz (never the whole half)."""
    half = require_dataset("longmemeval/longmemeval_s_dev.json.gz")
    first = list(itertools.islice(lme.iter_questions(half), 3))
    path = _write(tmp_path, first, "longmemeval_slice.json.gz")
    with pytest.warns(LabWarning, match="is not one lab knows"):
        turns = lme.load_longmemeval(path)
    with pytest.warns(LabWarning, match="is not one lab knows"):
        sessions = lme.load_longmemeval(path, granularity="session")
    q = first[0]
    info = sessions.report["longmemeval"]
    assert [cid for cid, _ in info["corpus"][q["question_id"]]] == [
        s.replace("answer", "noans") if "answer" in s and not any(t.get("has_answer") for t in turns_ if t["role"] == "user")
        else s for s, turns_ in zip(q["haystack_session_ids"], q["haystack_sessions"])]
    expected = [f"{s}_{n + 1}".replace("answer", "noans") if "answer" in s and not t.get("has_answer") else f"{s}_{n + 1}"
                for s, sess in zip(q["haystack_session_ids"], q["haystack_sessions"])
                for n, t in enumerate(sess) if t["role"] == "user"]
    assert [cid for cid, _ in turns.report["longmemeval"]["corpus"][q["question_id"]]] == expected
    gold = set(turns.qrels.filter(pl.col("qid") == q["question_id"])["memory_id"])
    assert gold and all("answer" in next(c for c, m in turns.report["longmemeval"]["corpus"][q["question_id"]] if m == g)
                        for g in gold)


def test_lab_datasets_knows_the_dev_half_by_the_checksum_of_its_json(tmp_path):
    from lab.eval.catalog import survey

    (tmp_path / "longmemeval").mkdir()
    (tmp_path / "longmemeval" / "longmemeval_s_dev.json.gz").write_bytes(gzip.compress(b"[]")[:-5])
    entry = {e["name"]: e for e in survey(tmp_path)}
    assert entry["longmemeval-s-dev"]["status"] == "differs" and entry["longmemeval-oracle-dev"]["status"] == "missing"
    assert entry["longmemeval-s-dev"]["files"][0]["sha256"].startswith("unreadable: ")
    with pytest.raises(ValidationError, match=r"longmemeval-oracle-dev: .*longmemeval_oracle_dev.json.gz not found"):
        DatasetRef("longmemeval-oracle-dev", tmp_path).load()
    with pytest.raises(ValidationError, match=r"longmemeval-oracle-dev: .*longmemeval_oracle_dev.json.gz not found"):
        load_dataset("longmemeval-oracle-dev", tmp_path)  # lab tune and the flow's stages name it the same
    with pytest.warns(LabWarning, match="is not one lab knows"):
        assert load_dataset(str(_write(tmp_path, [_question()], "mine.json.gz"))).name == "mine"
    half = require_dataset("longmemeval/longmemeval_s_dev.json.gz")  # hashed as it streams, never loaded whole
    shared = {e["name"]: e for e in survey(half.parent.parent)}
    assert shared["longmemeval-s-dev"]["status"] == "found"
    assert shared["longmemeval-s-dev"]["files"][0]["sha256"] == lme.KNOWN_SHA256["longmemeval_s_dev.json.gz"]


@pytest.mark.parametrize("inside,said", [
    (b"\x00\xff" * 5000, r": not UTF-8 text \(byte 1 of a read\)"),
    (b'[{"question_id": "q0", "haystack_sessions": ' + b"[" * 20000 + b"]" * 20000 + b"}]",
     r" question 1 \('q0'\): nested deeper than a JSON reader follows"),
])
def test_binary_or_deeply_nested_json_inside_a_gz_is_one_line(tmp_path, inside, said):
    path = tmp_path / "longmemeval_w.json.gz"
    path.write_bytes(gzip.compress(inside))
    with pytest.raises(ValidationError, match=f"^{path}{said}") as got:
        lme.load_longmemeval(path, verify=False)
    assert "\n" not in str(got.value)
