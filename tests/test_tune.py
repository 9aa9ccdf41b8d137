"""Sweeps, tracking, the gate and export, end to end on the demo goldens with the fake embedder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
import yaml

from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.tune.spec import parse_spec
from lab.eval.split import split_questions
from lab.tune.strategies import make_strategy

ROOT = Path(__file__).resolve().parent.parent
SPEC = {"name": "t", "dataset": "demo", "strategy": "grid", "objective": "recall@10", "ks": [5, 10],
        "validation": 0.3, "top_n": 2,
        "space": {"fusion.k": [0, 2, 60], "fusion.weights.vector": [0.5, 1.0], "assemble.budget": [500, 2000]}}


@pytest.mark.parametrize("change, message", [
    ({"space": {"fusion.kk": [1]}}, "unknown parameter 'fusion.kk'"),
    ({"strategy": "annealing"}, "unknown 'annealing'"),
    ({"space": {"fusion.k": [float("nan")]}}, "finite number"),
    ({"space": {"fusion.weights.vector": [-1]}}, r"space.fusion.weights.vector must be a finite number >= 0, got -1"),
    ({"space": {"assemble.budget": [0]}}, r"space.assemble.budget must be a finite number >= 1 and <= 1000000, got 0"),
    ({"space": {"fusion.superseded": ["drop"]}}, r"space.fusion.superseded must be demote, hide or keep, got 'drop'"),
    ({"space": {"index.context_turns": [2.5]}}, r"space.index.context_turns: expected an integer, got 2.5"),
    ({"constraints": ["tokens about 2000"]}, "cannot read"),
    ({"objective": "recall@50"}, "unknown metric 'recall@50'"),
    ({"strategy": "random"}, "needs a trial budget"),
    ({"space": {"fusion.k": {"low": 5, "high": 1}}}, "below low"),
    ({"space": {"index.bm25_method": ["lucene", "bm26"]}}, r"space.index.bm25_method must be robertson, lucene, atire, bm25l or bm25\+, got 'bm26'"),
    ({"space": {"index.stemmer": ["english", "klingon"]}}, r"space.index.stemmer: .*unknown stemmer 'klingon'"),
    ({"space": {"index.stopwords": ["xx"]}}, r"space.index.stopwords: .*unknown stopword list 'xx'"),
    ({"space": {"index.bm25_b": [0.5, 1.5]}}, r"space.index.bm25_b must be a finite number >= 0 and <= 1, got 1.5"),
])
def test_bad_sweep_files_name_the_problem(change, message):
    with pytest.raises(ValidationError, match=message):
        parse_spec({**SPEC, **change})


def test_split_keeps_conversations_apart_and_is_seeded():
    qs = pl.DataFrame({"qid": [f"q{i:03d}" for i in range(100)], "namespace": [f"conv{i % 7}" for i in range(100)]})
    a = split_questions(qs, 0.3, seed=1)
    assert a.equals(split_questions(qs, 0.3, seed=1))
    parts = a.join(qs, on="qid").group_by("namespace").agg(pl.col("part").n_unique())
    assert parts["part"].max() == 1  # no conversation on both sides
    share = (a["part"] == "validation").mean()
    assert 0.15 <= share <= 0.45 and not a.equals(split_questions(qs, 0.3, seed=2))
    one = split_questions(qs.with_columns(pl.lit("only").alias("namespace")), 0.3, seed=0)
    assert one["group"].n_unique() == 100  # a single conversation: split by question


def test_strategies_are_seeded_and_grid_is_complete():
    spec = parse_spec({**SPEC, "space": {"fusion.k": {"low": 0, "high": 100}, "fusion.weights.vector": [0.5, 1.0]},
                       "strategy": "random", "trials": 20})
    draw = lambda: make_strategy("random", spec.space, 20, 3).ask(100)  # noqa: E731
    assert draw() == draw() and len(draw()) == 20
    grid = make_strategy("grid", parse_spec(SPEC).dims("fusion"), None, 0)
    assert len(grid.ask(100)) == 6 and grid.ask(100) == []
    tpe = lambda: make_strategy("tpe", spec.space, 5, 7).ask(5)  # noqa: E731
    assert tpe() == tpe()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return tmp_path_factory.mktemp("tune")


def _sweep(workspace, name, track=False, uri=None, **extra):
    from lab.tune.sweep import run_sweep

    spec = parse_spec({**SPEC, "name": name, **extra})
    return run_sweep(spec, out_root=workspace / "sweeps", progress=False, embedder=FakeEmbedder(),
                     root=workspace / "eval", track=track, tracking_uri=uri)


def test_sweep_is_deterministic_writes_its_outputs_and_rebuilds_nothing_the_second_time(workspace):
    first = _sweep(workspace, "a")
    stores = sorted((workspace / "eval" / "stores").iterdir())
    tables = sorted(p.name for p in (workspace / "eval" / "candidates").iterdir())
    mtimes = {p: p.stat().st_mtime_ns for p in (workspace / "eval").rglob("*") if p.is_file()}
    second = _sweep(workspace, "b")
    assert first.table.drop("trial").equals(second.table.drop("trial"))
    assert first.best == second.best and first.table.height == 6
    # fingerprint caching: the same store and candidate table, nothing rebuilt or rewritten
    assert sorted((workspace / "eval" / "stores").iterdir()) == stores
    assert sorted(p.name for p in (workspace / "eval" / "candidates").iterdir()) == tables
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes
    folder = first.folder
    for name in ("results.parquet", "results.csv", "best.yaml", "summary.json", "assembly.parquet", "heatmap.png",
                 "pareto.png", "split.parquet"):
        assert (folder / name).is_file(), name
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["gap"] == pytest.approx(summary["tune"] - summary["validation"])
    assert first.assembly.height == 2 * 2  # top_n configurations x two budgets
    best = yaml.safe_load((folder / "best.yaml").read_text())
    assert best["fusion"]["k"] == first.best["fusion.k"]
    # the chosen row is the best feasible one on tune
    top = first.table.filter(pl.col("feasible")).sort("tune/recall@10", descending=True)
    assert first.best["tune/recall@10"] == top["tune/recall@10"][0]


def test_sweep_constraints_and_tracking(workspace, tmp_path):
    from lab import track

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    result = _sweep(workspace, "c", track=True, uri=uri, constraints=["context_tokens <= 600"])
    assert result.best["assemble.budget"] == 500  # only the 500-token budget keeps contexts under 600
    runs = track.recent_runs(50, uri)
    parents = [r for r in runs if r["kind"] == "sweep"]
    children = [r for r in runs if r["kind"] == "sweep-trial"]
    assert len(parents) == 1 and len(children) == 2  # the best N as children, not one run per configuration
    assert all(c["parent"] == parents[0]["run_id"] for c in children)
    with pytest.raises(ValidationError, match="no configuration satisfies"):
        _sweep(workspace, "d", constraints=["context_tokens <= 1"])


def test_a_sweep_varies_view_weights_and_the_neighbour_boost(workspace, tmp_path):
    from lab import track

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    space = {"fusion.weights.vector@plain": [0.0, 1.0], "fusion.neighbour_boost": [0.0, 0.5]}
    result = _sweep(workspace, "views", track=True, uri=uri, space=space)
    table = result.table.filter(pl.col("error").is_null())
    assert table.height == 4 and {"fusion.weights.vector@plain", "fusion.neighbour_boost"} <= set(table.columns)
    # each knob reaches the fusion: the four configurations do not all score alike
    assert table["tune/ndcg@10"].n_unique() > 1
    best = yaml.safe_load((result.folder / "best.yaml").read_text())
    assert best["fusion"]["weights"]["vector@plain"] == result.best["fusion.weights.vector@plain"]
    assert best["fusion"]["neighbour_boost"] == result.best["fusion.neighbour_boost"]
    assert any(r["kind"] == "sweep" for r in track.recent_runs(10, uri))  # MLflow took the '@' names


def _gate_file(tmp_path, **suite):
    data = {"model": "lab-test", "alpha": 0.05, "suites": {"demo": {"dataset": "demo", **suite}}}
    path = tmp_path / f"gate-{len(list(tmp_path.glob('gate-*')))}.yaml"
    path.write_text(yaml.safe_dump(data))
    from lab.gate.checks import load_gate

    return load_gate(path)


def _gate(gate, candidate, workspace, uri, rebaseline=False, **kw):
    from lab.gate.run import JudgeOptions, run_gate

    judging = JudgeOptions(root=workspace / "eval", embedder=FakeEmbedder(), rebaseline=rebaseline)
    return run_gate(gate, candidate, judging=judging, out_root=workspace / "gate", uri=uri, **kw)


def test_gate_verdicts_export_and_the_champion(workspace, tmp_path):
    from lab import track

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    passing = _gate_file(tmp_path, min={"recall@10": 0.3}, non_regression=["recall@10"],
                         signal_health={"vector": 0.9}, save_then_search={"recall@10": 0.0})
    first = _gate(passing, "lab", workspace, uri, export=True)
    assert first.verdict == "GO" and str(first.export.version) == "1"
    again = _gate(passing, "lab", workspace, uri)
    strip = lambda r: [c.as_dict() for c in r.checks if "champion" not in c.name and "non-regression" not in c.name]  # noqa: E731
    assert strip(first) == strip(again)  # same candidate, data and seed: the same numbers, bit for bit
    assert str(track.champion("lab-test", uri)["version"]) == "1"
    manifest = json.loads((Path(first.export.bundle) / "manifest.json").read_text())
    assert manifest["store"]["version"] and manifest["run_id"] == first.run_id

    # the fake embedder cannot bridge the goldens' paraphrases ("queue pile-up" for "backlog"): only
    # the few just-saved memories that share a question's words are found (by BM25, whose statistics
    # now count them at once), so a save-then-search minimum of one half fails, as it should
    too_high = _gate_file(tmp_path, min={"recall@10": 0.99}, save_then_search={"recall@10": 0.5})
    low = _gate(too_high, "lab", workspace, uri, export=True)
    assert low.verdict == "NO-GO" and low.export is None
    assert [line.split(" = ")[0] for line in low.refused] == ["demo: min recall@10 (95% CI low)",
                                                              "demo: save-then-search recall@10"]
    assert str(track.champion("lab-test", uri)["version"]) == "1"  # the alias moves only on GO

    worse = tmp_path / "worse.yaml"  # recency only: far below the champion on the same questions
    worse.write_text(yaml.safe_dump({"name": "recency-only", "signals": ["recency"],
                                     "fusion": {"weights": {"recency": 1.0}}}))
    regressed = _gate(passing, str(worse), workspace, uri)
    drop = [c for c in regressed.checks if c.name == "non-regression recall@10"]
    assert regressed.verdict == "NO-GO" and drop and not drop[0].passed

    dead = _gate_file(tmp_path, signal_health={"temporal": 0.9})
    sick = _gate(dead, "lab", workspace, uri)
    assert sick.verdict == "NO-GO" and [c.name for c in sick.checks if not c.passed] == ["signal temporal returns candidates"]

    tags = {r["run_id"]: r["verdict"] for r in track.recent_runs(50, uri, kind="gate")}
    assert tags[first.run_id] == "GO" and tags[low.run_id] == "NO-GO"

    # the exported model answers in a fresh process
    code = ("import mlflow, pandas as pd; m = mlflow.pyfunc.load_model('models:/lab-test@champion'); "
            "out = m.predict(pd.DataFrame({'query': ['billing service failure'], 'namespace': ['atlas'], 'k': [3]})); "
            "print(len(out.iloc[0]['memory_ids']), out.iloc[0]['tokens'] > 0)")
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.split()[-2:] == ["3", "True"]


def test_gate_cli_exit_codes(workspace, tmp_path):
    gate = tmp_path / "g.yaml"
    gate.write_text(yaml.safe_dump({"model": "lab-cli", "suites": {"demo": {"dataset": "demo", "min": {"recall@10": 0.99}}}}))
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'm.db'}", "LAB_EVAL_ROOT": str(workspace / "eval")}
    cmd = [sys.executable, "-m", "lab.cli", "gate", "--config", str(gate), "--out", str(tmp_path / "out"), "--json"]
    # the fake embedder is not reachable from the command line: the eval store is the real one, so only
    # exit codes for a malformed file and a missing one are checked here (fast); verdicts are above
    bad = tmp_path / "bad.yaml"
    bad.write_text("suites: [1, 2]")
    got = subprocess.run(cmd[:5] + [str(bad)] + cmd[6:], capture_output=True, text=True, env=env, timeout=120)
    assert got.returncode == 2 and "suites" in got.stderr
    got = subprocess.run(cmd[:5] + [str(tmp_path / "none.yaml")] + cmd[6:], capture_output=True, text=True, env=env,
                         timeout=120)
    assert got.returncode == 3 and "gate config not found" in got.stderr  # 3: not found, as every missing input


def test_a_candidate_file_carries_its_index_and_assembly_settings_through_gate_and_export(workspace, tmp_path):
    from lab import track
    from lab.config import load_candidate

    best = _sweep(workspace, "e", space={"fusion.k": [10, 60], "index.context_turns": [0, 2],
                                         "assemble.budget": [500, 1000]})
    chosen = load_candidate(best.folder / "best.yaml")  # a candidate file, and still a preset file
    assert chosen.search.fusion.k == best.best["fusion.k"]
    assert chosen.save.chunk.context_turns == best.best["index.context_turns"]
    assert chosen.assemble.budget == best.best["assemble.budget"]

    candidate = tmp_path / "cand.yaml"
    candidate.write_text(yaml.safe_dump({"name": "ctx0", "save": {"chunk": {"context_turns": 0}},
                                         "assemble": {"budget": 777}}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    gate = _gate_file(tmp_path, min={"recall@10": 0.1})
    default = _gate(gate, "lab", workspace, uri)
    got = _gate(gate, str(candidate), workspace, uri, export=True)
    assert got.verdict == "GO"
    assert got.suites["demo"].store != default.suites["demo"].store  # judged on its own index
    bundle = Path(got.export.bundle)
    assert json.loads((bundle / "save.json").read_text())["chunk"]["context_turns"] == 0
    assert json.loads((bundle / "assemble.json").read_text())["budget"] == 777
    assert track.champion("lab-test", uri)["save"]["chunk"]["context_turns"] == 0

    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"save": {"chunk": {"turns": 0}}}))
    with pytest.raises(ValidationError, match=r"bad.yaml: save.chunk: unknown key\(s\) \['turns'\]"):
        load_candidate(bad)


def test_lexical_index_settings_are_sweep_dimensions_carried_into_the_candidate_file(workspace):
    from lab.config import load_candidate

    best = _sweep(workspace, "lx", space={"index.bm25_method": ["lucene", "bm25+"], "index.stemmer": ["english", "none"],
                                          "index.stopwords": ["en", "en_plus"]})
    assert best.table.height == 8
    # each index point is its own index: stemming or not changes what BM25 finds on the demo
    assert best.table["error"].is_null().all()
    by_stemmer = best.table.group_by("index.stemmer").agg(pl.col("all/ndcg@10").mean())
    assert by_stemmer["all/ndcg@10"].n_unique() == 2
    chosen = load_candidate(best.folder / "best.yaml")
    lexical = chosen.save.index.lexical
    assert (lexical.method, lexical.stemmer, lexical.stopwords) == (
        best.best["index.bm25_method"], best.best["index.stemmer"], best.best["index.stopwords"])


def test_lexical_off_has_one_spelling_and_bad_names_fail_in_the_config():
    from lab.config import LexicalIndexConfig, to_dict

    assert to_dict(LexicalIndexConfig(stemmer="none", stopwords="")) == to_dict(LexicalIndexConfig(stemmer=None, stopwords=None))
    with pytest.raises(ValidationError, match="index.lexical.stemmer: unknown stemmer 'klingon'"):
        LexicalIndexConfig(stemmer="klingon")
    with pytest.raises(ValidationError, match="index.lexical.stopwords: unknown stopword list 'xx'"):
        LexicalIndexConfig(stopwords="xx")


def test_the_gate_refuses_a_delta_over_data_changed_since_the_champion_was_judged(workspace, tmp_path):
    from lab import track
    from lab.errors import ConflictError
    from lab.eval.goldens import load_dataset

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    gate = _gate_file(tmp_path, min={"recall@10": 0.1}, non_regression=["recall@10"])
    first = _gate(gate, "lab", workspace, uri, export=True)
    assert first.export is not None
    judged = track.champion("lab-test", uri)["data"]["demo"]
    dataset = load_dataset("demo")
    assert judged == {"dataset": "demo", "corpus": dataset.fingerprint(), "gold": dataset.gold_fingerprint()}
    assert _gate(gate, "lab", workspace, uri).verdict == "GO"  # the same data: compared as before

    # the champion's bundle now says it was judged on other labels (as if the goldens were edited
    # since): the gate reads the champion from its bundle, as serving does, not from registry tags
    manifest = track.model_bundle(track.champion("lab-test", uri), uri) / "manifest.json"
    written = json.loads(manifest.read_text())
    written["metrics"]["demo"]["gold_fingerprint"] = "0123456789abcdef"
    manifest.write_text(json.dumps(written))
    with pytest.raises(ConflictError, match=f"gold 0123456789abcdef -> {judged['gold']}.*--rebaseline"):
        _gate(gate, "lab", workspace, uri)
    again = _gate(gate, "lab", workspace, uri, rebaseline=True)
    note = next(c.note for c in again.checks if c.name.startswith("non-regression"))
    assert again.verdict == "GO" and "rebaselined" in note and "0123456789abcdef" in note

    # a label moved changes the gold fingerprint, not the corpus's
    moved = load_dataset("demo")
    moved.qrels = moved.qrels.with_columns(moved.qrels["memory_id"].shift(1, fill_value="x"))
    assert moved.gold_fingerprint() != dataset.gold_fingerprint() and moved.fingerprint() == dataset.fingerprint()


NOUNS = ("gym bag", "toolbox", "bike shed", "wine cellar", "garden gate", "filing cabinet", "attic hatch", "boat house",
         "server rack", "mail box", "gun safe", "piano bench", "tack room", "pool house", "dog kennel", "green house",
         "wood stove", "tree house", "rain barrel", "fire pit", "root cellar", "guest suite", "music room", "dark room",
         "ski locker", "tool crib", "paint shed", "pantry door", "chicken coop", "hay loft")


def _two_suites(folder: Path) -> Path:
    """A corpus where each code was changed once (the old value in 2025, the current one six hours
    before the reference time), and two gold files over it: one asking for the codes as first set
    (gold: the old memories), one for the current codes (gold: the new ones)."""
    corpus = folder / "codes"
    corpus.mkdir(parents=True)
    memories, old, new = [], [], []
    for i, noun in enumerate(NOUNS):
        for version, (when, code) in enumerate((("2025-01-10T09:00:00Z", 4000 + i), ("2026-03-14T12:00:00Z", 7000 + i))):
            mid = f"code-{i:02d}-{version}"
            memories.append({"id": mid, "namespace": "home", "content": f"The lock code of the {noun} is {code}.",
                             "created_at": when})
        question = {"namespace": "home", "question": f"lock code of the {noun}", "category": "codes"}
        old.append({**question, "id": f"old-{i:02d}", "expected": [f"code-{i:02d}-0"]})
        new.append({**question, "id": f"new-{i:02d}", "expected": [f"code-{i:02d}-1"]})
    (corpus / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories))
    for name, questions in (("first", old), ("current", new)):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": name, "dataset": "codes", "reference_time": "2026-03-14T18:00:00Z", "questions": questions}))
    gate = folder / "gate.yaml"
    gate.write_text(yaml.safe_dump({"model": "lab-two-suites", "alpha": 0.05, "suites": {
        name: {"dataset": str(folder / f"{name}.yaml"), "non_regression": ["ndcg@10"]} for name in ("first", "current")}}))
    return gate


def test_a_candidate_better_on_one_suite_and_significantly_worse_on_another_is_no_go_said_per_suite(workspace, tmp_path):
    """Issue 46 #5: the gate judges every suite it names against the champion on that suite."""
    from lab.gate.checks import load_gate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    gate = load_gate(_two_suites(tmp_path / "data"))
    # the champion ranks a code's two versions by BM25 alone (a tie: the first-set one, by id); the
    # candidate boosts memories younger than a day, so the current code comes first
    champion, candidate = tmp_path / "lexical.yaml", tmp_path / "recent.yaml"
    champion.write_text(yaml.safe_dump({"name": "lexical", "signals": ["lexical"],
                                        "fusion": {"weights": {"lexical": 1.0}}}))
    candidate.write_text(yaml.safe_dump({"name": "lexical-recent", "signals": ["lexical"],
                                         "fusion": {"weights": {"lexical": 1.0}, "recent_hours": 24,
                                                    "recent_boost": 3.0}}))
    first = _gate(gate, str(champion), workspace, uri, export=True)
    assert first.verdict == "GO" and first.export is not None
    judged = _gate(gate, str(candidate), workspace, uri)
    by_suite = {c.suite: c for c in judged.checks if c.name == "non-regression ndcg@10"}
    assert judged.verdict == "NO-GO"
    assert by_suite["current"].passed and by_suite["current"].value > 0.3  # it wins this suite
    assert not by_suite["first"].passed and by_suite["first"].value < -0.3  # and loses that one
    assert [line.split(" = ")[0] for line in judged.failed] == ["first: non-regression ndcg@10"]
