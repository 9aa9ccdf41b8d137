"""The embedded demo set meets its spec; the LoCoMo reader reads the real file."""
from __future__ import annotations

from datetime import timedelta

import polars as pl
import pytest

from conftest import ROOT, require_dataset
from lab.config import FAKE_MODEL
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.eval.locomo import load_conversations
from lab.pipeline import Pipeline
from lab.schema import MEMORY_TYPES


def test_demo_dataset_ingests_and_meets_its_spec(tmp_path):
    pipe = Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True)
    report = pipe.ingest(ROOT / "datasets" / "demo", progress=False)
    assert len(report.created) >= 300 and report.duplicates == []
    mem = pipe.store.memories()
    assert set(mem["type"].unique()) == set(MEMORY_TYPES)
    assert mem["namespace"].n_unique() >= 2
    assert mem["created_at"].max() - mem["created_at"].min() >= timedelta(days=90)
    assert mem.filter(pl.col("type") == "anchor")["pinned"].all()
    assert mem.filter(pl.col("type") == "working").height >= 5
    edges = pipe.store.edges()
    assert report.edges == edges.height >= 50
    counts = dict(edges.group_by("relation").len().iter_rows())
    assert counts["supersedes"] >= 3 and counts["contradicts"] >= 2
    # a supersedes chain of length 3 exists: a -> b -> c
    sup = edges.filter(pl.col("relation") == "supersedes").select("src", "dst").rows()
    replaced = {dst: src for src, dst in sup}
    assert any(replaced.get(src) for src in replaced.values())
    pipe.close()


@pytest.mark.slow
def test_locomo_reader_on_the_real_file():
    path = require_dataset("locomo/locomo10-dev.json")
    convs = load_conversations(path)
    assert [c.sample_id for c in convs] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    turns = [t for c in convs for t in c.turns]
    assert len(turns) == 2760
    first = convs[0].turns[0]
    assert first["id"] == "conv-26:D1:1" and first["source"] == "D1:1"
    assert first["content"].startswith("Caroline: ")
    assert first["created_at"].isoformat() == "2023-05-08T13:56:00+00:00"
    # turns keep their order in time inside each conversation
    for conv in convs:
        times = [t["created_at"] for t in conv.turns]
        assert times == sorted(times)
    assert any("[shares an image:" in t["content"] for t in turns)


def _locomo_file(tmp_path, sample, name="mine.json"):
    import json

    path = tmp_path / name
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


GOOD = {"sample_id": "c1", "conversation": {
    "speaker_a": "Ann", "speaker_b": "Bob", "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat"},
                  {"speaker": "Bob", "dia_id": "D1:2", "text": "What is its name?"}]},
    "qa": [{"question": "What did Ann adopt?", "evidence": ["D1:1"], "category": 4}]}


@pytest.mark.parametrize("change, message", [
    (lambda s: [1, 2], "sample 1 must be an object, got int"),
    (lambda s: {**s, "qa": {"q": 1}}, "'qa' must be a list of questions, got dict"),
    (lambda s: {**s, "conversation": {**s["conversation"], "session_1": [{"speaker": "Ann", "dia_id": "D1:1"}]}},
     "sample c1 session_1 turn 1: lacks a 'text' string"),
    (lambda s: {**s, "conversation": {k: v for k, v in s["conversation"].items() if k != "session_1_date_time"}},
     "no 'session_1_date_time' string"),
    (lambda s: {**s, "qa": ["what?"]}, "question 1: expected an object with a 'question' string"),
    (lambda s: {**s, "qa": []}, "no usable questions \\(0 in the file"),
])
def test_malformed_locomo_files_are_named_not_tracebacks(tmp_path, change, message):
    import json

    from lab.eval.locomo import load_locomo

    sample = change(GOOD)
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(sample if isinstance(sample, list) else [sample]), encoding="utf-8")
    with pytest.raises(ValidationError, match=message):
        load_locomo(path)


def test_a_custom_locomo_file_is_named_by_its_stem_and_a_bare_folder_is_explained(tmp_path):
    from lab.eval.goldens import load_dataset
    from lab.eval.locomo import load_locomo

    assert load_locomo(_locomo_file(tmp_path, GOOD, "my convs.json")).name == "my-convs"
    (tmp_path / "notbeir").mkdir()
    with pytest.raises(ValidationError, match="without corpus.jsonl: a BEIR folder holds"):
        load_dataset(str(tmp_path / "notbeir"))


def test_a_run_folder_of_another_file_is_not_overwritten(tmp_path):
    import json

    from lab.errors import ConflictError
    from lab.eval.locomo import load_locomo
    from lab.eval.run_folder import maker, publish

    dataset = load_locomo(_locomo_file(tmp_path, GOOD))
    made = maker("search configuration", "lab", dataset.name, dataset.source)
    out = tmp_path / "runs" / "mine-lab"
    out.mkdir(parents=True)
    (out / "dataset.json").write_text(json.dumps({"name": "mine", "source": "/elsewhere/mine.json"}))
    with pytest.raises(ConflictError, match="holds a run of /elsewhere/mine.json"):
        publish(out, made, lambda folder: (folder / "metrics.json").write_text("{}"))
    assert sorted(p.name for p in out.iterdir()) == ["dataset.json"]  # nothing written
    (out / "dataset.json").write_text(json.dumps({"name": "mine", "source": dataset.source}))
    publish(out, made, lambda folder: (folder / "metrics.json").write_text("{}"))  # the same file again: fine
    other = maker("search configuration", "lab", dataset.name, "/elsewhere/mine.json")
    with pytest.raises(ConflictError, match=r"holds a run of the search configuration 'lab' on mine \(.*\)"):
        publish(out, other, lambda folder: None)




def _blocks(page: str, lang: str) -> list[str]:
    import re

    return re.findall(rf"```{lang}\n(.*?)```", page, flags=re.S)


def test_the_manuals_gold_set_example_checks_and_evaluates_from_its_own_folder(tmp_path):
    """The example in docs/evaluation.md, written out as the page says: its dataset resolves beside
    the file (not under the project's datasets/), `lab goldens check` says what it holds, and
    `lab eval` runs it."""
    import json
    import os
    import subprocess
    import sys

    page = (ROOT / "docs" / "evaluation.md").read_text()
    section = page[page.index("## Your own gold set"):page.index("## Your own conversations")]
    memories, edges = _blocks(section, "json")
    (tmp_path / "mine" / "data").mkdir(parents=True)
    (tmp_path / "mine" / "data" / "memories.jsonl").write_text(memories)
    (tmp_path / "mine" / "data" / "edges.jsonl").write_text(edges)
    (tmp_path / "mine" / "gold.yaml").write_text(_blocks(section, "yaml")[0])
    env = {**os.environ, "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "goldens", "check", "mine/gold.yaml", "--json"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert got.returncode == 0, got.stderr
    held = json.loads(got.stdout)
    assert (held["memories"], held["edges"], held["questions"], held["stale"]) == (4, 2, 3, 1)
    assert held["by_category"] == {"multi-hop": 1, "paraphrase": 1, "superseded": 1}
    assert held["data"] == str((tmp_path / "mine" / "data").resolve())
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "mine/gold.yaml", "--preset", "bm25",
                          "--model", FAKE_MODEL, "--no-track", "--quiet", "--out", "runs"],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    assert "mine" in got.stdout and "3 q" in got.stdout


def test_a_golden_file_naming_a_missing_folder_is_refused_naming_both_places(tmp_path):
    from lab.eval.goldens import load_golden

    gold = tmp_path / "gold.yaml"
    gold.write_text("dataset: nowhere\nquestions: []\n")
    with pytest.raises(ValidationError, match=r"dataset 'nowhere' is neither a folder beside the file .* nor one of "
                                              r"the project's datasets"):
        load_golden(gold)
