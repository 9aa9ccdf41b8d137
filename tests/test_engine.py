"""The engine switch (lab.engine): local by default and without Ray; on Ray, texts are embedded by
Ray Data workers and committed by the one writer, giving the same store as a local run."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from lab.config import FAKE_MODEL, EmbedConfig, SaveConfig
from lab.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "datasets" / "demo"
ray = pytest.importorskip("ray") if not os.environ.get("CI") else __import__("ray")  # the ray extra: CI has it


def _store_rows(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The store's memories and chunks without the moments of writing (they differ run to run)."""
    from lab.store.store import Store

    store = Store.open(path)
    mem = store.memories().drop([c for c in store.memories().columns if c.endswith("_at") and c != "created_at"])
    chunks = store.chunks()
    chunks = chunks.drop([c for c in chunks.columns if c.endswith("_at") or c == "version"])
    return mem.sort("id"), chunks.sort("chunk_id" if "chunk_id" in chunks.columns else chunks.columns[0])


def _ingest(path: Path, engine, model: str = FAKE_MODEL) -> None:
    from lab.pipeline import Pipeline

    with Pipeline.open(path, SaveConfig(embed=EmbedConfig(model=model)), create=True, engine=engine) as pipe:
        pipe.ingest(DEMO, progress=False)


@pytest.fixture(scope="module")
def ray_engine():
    from lab.engine import make_engine

    engine = make_engine("ray")  # a local Ray, in this process
    yield engine
    engine.close()


def test_the_local_engine_is_the_default_and_never_imports_ray(tmp_path):
    # the default model (the real one) over 40 of the demo's memories: the whole of the default path, model
    # load and embedding included, without embedding the other 307 (they would prove nothing more)
    memories = tmp_path / "memories.jsonl"
    memories.write_text("\n".join((DEMO / "memories.jsonl").read_text().splitlines()[:40]) + "\n")
    code = ("import sys; from lab.cli import main; "
            f"code = main(['ingest', {str(memories)!r}, '--store', {str(tmp_path / 's')!r}, '--create', '--quiet']); "
            "print('ray' in sys.modules, code)")
    env = {**os.environ, "LAB_ENGINE": ""}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "False 0"


def test_ingest_on_ray_gives_the_local_store(tmp_path, ray_engine):
    from lab.engine.local import LocalEngine

    _ingest(tmp_path / "local", LocalEngine())
    _ingest(tmp_path / "ray", ray_engine)
    (mem_l, chunks_l), (mem_r, chunks_r) = _store_rows(tmp_path / "local"), _store_rows(tmp_path / "ray")
    assert mem_l.height == 347 and mem_l.equals(mem_r)
    vector = next(c for c in chunks_l.columns if chunks_l[c].dtype in (pl.List(pl.Float32), pl.Array(pl.Float32, 256)))
    assert chunks_l.drop(vector).equals(chunks_r.drop(vector))
    a, b = np.vstack(chunks_l[vector].to_list()), np.vstack(chunks_r[vector].to_list())
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-6


def test_an_unreachable_ray_address_is_named_in_seconds():
    from lab.engine.address import check_address

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ValidationError, match=rf"cannot reach the Ray cluster at 127.0.0.1:{port} .*ray start --head") as bad:
        check_address(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 30 and bad.value.field == "ray_address"
    with pytest.raises(ValidationError, match="expected HOST:PORT"):
        check_address("nowhere")


def test_without_ray_installed_the_extra_is_named(monkeypatch):
    from lab.embed.base import MissingExtra
    from lab.engine import make_engine

    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    with pytest.raises(MissingExtra, match=r"--engine ray needs Ray, an optional extra: pip install -e '.\[ray\]'"):
        make_engine("ray")


def test_the_engine_flags_resolve_at_the_edge(tmp_path, capsys):
    from lab.cli import main

    assert main(["ingest", str(DEMO), "--store", str(tmp_path / "s"), "--create", "--engine", "local",
                 "--ray-address", "127.0.0.1:1"]) == 2
    assert "--ray-address 127.0.0.1:1 needs --engine ray" in capsys.readouterr().err
    assert main(["ingest", str(DEMO), "--store", str(tmp_path / "s"), "--create", "--ray-address", "127.0.0.1:1"]) == 2
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()  # refused before a store was made


@pytest.mark.slow
def test_eval_on_ray_gives_the_local_run_files_and_metrics(tmp_path):
    """Three presets of three candidate groups: on Ray each group is a task over the store the
    driver built; every run file equals the local one's (metrics.json but for timings)."""
    import json

    presets = ("lab", "maia", "bm25")
    for name in ("local", "ray"):
        env = {**os.environ, "LAB_ENGINE": name, "RAY_ADDRESS": "", "LAB_EVAL_ROOT": str(tmp_path / name / "eval"),
               "LAB_EMBED_CACHE": str(tmp_path / name / "cache")}  # each builds its own store from nothing
        proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", *presets,
                               "--model", FAKE_MODEL, "--no-track", "--quiet", "--out", str(tmp_path / name / "runs")],
                              capture_output=True, text=True, timeout=900, cwd=ROOT, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert "engine: ray (a local Ray started for this command, 2 workers)" in proc.stderr or os.cpu_count() != 2
    # Ray's core writes its start-up lines to stderr itself: they go to the engine's log and each run
    # folder's engine.log, not between lab's lines; what the workers warned is said by the driver
    ray_log = tmp_path / "ray" / "logs" / "ray.log"
    assert f"its own output: {ray_log}" in proc.stderr and "logging.cc" not in proc.stderr
    assert "logging.cc" in ray_log.read_text()
    assert "logging.cc" in (tmp_path / "ray" / "runs" / "demo+fake-lab" / "engine.log").read_text()
    assert not (tmp_path / "local" / "runs" / "demo+fake-lab" / "engine.log").exists()
    assert "warning: demo / bm25: 120 questions hold these figures" in proc.stderr
    folders = sorted(p.name for p in (tmp_path / "local" / "runs").iterdir())
    assert len(folders) == 3 and folders == sorted(p.name for p in (tmp_path / "ray" / "runs").iterdir())
    for folder in folders:
        local, ray = tmp_path / "local" / "runs" / folder, tmp_path / "ray" / "runs" / folder
        for f in ("run.trec", "per_question.parquet", "run.parquet", "config.yaml", "report.md"):
            assert (local / f).read_bytes() == (ray / f).read_bytes(), (folder, f)
        metrics = [json.loads((d / "metrics.json").read_text()) for d in (local, ray)]
        for m in metrics:
            m.pop("written_at"), m.get("info", {}).pop("fuse_and_score_s", None)
        assert metrics[0] == metrics[1], folder


def test_presets_sharing_candidate_lists_form_one_ray_unit(tmp_path, monkeypatch):
    """The units handed to the engine: one per candidate group, in order of first use; results come
    back in the order the presets were asked for."""
    from lab import workspace
    from lab.engine.local import LocalEngine
    from lab.eval.runner import EvalOptions
    from lab.eval.dataset_ref import DatasetRef
    from lab.flow.evaluate import EvalCandidate, Overrides, evaluate

    class RecordingEngine(LocalEngine):
        in_process = False  # takes the engine's path of units (a capability, not a name); runs them here

        def __init__(self):
            self.units = []

        def map(self, fn, items):
            self.units.extend(items)
            return super().map(fn, items)

    ws = workspace.Workspace(eval_root=tmp_path / "eval", embed_cache=tmp_path / "cache")
    engine = RecordingEngine()
    done = list(evaluate(EvalCandidate(("bm25", "rrf-k60", "lab", "rrf-k2")), Overrides(model=FAKE_MODEL),
                         DatasetRef("demo"), EvalOptions(), ws, out=tmp_path / "runs", tracked=False, engine=engine))
    assert [d.config.name for d in done] == ["bm25", "rrf-k60", "lab", "rrf-k2"]
    assert [[c.name for c in u.configs] for u in engine.units] == [["bm25"], ["rrf-k60", "rrf-k2"], ["lab"]]


def _worker_pids() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "ray::MapWorker"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


@pytest.mark.slow
def test_a_worker_killed_mid_embedding_is_replaced_and_the_vectors_equal_a_clean_run(ray_engine):
    """The real model on Ray gives the local vectors, a worker SIGKILLed mid-embedding included: the
    other worker's batches are a clean Ray run, the killed one's are redone by its replacement."""
    import signal
    import threading

    from lab.embed.registry import make_embedder

    import json

    embedder = make_embedder(EmbedConfig())
    lines = (DEMO / "memories.jsonl").read_text().splitlines()
    # two passes over the demo's memory texts: long enough that a worker is still busy when it is killed
    # (the texts, not their whole JSON lines: a third of the tokens to embed, here and on Ray)
    texts = [f"memory {i}: " + json.loads(line)["content"] for i, line in enumerate(lines * 2)]
    killed: list[int] = []

    def kill_one_once_busy():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            pids = _worker_pids()
            if pids:
                time.sleep(1)  # let it take batches first
                try:
                    os.kill(pids[0], signal.SIGKILL)
                    killed.append(pids[0])
                except ProcessLookupError:  # it ended meanwhile: look again
                    pass
            time.sleep(0.2)

    thread = threading.Thread(target=kill_one_once_busy)
    thread.start()
    remote = ray_engine.embed(embedder, texts)
    thread.join()
    assert killed, "no worker was seen to kill"
    local = embedder.embed(texts)
    assert remote.shape == local.shape == (len(texts), embedder.dim)
    assert np.abs(remote - local).max() <= 1e-6


@pytest.mark.slow
def test_a_driver_killed_mid_embedding_leaves_the_store_as_it_was_and_a_rerun_completes(tmp_path):
    import signal

    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update({"LAB_ENGINE": "ray", "LAB_EMBED_CACHE": str(tmp_path / "cache")})
    store = str(tmp_path / "s")
    # 120 of the demo's memories: the kill comes as the workers start (the real model still loading),
    # whatever the input's length; the rerun embeds them all
    memories = tmp_path / "memories.jsonl"
    memories.write_text("\n".join((DEMO / "memories.jsonl").read_text().splitlines()[:120]) + "\n")
    subprocess.run([sys.executable, "-m", "lab", "init", "--store", store], check=True, cwd=ROOT, env=env,
                   capture_output=True, timeout=300)
    proc = subprocess.Popen([sys.executable, "-m", "lab", "ingest", str(memories), "--store", store], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not _worker_pids() and time.monotonic() < deadline:  # embedding has begun on the workers
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
    proc.wait(timeout=60)
    subprocess.run(["pkill", "-9", "-s", str(proc.pid)], capture_output=True)  # whatever of its session is left
    from lab.store.store import Store

    assert Store.open(store).memories().height == 0  # nothing half-written: embedding comes before any commit
    again = subprocess.run([sys.executable, "-m", "lab", "ingest", str(memories), "--store", store, "--quiet"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert Store.open(store).memories().height == 120


@pytest.fixture(scope="module")
def two_node_cluster():
    """A real Ray cluster of two nodes on this machine, one CPU each, as separate processes on
    loopback without a token (tests/ray_cluster.py; token authentication: tests/test_ray_faults.py);
    one for the module: each test that uses it runs its own commands on it, as users share a cluster (its tests are
    next to each other, so that it runs only while they do)."""
    from ray_cluster import two_node_cluster as start

    with start() as cluster:
        yield cluster.address, cluster.env


@pytest.mark.slow
def test_ingest_through_a_two_node_cluster_gives_the_local_store(tmp_path, two_node_cluster):
    address, cluster_env = two_node_cluster
    env = {**cluster_env, "LAB_ENGINE": "", "RAY_ADDRESS": ""}
    for name, extra in (("local", []), ("ray", ["--ray-address", address])):
        store = str(tmp_path / name)
        for argv in (["init", "--store", store, "--model", FAKE_MODEL],
                     ["ingest", str(DEMO), "--store", store, "--quiet", *extra]):
            proc = subprocess.run([sys.executable, "-m", "lab", *argv], capture_output=True, text=True, timeout=600,
                                  cwd=ROOT, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
        if extra:
            assert f"engine: ray ({address}, 2 workers)" in proc.stderr
    (mem_l, chunks_l), (mem_r, chunks_r) = _store_rows(tmp_path / "local"), _store_rows(tmp_path / "ray")
    assert mem_l.height == 347 and mem_l.equals(mem_r) and chunks_l.equals(chunks_r)  # the fake model is exact


@pytest.mark.slow
def test_systems_evaluated_as_ray_tasks_give_the_local_run_files(tmp_path, two_node_cluster):
    """Each system is a unit of its own (a Ray task on the two-node cluster); the driver writes every
    run folder."""
    import json

    from conftest import demo_golden_subset

    address, cluster_env = two_node_cluster
    golden = demo_golden_subset(tmp_path / "golden", 40)  # each system embeds every question: 40 prove it
    outs = {}
    for name in ("local", "ray"):
        env = {**cluster_env, "LAB_ENGINE": name, "RAY_ADDRESS": address if name == "ray" else "",
               "LAB_EVAL_ROOT": str(tmp_path / name / "eval")}
        proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(golden), "--system", "lab",
                               "tests.toy_systems:WordOverlap",
                               "--no-track", "--quiet", "--out", str(tmp_path / name / "runs")],
                              capture_output=True, text=True, timeout=1200, cwd=ROOT, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        if name == "ray":
            assert f"engine: ray ({address}, 2 workers)" in proc.stderr, proc.stderr[-3000:]
        outs[name] = {p.name: p for p in (tmp_path / name / "runs").iterdir()}
    assert sorted(outs["local"]) == sorted(outs["ray"]) == ["demo-system-lab", "demo-system-word-overlap"]
    for run in outs["local"]:
        a, b = outs["local"][run], outs["ray"][run]
        # (a third-party model may round a score's last digit otherwise on a one-thread worker: txtai
        # does; these two systems are exact)
        assert (a / "run.trec").read_bytes() == (b / "run.trec").read_bytes()
        metrics = [json.loads((p / "metrics.json").read_text())["metrics"] for p in (a, b)]
        assert metrics[0] == metrics[1], run


@pytest.mark.slow
def test_an_encoder_added_on_ray_caches_the_local_vectors(tmp_path, two_node_cluster):
    """The same store (built locally with the fake model) gains MiniLM on the local engine and on the
    two-node cluster: every vector the real model made on Ray is the local one."""
    from lab.embed.embedding_cache import EmbeddingCache
    from lab.embed.registry import make_embedder

    address, cluster_env = two_node_cluster
    # 120 of the demo's memories: every one is embedded twice by the real model (here and on Ray)
    memories = tmp_path / "memories.jsonl"
    memories.write_text("\n".join((DEMO / "memories.jsonl").read_text().splitlines()[:120]) + "\n")
    caches = {}
    for name in ("local", "ray"):
        env = {k: v for k, v in cluster_env.items() if k != "LAB_EMBED_CACHE"}
        env.update({"LAB_ENGINE": "local", "RAY_ADDRESS": ""})
        store = tmp_path / name
        # (the store is made and filled locally either way: ingest on Ray is test_ingest_*'s)
        for argv in (["init", "--store", str(store), "--model", FAKE_MODEL],
                     ["ingest", str(memories), "--store", str(store), "--quiet"],
                     ["store", "encoders", "--add", "minilm", "--store", str(store), "--quiet"]):
            if argv[0] == "store" and name == "ray":
                env.update({"LAB_ENGINE": "ray", "RAY_ADDRESS": address})
            proc = subprocess.run([sys.executable, "-m", "lab", *argv], capture_output=True, text=True, timeout=900,
                                  cwd=ROOT, env=env)
            assert proc.returncode == 0, proc.stderr[-3000:]
        if name == "ray":
            assert f"engine: ray ({address}, 2 workers)" in proc.stderr, proc.stderr[-3000:]
        minilm = make_embedder(EmbedConfig())
        caches[name] = EmbeddingCache(store / "cache" / "embeddings", minilm.model_id, minilm.dim)
    local, remote = caches["local"], caches["ray"]
    assert len(local._index) >= 120 and set(local._index) == set(remote._index)
    keys = sorted(local._index)
    a = local._vectors[[local._index[k] for k in keys]]
    b = remote._vectors[[remote._index[k] for k in keys]]
    assert np.abs(a - b).max() <= 1e-6


def test_a_sweeps_index_points_built_as_ray_tasks_give_the_local_sweep(tmp_path, ray_engine):
    """Three index-time points: on Ray, each store and candidate table is built by a task; the
    sweep's table, its choice and its stores equal a local sweep's."""
    from lab.embed.fake import FakeEmbedder
    from lab.tune.spec import parse_spec
    from lab.tune.sweep import run_sweep

    spec = parse_spec({"name": "ray-points", "dataset": "demo", "base": "rrf-k60",
                       "space": {"fusion.k": [2, 60], "index.context_turns": [0, 1, 2]}})
    results, said = {}, []
    for name, engine in (("local", None), ("ray", ray_engine)):
        results[name] = run_sweep(spec, out_root=tmp_path / name / "sweeps", progress=False, embedder=FakeEmbedder(),
                                  root=tmp_path / name / "eval", track=False, engine=engine, on_stage=said.append)
    assert "building 3 index points as Ray tasks" in " ".join(said)
    timing = [c for c in results["local"].table.columns if c.endswith("seconds")]
    assert results["local"].table.drop(timing).equals(results["ray"].table.drop(timing))
    assert results["local"].best == results["ray"].best
    stores = {n: sorted(p.name for p in (tmp_path / n / "eval" / "stores").iterdir()) for n in results}
    assert len(stores["local"]) == 3 and stores["local"] == stores["ray"]
    # one candidate table per point (named by the store's absolute path too, so not by name here)
    tables = {n: len(list((tmp_path / n / "eval" / "candidates").glob("*.parquet"))) for n in results}
    assert tables["local"] == tables["ray"] == 3


def test_labs_own_error_in_a_ray_task_is_raised_as_itself(ray_engine):
    """Not Ray's wrapper with the task's traceback in its text: the command line prints it as one line."""
    from lab.engine.address import parse_address

    with pytest.raises(ValidationError) as bad:
        list(ray_engine.map(parse_address, ["nowhere"]))
    assert type(bad.value) is ValidationError and bad.value.field == "ray_address"
    assert str(bad.value).startswith("--ray-address 'nowhere': expected HOST:PORT") and "Traceback" not in str(bad.value)


def test_a_server_model_on_ray_is_called_from_the_workers_within_its_limit(tmp_path, ray_engine, monkeypatch):
    """A server model's batches go out from the Ray workers (the driver's own client sends none),
    each worker within the file's concurrency, with the key the file declares; the store equals a
    local ingest's and holds no key."""
    import yaml

    from lab.engine.local import LocalEngine
    from lab.pipeline import Pipeline
    from tests.model_server import ModelServer

    key = "sk-ray-worker-key-0000111122223333"
    monkeypatch.setenv("RAY_TEST_EMBED_KEY", key)
    with ModelServer(dim=64, key=key) as server:
        spec = tmp_path / "model.yaml"
        spec.write_text(yaml.safe_dump({"kind": "openai-embeddings", "model": "fake-embed", "base_url": server.base_url,
                                        "reads_env": ["RAY_TEST_EMBED_KEY"], "auth": {"env": "RAY_TEST_EMBED_KEY"},
                                        "batch_size": 8, "concurrency": 1, "dimensions": 64}))
        model = f"openai:{spec}"
        with Pipeline.open(tmp_path / "ray", SaveConfig(embed=EmbedConfig(model=model)), create=True,
                           engine=ray_engine) as pipe:
            pipe.ingest(DEMO, progress=False)
            assert pipe.embedder.client.requests == 0, "the driver embedded: the workers should have"
        assert server.requests and all(len(r["body"]["input"]) <= 8 for r in server.requests)
        # at most one request in flight per worker process: the file's concurrency, kept by each
        assert server.most_in_flight <= ray_engine.workers, server.most_in_flight
        _ingest(tmp_path / "local", LocalEngine(), model)
    assert not any(key.encode() in p.read_bytes() for p in (tmp_path / "ray").rglob("*") if p.is_file())
    (mem_l, chunks_l), (mem_r, chunks_r) = _store_rows(tmp_path / "local"), _store_rows(tmp_path / "ray")
    assert mem_l.height == 347 and mem_l.equals(mem_r)
