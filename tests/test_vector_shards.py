"""A large namespace's vectors split over several hnswlib graphs, each built on its own thread:
the same answers as one exact scan, the same graphs on every build, saved and loaded whole."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lab.config import IndexConfig, SaveConfig, VectorIndexConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.index.snapshot import IndexDamaged, load_index
from lab.index.vector import PARALLEL_ADD_FROM, VectorIndex, shard_file
from lab.pipeline import Pipeline


def unit(rng: np.random.Generator, n: int, dim: int = 32) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_split_graphs_answer_as_an_exact_scan_and_build_the_same_on_every_run():
    rng = np.random.default_rng(7)
    n = PARALLEL_ADD_FROM + 952  # the threaded add
    vectors, queries = unit(rng, n), unit(rng, 40)
    config = VectorIndexConfig(ef_search=400)
    built = []
    for _ in range(2):
        idx = VectorIndex(32, config, capacity=n, shards=3)
        idx.add(vectors, np.arange(n))
        built.append(idx)
    assert built[0].shards == 3 and built[0].n_live == n
    exact = np.argsort(-(queries @ vectors.T), axis=1, kind="stable")[:, :10]
    for q, want in zip(queries, exact):
        labels, sims = built[0].search(q, 10)
        assert list(labels) == list(want)
        assert np.all(np.diff(sims) <= 1e-6)  # merged best first
        again, _ = built[1].search(q, 10)
        assert list(again) == list(labels)
    # a removed label leaves its graph's count and every answer
    top = int(exact[0][0])
    built[0].remove([top])
    assert built[0].n_live == n - 1 and top not in built[0].search(queries[0], 10)[0]


def test_fewer_live_than_asked_answers_with_all_of_them():
    rng = np.random.default_rng(1)
    idx = VectorIndex(32, VectorIndexConfig(), shards=2)
    idx.add(unit(rng, 5), np.arange(5))
    labels, _ = idx.search(unit(rng, 1)[0], 10)
    assert sorted(labels.tolist()) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("name,value", [("shards", 0), ("shards", 65), ("shard_from", 0)])
def test_a_bad_split_setting_is_refused_naming_it(name, value):
    with pytest.raises(ValidationError, match=rf"index\.vector\.{name}"):
        VectorIndexConfig(**{name: value})


def fill(pipe: Pipeline, n: int) -> list[str]:
    report = pipe.save_many([{"namespace": "n", "content": f"note {i} about item{i} and group{i % 5}"}
                             for i in range(n)], progress=False)
    return report.created


def test_a_store_built_split_saves_every_graph_and_loads_them_without_a_rebuild(tmp_path):
    config = SaveConfig(index=IndexConfig(vector=VectorIndexConfig(shards=2, shard_from=10)))
    pipe = Pipeline.open(tmp_path / "store", config, embedder=FakeEmbedder(), create=True)
    ids = fill(pipe, 40)
    assert pipe.index("n").vector.shards == 2
    before = [h.memory_id for h in pipe.search("item7 group2", "n", k=5, preset="vector")]
    pipe.delete(ids[7])
    after_delete = [h.memory_id for h in pipe.search("item7 group2", "n", k=5, preset="vector")]
    assert ids[7] in before and ids[7] not in after_delete
    pipe.close()
    folder = pipe.store.root / "indexes" / "n"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["vector_shards"] == 2 and "shards" not in manifest["config"]["vector"]
    assert shard_file(folder / "vectors.hnsw", 1).is_file()
    reopened = Pipeline.open(pipe.store.root, embedder=FakeEmbedder())
    idx = reopened.index("n")
    assert idx.built_at == manifest["built_at"] and idx.vector.shards == 2 and idx.vector.n_live == idx.n_live == manifest["n_live"]
    assert [h.memory_id for h in reopened.search("item7 group2", "n", k=5, preset="vector")] == after_delete
    reopened.close()

    manifest["vector_shards"] = "two"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexDamaged, match="vector_shards is 'two'"):
        load_index(folder, reopened.store.chunks("n"), config.index, "n")
