"""Query adapters (issue 60): the folder format and its refusals, the adapted embedder in the
registry, the exact held-out ranking, training, and `lab adapt` end to end on the demo data with
the real model (a few steps), tracked in MLflow and used by `lab eval --query-model`."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lab.config import DEFAULT_MODEL, FAKE_MODEL, AdaptConfig, EmbedConfig
from lab.embed import adapter as adapter_mod
from lab.embed.adapter import AdaptedEmbedder, read_adapter, write_adapter
from lab.embed.fake import FakeEmbedder
from lab.embed.registry import make_embedder, query_model_name
from lab.errors import ConflictError, ValidationError
from lab.tune.adapt import GoldVectors, exact_run, train_adapter


def _matrix(dim: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (np.eye(dim) + 0.1 * rng.standard_normal((dim, dim))).astype(np.float32)


def test_an_adapter_folder_round_trips_and_its_id_carries_the_weights_fingerprint(tmp_path):
    dim = FakeEmbedder().dim
    written = write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(dim), "linear", None, {"dataset": "x"})
    again = read_adapter(f"adapter:{tmp_path / 'a'}")
    assert again.model_id == written.model_id == f"adapter:{(tmp_path / 'a').resolve()}#{written.sha256[:12]}"
    assert np.array_equal(again.matrix, _matrix(dim)) and again.base == FAKE_MODEL and again.trained == {"dataset": "x"}
    assert read_adapter(written.model_id).sha256 == written.sha256  # the id itself reads back

    # trained again under the same path: the old id is refused, naming both fingerprints
    newer = write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(dim, 1), "linear", None, {})
    with pytest.raises(ConflictError, match=f"{newer.sha256[:12]}, not the {written.sha256[:12]}"):
        read_adapter(written.model_id)
    # weights changed behind the file's back: refused, naming the weights file
    np.save(tmp_path / "a" / "adapter.npy", _matrix(dim, 2))
    with pytest.raises(ConflictError, match="changed after `lab adapt` wrote it"):
        read_adapter(f"adapter:{tmp_path / 'a'}")


def test_bad_adapter_folders_and_outputs_are_refused_naming_the_problem(tmp_path):
    with pytest.raises(ValidationError, match="is not an adapter folder"):
        read_adapter(f"adapter:{tmp_path}")
    with pytest.raises(ValidationError, match="adapter:PATH"):
        read_adapter("adapter:")
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    with pytest.raises(ValidationError, match="exists and is not an adapter folder"):
        write_adapter(tmp_path / "taken", FAKE_MODEL, _matrix(FakeEmbedder().dim), "linear", None, {})
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"


def test_a_write_killed_mid_way_leaves_the_old_adapter_and_no_half_folder(tmp_path, monkeypatch):
    dim = FakeEmbedder().dim
    old = write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(dim), "linear", None, {})

    def dies(*args, **kwargs):
        raise KeyboardInterrupt  # the process stopped between the weights and the metadata

    monkeypatch.setattr(adapter_mod, "_sha256", dies)
    with pytest.raises(KeyboardInterrupt):
        write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(dim, 1), "linear", None, {})
    with pytest.raises(KeyboardInterrupt):
        write_adapter(tmp_path / "b", FAKE_MODEL, _matrix(dim, 1), "linear", None, {})
    monkeypatch.undo()
    assert read_adapter(f"adapter:{tmp_path / 'a'}").sha256 == old.sha256
    assert not (tmp_path / "b").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]  # no temporary folder left either


def test_the_registry_builds_an_adapted_embedder_that_maps_queries_only(tmp_path):
    base = FakeEmbedder()
    written = write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(base.dim), "linear", None, {})
    adapted = make_embedder(EmbedConfig(model=f"adapter:{tmp_path / 'a'}"))
    assert isinstance(adapted, AdaptedEmbedder)
    assert adapted.model_id == written.model_id and adapted.space == base.space and not adapted.symmetric
    texts = ["pool size of the billing cluster", "who owns Ledgerline"]
    assert np.array_equal(adapted.embed(texts), base.embed(texts))  # stored vectors: the base model's
    q = base.embed_queries(texts) @ _matrix(base.dim).T
    expected = q / np.linalg.norm(q, axis=1, keepdims=True)
    assert np.allclose(adapted.embed_queries(texts), expected, atol=1e-6)
    assert np.allclose(np.linalg.norm(adapted.embed_queries(texts), axis=1), 1.0, atol=1e-6)


def test_an_adapter_queries_only_stores_of_its_base_models_space(tmp_path):
    write_adapter(tmp_path / "a", FAKE_MODEL, _matrix(FakeEmbedder().dim), "linear", None, {})
    name = f"adapter:{tmp_path / 'a'}"
    assert query_model_name(name, FAKE_MODEL).startswith(f"adapter:{(tmp_path / 'a').resolve()}#")
    with pytest.raises(ValidationError) as refused:
        query_model_name(name, "sentence-transformers/all-MiniLM-L6-v2")
    assert FAKE_MODEL in str(refused.value) and "all-MiniLM-L6-v2" in str(refused.value)


def _toy_gold(seed: int = 0, namespaces: int = 3, per_ns: int = 12, memories: int = 20, dim: int = 16) -> GoldVectors:
    """Questions whose gold memory is a fixed rotation away from the question's vector: an adapter
    can learn the rotation; the base query ranks the gold low."""
    rng = np.random.default_rng(seed)
    rotation = np.linalg.qr(rng.standard_normal((dim, dim)))[0].astype(np.float32)
    gold = GoldVectors("toy")
    queries = []
    for n in range(namespaces):
        ns = f"ns{n}"
        chunks = rng.standard_normal((memories, dim)).astype(np.float32)
        chunks /= np.linalg.norm(chunks, axis=1, keepdims=True)
        gold.chunks[ns] = chunks
        gold.owners[ns] = np.array([f"{ns}-m{i:02d}" for i in range(memories)])
        for q in range(per_ns):
            target = int(rng.integers(memories))
            queries.append(chunks[target] @ rotation + 0.05 * rng.standard_normal(dim).astype(np.float32))
            gold.qids.append(f"{ns}-q{q:02d}")
            gold.namespaces.append(ns)
            gold.gold.append({f"{ns}-m{target:02d}"})
    q = np.asarray(queries, dtype=np.float32)
    gold.queries = q / np.linalg.norm(q, axis=1, keepdims=True)
    return gold


def _recall_at_1(gold: GoldVectors, rows: np.ndarray, matrix) -> float:
    run = exact_run(gold, rows, matrix).filter(pl.col("rank") == 1)
    top = dict(run.select("qid", "memory_id").iter_rows())
    return float(np.mean([top[gold.qids[r]] in gold.gold[r] for r in rows]))


def test_training_learns_held_out_structure_deterministically_and_needs_enough_gold():
    gold = _toy_gold()
    train = np.array([ns != "ns2" for ns in gold.namespaces])
    held = np.flatnonzero(~train)
    config = AdaptConfig(kind="linear", l2=0.0, steps=150, learning_rate=0.02)
    w = train_adapter(gold, train, config)
    assert np.array_equal(w, train_adapter(gold, train, config))  # same gold, same seed: same weights
    assert _recall_at_1(gold, held, w) >= _recall_at_1(gold, held, None) + 0.4
    low = train_adapter(gold, train, AdaptConfig(kind="lowrank", rank=16, l2=0.0, steps=150, learning_rate=0.02))
    assert _recall_at_1(gold, held, low) >= _recall_at_1(gold, held, None) + 0.4
    # the penalty holds W at the identity when it dominates
    stiff = train_adapter(gold, train, AdaptConfig(kind="linear", l2=1e4, steps=50, learning_rate=0.02))
    assert np.abs(stiff - np.eye(16)).max() < 0.01
    with pytest.raises(ValidationError, match="gold too small to train an adapter: 3 questions with gold, at least 8"):
        train_adapter(gold, np.arange(len(gold.qids)) < 3, config)
    with pytest.raises(ValidationError, match="adapt.kind"):
        AdaptConfig(kind="mlp")


def test_the_exact_run_ranks_memories_by_their_best_chunk_with_ties_by_id():
    gold = GoldVectors("toy")
    gold.chunks["n"] = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], dtype=np.float32)
    gold.owners["n"] = np.array(["a", "b", "b", "c"])  # b's best chunk is [1, 0]: ties a, ranked after it
    gold.qids, gold.namespaces, gold.gold = ["q"], ["n"], [{"b"}]
    gold.queries = np.array([[1, 0]], dtype=np.float32)
    run = exact_run(gold, np.array([0]), None)
    assert run["memory_id"].to_list() == ["a", "b", "c"] and run["rank"].to_list() == [1, 2, 3]
    assert run["score"].to_list() == pytest.approx([1.0, 1.0, 0.6])


@pytest.mark.slow
def test_lab_adapt_on_the_demo_writes_a_tracked_adapter_that_lab_eval_uses(tmp_path, capsys):
    from lab.cli import main
    from lab.track.connect import client

    out = tmp_path / "adapter-demo"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["adapt", "--dataset", "demo", "--steps", "5", "--out", str(out), "--tracking-uri", uri, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    adapter = read_adapter(report["adapter"])
    assert adapter.base == DEFAULT_MODEL and adapter.path == out.resolve()
    cv = report["cross_validation"]
    assert [f["held_out"] for f in cv["per_fold"]] == ["atlas", "household", "research"]
    assert {row["metric"] for row in cv["pooled"]} == {"recall@10", "ndcg@10"}
    assert adapter.trained["questions"] == report["questions"] > 100
    # the training is an MLflow run with its loss curve and the adapter folder as an artifact
    _, c, _ = client(uri)
    run = c.get_run(report["run_id"])
    assert run.data.tags["lab.kind"] == "adapt" and run.data.params["adapter"] == adapter.model_id
    assert len(c.get_metric_history(report["run_id"], "loss")) == 2  # steps 1 and 5
    assert sorted(a.path for a in c.list_artifacts(report["run_id"], "adapter")) == ["adapter/adapter.json",
                                                                                   "adapter/adapter.npy"]
    # lab eval queries the base model's store through it, and the run folder records which adapter
    runs = tmp_path / "runs"
    assert main(["eval", "--dataset", "demo", "--preset", "vector", "--query-model", f"adapter:{out}",
                 "--out", str(runs), "--no-track", "--quiet"]) == 0
    capsys.readouterr()
    (folder,) = list(runs.iterdir())
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["models"]["query"] == adapter.model_id


def test_lab_adapt_refuses_gold_too_small_to_split(tmp_path, capsys):
    from lab.cli import main
    from tests.conftest import demo_golden_subset

    path = demo_golden_subset(tmp_path / "five", 5)
    assert main(["adapt", "--dataset", str(path), "--steps", "2", "--out", str(tmp_path / "a"), "--no-track"]) != 0
    err = capsys.readouterr().err
    assert "gold too small to train an adapter: demo has 5 questions with gold, at least 8 needed" in err
    assert not (tmp_path / "a").exists()


def test_a_retriever_opened_with_an_adapter_encodes_its_queries_through_it(pipe, tmp_path):
    """The path `lab search --query-model` and `lab serve --query-model` take: the store's vectors,
    the adapted query (a rotation adapter moves the query vector, so the vector ranking follows it)."""
    from lab.retriever import Retriever

    pipe.save_many([{"id": f"m{i}", "namespace": "n", "content": text} for i, text in enumerate(
        ["pool size of the billing cluster is 32", "Ledgerline is owned by the payments team",
         "the outage was caused by a full disk"])])
    pipe.build()
    pipe.close()
    dim = FakeEmbedder().dim
    write_adapter(tmp_path / "a", FAKE_MODEL, np.eye(dim, dtype=np.float32)[::-1].copy(), "linear", None, {})
    plain = Retriever.open(tmp_path / "store")
    adapted = Retriever.open(tmp_path / "store", query_model=f"adapter:{tmp_path / 'a'}")
    assert adapted.query_embedder.model_id.startswith(f"adapter:{(tmp_path / 'a').resolve()}#")
    q = plain.query_embedder.embed_queries(["pool size"])[0]
    assert np.allclose(adapted.query_embedder.embed_queries(["pool size"])[0], q[::-1], atol=1e-6)
    assert adapted.search("pool size", "n", 3, preset="bm25")[0].memory_id == "m0"  # the lexical side unchanged
    write_adapter(tmp_path / "b", DEFAULT_MODEL, np.eye(384, dtype=np.float32), "linear",
                  None, {})
    with pytest.raises(ValidationError, match="adapts the queries of"):
        Retriever.open(tmp_path / "store", query_model=f"adapter:{tmp_path / 'b'}")


def _adapter_with_held_out(folder: Path, delta_low: float | None) -> str:
    """A fake-model adapter (a permutation, so the vector ranking moves) whose adapter.json records a
    held-out judgement with ``delta_low`` as recall@10's CI low (None: trained with --no-cv)."""
    dim = FakeEmbedder().dim
    held = None if delta_low is None else [
        {"metric": "recall@10", "n": 40, "mean_a": 0.5, "mean_b": 0.5 + delta_low + 0.02, "delta": delta_low + 0.02,
         "delta_low": delta_low, "delta_high": delta_low + 0.04, "p_value": 0.01}]
    adapter = write_adapter(folder, FAKE_MODEL, np.eye(dim, dtype=np.float32)[::-1].copy(), "linear", None,
                            {"dataset": "demo", "held_out": held})
    return adapter.model_id


def test_the_gate_requires_an_adapter_to_have_beaten_its_base_on_held_out_folds(tmp_path):
    from lab.gate.checks import GateConfig, adapter_checks, load_gate

    gate = GateConfig("m", (), adapter_beats_base=("recall@10",))
    (won,) = adapter_checks(gate, _adapter_with_held_out(tmp_path / "won", 0.01))
    assert won.passed and won.value == 0.01 and "base 0.5000 -> adapted 0.5300" in won.note
    (lost,) = adapter_checks(gate, _adapter_with_held_out(tmp_path / "lost", -0.01))
    assert not lost.passed and lost.value == -0.01
    (unjudged,) = adapter_checks(gate, _adapter_with_held_out(tmp_path / "nocv", None))
    assert not unjudged.passed and "trained with --no-cv" in unjudged.note
    (plain,) = adapter_checks(gate, None)
    assert plain.passed and "no query adapter" in plain.note
    assert adapter_checks(GateConfig("m", ()), _adapter_with_held_out(tmp_path / "won", 0.01)) == []  # not asked
    bad = tmp_path / "gate.yaml"
    bad.write_text("suites: {demo: {dataset: demo}}\nadapter_beats_base: [mrr]\n")
    with pytest.raises(ValidationError, match=r"adapter_beats_base: expected a list of recall@10, ndcg@10 .*got \['mrr'\]"):
        load_gate(bad)


def test_a_candidate_file_names_its_query_model_and_refuses_a_non_string(tmp_path):
    from lab.config import load_candidate

    good = tmp_path / "best.yaml"
    good.write_text("name: lab\nquery_model: adapter:models/adapter-locomo\n")
    candidate = load_candidate(good)
    assert candidate.query_model == "adapter:models/adapter-locomo"
    assert load_candidate(good).to_yaml() == candidate.to_yaml() and "query_model: adapter:models/adapter-locomo" in candidate.to_yaml()
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: lab\nquery_model: [1]\n")
    with pytest.raises(ValidationError, match=r"bad.yaml: query_model: expected a model id .*got \[1\]"):
        load_candidate(bad)


@pytest.mark.slow
def test_an_adapted_candidate_is_gated_with_its_adapter_and_the_bundle_serves_it_anywhere(tmp_path):
    """`lab gate --query-model adapter:PATH --export`: the suites are judged through the adapter,
    the bundle packs its folder, and both the pyfunc model (in a fresh process) and `lab serve`
    encode queries through the packed copy, with the original folder gone."""
    import os
    import shutil
    import subprocess
    import sys

    import yaml

    from lab.bundle import read_bundle
    from lab.gate.checks import load_gate
    from lab.gate.run import JudgeOptions, run_gate
    from serving import Server

    adapter_id = _adapter_with_held_out(tmp_path / "adapter", 0.01)
    gate_file = tmp_path / "gate.yaml"
    gate_file.write_text(yaml.safe_dump({"model": "lab-adapted", "adapter_beats_base": ["recall@10"],
                                         "suites": {"demo": {"dataset": "demo", "min": {"recall@10": 0.1}}}}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    report = run_gate(load_gate(gate_file), "lab", judging=JudgeOptions(root=tmp_path / "eval", embedder=FakeEmbedder()),
                      out_root=tmp_path / "gate", uri=uri, export=True, query_model=f"adapter:{tmp_path / 'adapter'}")
    assert report.verdict == "GO" and report.query_model == f"adapter:{tmp_path / 'adapter'}"
    assert [(c.name, c.value) for c in report.checks if c.suite == "adapter"] == [("adapter beats base recall@10 (held out)", 0.01)]
    judged = json.loads((report.folder / "demo" / "metrics.json").read_text())
    assert judged["models"]["query"] == adapter_id  # the suite was evaluated through the adapter
    assert json.loads((report.folder / "gate.json").read_text())["query_model"] == report.query_model

    bundle_dir = Path(report.export.bundle)
    manifest = json.loads((bundle_dir / "manifest.json").read_text())
    assert manifest["query_model"] == {"id": adapter_id, "packed": "query_model"}
    packed = read_bundle(bundle_dir).query_model
    assert packed == f"adapter:{(bundle_dir / 'query_model').resolve()}#{adapter_id.rsplit('#', 1)[1]}"
    shutil.rmtree(tmp_path / "adapter")  # from here on only the bundle's copy exists

    code = ("import mlflow; m = mlflow.pyfunc.load_model('models:/lab-adapted@champion'); "
            "print(m.unwrap_python_model().retriever.query_embedder.model_id)")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "MLFLOW_TRACKING_URI": uri})
    assert got.returncode == 0, got.stderr[-2000:]
    loaded = got.stdout.split()[-1]
    assert loaded.startswith("adapter:") and loaded.endswith("/query_model#" + adapter_id.rsplit("#", 1)[1])

    with Server(bundle_dir, tmp_path / "store", env={"LAB_SERVE_QUERY_EMBEDDERS": "0"}) as srv, srv.client() as c:
        served = c.get("/ready").json()["served"]["embedding"]
    assert served["query"] == "adapter:query_model#" + adapter_id.rsplit("#", 1)[1]  # no path leaves the server


def test_a_held_out_questions_gold_is_never_seen_by_its_folds_adapter(monkeypatch):
    """An adapter learns where its training questions' answers lie: a held-out question's answer
    among them (by text: another namespace may hold the same session under another id) would
    flatter the held-out figures, so a fold's training sees none of its held-out gold."""
    import lab.tune.adapt as adapt
    from tests.sharing_gold import sharing_gold

    gold, dataset = sharing_gold(copies=True)
    namespaces = np.asarray(gold.namespaces)
    held = np.flatnonzero(namespaces == "copy")  # the first fold `cross_validate_adapter` holds out
    unseen = adapt.held_out_memories(gold, dataset, held)
    assert unseen == {"copy": {f"c{i:02d}" for i in range(8)}, "ns": {f"m{i:02d}" for i in range(8)}}
    train, config = namespaces == "ns", AdaptConfig(steps=30)
    guarded = train_adapter(gold, train, config, unseen=unseen)
    assert not np.array_equal(guarded, train_adapter(gold, train, config))  # the guard has work to do here
    # the same weights as a training over a store where those memories never were
    kept = ~np.isin(gold.owners["ns"], sorted(unseen["ns"]))
    without = GoldVectors("fake", chunks={**gold.chunks, "ns": gold.chunks["ns"][kept]},
                          owners={**gold.owners, "ns": gold.owners["ns"][kept]}, qids=gold.qids,
                          namespaces=gold.namespaces, queries=gold.queries, gold=gold.gold)
    assert np.array_equal(guarded, train_adapter(without, train, config))

    class Trained(Exception):
        pass

    seen = {}

    def record(gold, use, settings, progress=None, unseen=None):
        seen["use"], seen["unseen"] = use.copy(), unseen
        raise Trained

    monkeypatch.setattr(adapt, "train_adapter", record)
    with pytest.raises(Trained):
        adapt.cross_validate_adapter(gold, dataset, config)
    assert np.array_equal(seen["use"], train) and seen["unseen"] == unseen  # as `lab adapt` judges it
