"""Extra encoders in one store (index.models): their lists, their catching up, resuming, refusals."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from lab.config import IndexConfig, SaveConfig, SearchConfig
from lab.embed.embedding_cache import EmbeddingCache
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.index import encoders as enc
from lab.index.encoders import Encoder
from lab.pipeline import Pipeline
from lab.search.candidates import Query
from lab.search.presets import resolve

ROOT = Path(__file__).resolve().parent.parent
FACTS = ["Caroline researched adoption agencies in May.", "Melanie signed up for a pottery class.",
         "Caroline's friend gave her a necklace from Sweden.", "Melanie ran a charity race for mental health.",
         "The pottery class meets on Tuesdays near the lake.", "Caroline paints sunsets over the lake."]


def fake_encoder(dim: int = 64, root: Path | None = None) -> Encoder:
    """An extra encoder of the fake kind (other buckets than the store's own fake: other lists)."""
    model = FakeEmbedder(dim=dim)
    return Encoder("e5", "vector@e5", model, EmbeddingCache(root, model.model_id, dim),
                   EmbeddingCache(None, model.model_id, dim))


@pytest.fixture
def carried(tmp_path):
    pipe = Pipeline.open(tmp_path / "s", SaveConfig(index=IndexConfig(models=("e5",))), embedder=FakeEmbedder(),
                         create=True)
    pipe.retriever._encoders = {"vector@e5": fake_encoder()}
    pipe.save_many([{"content": f, "type": "semantic" if i % 2 else "episodic"} for i, f in enumerate(FACTS)],
                   namespace="n", progress=False)
    yield pipe
    pipe.close()


def brute_force(pipe: Pipeline, query: str, allowed_ids: set[str]) -> list[str]:
    encoder = pipe.retriever.encoders["vector@e5"]
    idx = pipe.retriever.index("n")
    q = encoder.model.embed_queries([query])[0]
    best: dict[str, float] = {}
    for label, text in enumerate(idx.texts):
        mid = idx.memory_of[label]
        if idx.live[label] and mid in allowed_ids:
            best[mid] = max(best.get(mid, -9.0), float(encoder.model.embed([text])[0] @ q))
    return [m for m, _ in sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))]


def encoder_list(pipe: Pipeline, query: str, config: SearchConfig) -> list[str]:
    table = pipe.retriever.candidates([Query("q", query, "n")], config)
    rows = table.filter(table["signal"] == "vector@e5").sort("rank")
    return rows["memory_id"].to_list()


def test_an_encoder_ranks_its_own_list_equal_to_brute_force_through_deletes_and_filters(carried):
    config = replace(resolve("lab"), encoders=("vector@e5",), depth=10)
    ids = set(carried.store.memories("n")["id"].to_list())
    assert encoder_list(carried, "pottery class lake", config) == brute_force(carried, "pottery class lake", ids)
    # a memory saved now is in the next search's list; a deleted one is not
    saved = carried.save("A pottery kiln by the lake", namespace="n").created[0]
    gone = carried.store.memories("n").filter(carried.store.memories("n")["content"] == FACTS[1])["id"][0]
    carried.delete(gone)  # soft: the memory stays stored, no longer valid
    valid = carried.store.memories("n").filter(carried.store.memories("n")["valid"])
    ids = set(valid["id"].to_list())
    got = encoder_list(carried, "pottery class lake", config)
    assert saved in got and gone not in got
    assert got == brute_force(carried, "pottery class lake", ids)
    # a filter applies to the encoder's list as to every list
    semantic = replace(config, filters=replace(config.filters, types=("semantic",)))
    allowed = set(valid.filter(valid["type"] == "semantic")["id"].to_list())
    assert encoder_list(carried, "pottery class lake", semantic) == brute_force(carried, "pottery class lake", allowed)


def test_an_encoder_list_is_fused_and_explained(carried):
    config = replace(resolve("lab"), encoders=("vector@e5",))
    top = carried.retriever.search_response("necklace Sweden", "n", 3, config=config, explain=True).results[0]
    assert "necklace" in top.content and "vector@e5" in top.signals


def test_a_config_ranking_an_encoder_the_store_does_not_carry_is_refused(pipe):
    pipe.save("hello", namespace="n")
    with pytest.raises(ValidationError, match=r"vector@e5 is not an encoder of store .*add 'e5' to its index.models"):
        pipe.retriever.search("hello", "n", config=replace(resolve("lab"), encoders=("vector@e5",)))


def test_unknown_encoders_are_refused_by_name():
    with pytest.raises(ValidationError, match=r"index.models: unknown encoder\(s\) \['bge'\]; known: \['e5'"):
        IndexConfig(models=("bge",))
    with pytest.raises(ValidationError, match=r"encoders: unknown encoder list\(s\) \['vector@bge'\]"):
        SearchConfig(encoders=("vector@bge",))


def test_adding_an_encoder_is_resumable_and_embeds_each_chunk_once(tmp_path, monkeypatch):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"content": f"memory number {i} about topic {i % 7}"} for i in range(40)], namespace="n",
                       progress=False)
    monkeypatch.setattr(enc, "FLUSH_EVERY", 8)
    cache = tmp_path / "encoder-cache"
    config = SaveConfig(index=IndexConfig(models=("e5",)))

    class Killed(Exception):
        pass

    first = fake_encoder(root=cache)
    real_embed = first.model.embed

    def dies_after_24(texts):
        if first.model.calls >= 24:
            raise Killed
        return real_embed(texts)

    first.model.embed = dies_after_24  # type: ignore[method-assign]
    with Pipeline.open(tmp_path / "s", config, embedder=FakeEmbedder()) as pipe:
        pipe.retriever._encoders = {"vector@e5": first}
        with pytest.raises(Killed):
            pipe.embed_encoders(progress=False)
    second = fake_encoder(root=cache)
    with Pipeline.open(tmp_path / "s", config, embedder=FakeEmbedder()) as pipe:
        pipe.retriever._encoders = {"vector@e5": second}
        assert pipe.embed_encoders(progress=False) == {"n": 40}
    assert second.model.calls == 40 - 24  # the flushed part was not embedded again
    third = fake_encoder(root=cache)
    with Pipeline.open(tmp_path / "s", config, embedder=FakeEmbedder()) as pipe:
        pipe.retriever._encoders = {"vector@e5": third}
        pipe.embed_encoders(progress=False)
    assert third.model.calls == 0


@pytest.mark.slow
def test_e5_dense_and_sparse_lists_beside_minilm_through_the_command_line(tmp_path):
    store = tmp_path / "s"
    run = lambda *a: subprocess.run([sys.executable, "-m", "lab", *a], capture_output=True, text=True,  # noqa: E731
                                    timeout=600, cwd=ROOT)
    assert run("init", "--store", str(store)).returncode == 0
    facts = tmp_path / "facts.jsonl"
    facts.write_text("".join(f'{{"content": "{f}", "namespace": "n"}}\n' for f in FACTS))
    assert run("ingest", str(facts), "--store", str(store), "--quiet").returncode == 0
    proc = run("store", "encoders", "--store", str(store), "--add", "e5", "e5-sparse", "--quiet")
    assert proc.returncode == 0, proc.stderr
    assert "carries e5, e5-sparse: 6 chunks in 1 namespaces" in proc.stdout
    from lab.retriever import Retriever

    retriever = Retriever.open(store)
    assert retriever.indexes.config.models == ("e5", "e5-sparse")
    config = replace(resolve("lab"), encoders=("vector@e5", "sparse@e5"))
    top = retriever.search_response("Which class did Melanie join?", "n", 3, config=config, explain=True).results[0]
    assert "pottery class" in top.content
    assert {"vector@e5", "sparse@e5", "vector", "lexical"} <= set(top.signals)
    assert top.signals["sparse@e5"].score > 0 and -1 <= top.signals["vector@e5"].score <= 1
    proc = run("store", "encoders", "--store", str(store), "--remove", "e5-sparse", "--quiet")
    assert proc.returncode == 0 and "carries e5:" in proc.stdout
    assert Retriever.open(store).indexes.config.models == ("e5",)
    assert np.isfinite(top.score)


@pytest.mark.slow
def test_a_bundle_whose_store_carries_e5_is_served_with_its_lists_and_names_both_models(tmp_path):
    import json

    from serving import Server

    from lab import bundle as bundles
    from lab.config import AssembleConfig, EmbedConfig
    from lab.embed.registry import MODELS, model_record

    save = SaveConfig(embed=EmbedConfig(model="all-MiniLM-L6-v2"), index=IndexConfig(models=("e5",)))
    config = replace(resolve("lab"), name="with-e5", encoders=("vector@e5",))
    folder = bundles.write_bundle(tmp_path / "bundle", config, AssembleConfig(), save, {
        "verdict": "GO", "candidate": "with-e5", "run_id": "test",
        "embedding_models": [model_record("all-MiniLM-L6-v2"), model_record(MODELS["multilingual-e5-small-q4"].id)]})
    assert len(json.loads((folder / "manifest.json").read_text())["embedding_models"]) == 2
    with Server(folder, tmp_path / "store") as srv, srv.client() as c:
        assert c.post("/v1/namespaces", json={"name": "n"}).status_code == 201
        for fact in FACTS:
            assert c.post("/v1/memories", json={"namespace": "n", "content": fact}).status_code == 201
        r = c.post("/v1/search", json={"namespace": "n", "query": "Which class did Melanie join?", "explain": True})
        assert r.status_code == 200, r.text
        top = r.json()["results"][0]
        assert "pottery class" in top["content"] and "vector@e5" in top["signals"]
        embedding = c.get("/ready").json()["served"]["embedding"]
        assert embedding == {"store": "all-MiniLM-L6-v2", "query": "all-MiniLM-L6-v2-int8", "encoders": ["e5"]}
    assert "queries encoded by all-MiniLM-L6-v2-int8, extra encoders e5" in srv.log()
