"""lab against a real OpenAI-compatible server: infinity-emb serving the bundled all-MiniLM-L6-v2
folder, in a process of its own (its own virtual environment), stopped by its PID. The same model
through the server and in process: vectors within 1e-4, identical `lab eval` metrics on the demo."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from lab.cli import main as lab_main
from lab.config import EmbedConfig, SaveConfig
from lab.embed import make_embedder
from lab.embed.st import model_dir
from lab.eval.goldens import load_golden
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_retriever
from lab.search.presets import PRESETS
from tests.conftest import ROOT
from tests.infinity_server import SERVED_NAME, InfinityServer, infinity_python

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("infinity")]


@pytest.fixture(scope="module")
def infinity(tmp_path_factory):
    python = infinity_python()
    if python is None:
        if os.environ.get("CI") == "true":
            pytest.fail("infinity-emb's virtual environment (.venv-infinity) is missing under CI: .ci/setup makes it")
        pytest.skip("infinity-emb's virtual environment is absent (bash .ci/setup makes .venv-infinity)")
    server = InfinityServer(model_dir(), python=python, log=tmp_path_factory.mktemp("infinity") / "infinity.log")
    with server:
        yield server
    assert server.proc.poll() is not None, "infinity outlived its stop"


def test_vectors_through_the_server_equal_the_model_in_process(infinity, real_embedder):
    demo = load_golden(ROOT / "goldens" / "demo.yaml")
    texts = [str(m["content"]) for m in demo.memories[:48]] + demo.questions["question"].to_list()[:16]
    served = make_embedder(EmbedConfig(model=f"openai:{SERVED_NAME}@{infinity.base_url}", cache=False))
    got, want = served.embed(texts), real_embedder.embed(texts)
    assert got.shape == want.shape == (len(texts), 384)
    assert float(np.abs(got - want).max()) <= 1e-4
    assert float((got * want).sum(axis=1).min()) >= 0.9999
    assert served.served_model == SERVED_NAME


def test_lab_eval_on_the_demo_gives_identical_metrics_through_the_server(infinity, tmp_path):
    dataset = load_golden(ROOT / "goldens" / "demo.yaml")
    metrics = {}
    for name in ("minilm", f"openai:{SERVED_NAME}@{infinity.base_url}"):
        config = SaveConfig(embed=EmbedConfig(model=name))
        retriever = eval_retriever(dataset, config, root=tmp_path / "eval", embeddings=tmp_path / "vectors")
        try:
            result = evaluate(retriever, dataset, PRESETS["lab"], EvalOptions(ks=(1, 5, 10)), root=tmp_path / "eval")
        finally:
            retriever.close()
        metrics[name] = (result.metrics["metrics"], result.run.select("qid", "memory_id", "rank").sort("qid", "rank"))
    (m_local, run_local), (m_served, run_served) = metrics.values()
    assert m_local == m_served
    assert run_local.equals(run_served)


def test_a_declared_space_lets_the_in_process_model_query_a_store_the_server_built(infinity, tmp_path):
    import yaml

    from lab.pipeline import Pipeline
    from lab.retriever import Retriever

    spec = tmp_path / "infinity.yaml"
    spec.write_text(yaml.safe_dump({"kind": "openai-embeddings", "model": SERVED_NAME, "base_url": infinity.base_url,
                                    "space": "minilm", "concurrency": 2, "batch_size": 16}))
    name = f"openai:{spec}"
    demo = load_golden(ROOT / "goldens" / "demo.yaml")
    memories = [{"content": str(m["content"])} for m in demo.memories[:40]]
    with Pipeline.open(tmp_path / "store", SaveConfig(embed=EmbedConfig(model=name)), create=True) as pipe:
        pipe.save_many(memories, namespace="ns", progress=False)
        assert pipe.store.info.embed_space == "all-MiniLM-L6-v2"
    query = memories[3]["content"]
    with Retriever.open(tmp_path / "store", query_model="minilm") as local, Retriever.open(tmp_path / "store") as served:
        assert local.query_embedder.model_id == "all-MiniLM-L6-v2"
        by_local = [r.memory_id for r in local.search(query, "ns", 5)]
        by_server = [r.memory_id for r in served.search(query, "ns", 5)]
    assert by_local == by_server


def test_lab_models_lists_the_server_model_with_its_dimension(infinity, capsys):
    assert lab_main(["models", "--server", f"openai:{SERVED_NAME}@{infinity.base_url}", "--json"]) == 0
    entries = json.loads(capsys.readouterr().out)
    served = [e for e in entries if e["backend"] == "openai-server"]
    assert served and served[0]["dim"] == 384 and served[0]["error"] is None
    assert infinity.base_url in served[0]["about"] and SERVED_NAME in served[0]["about"]
