"""The embedding cache: keyed by (model, text hash), persisted, re-ingest embeds nothing."""
from __future__ import annotations

import numpy as np

from lab.embed.embedding_cache import EmbeddingCache
from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline
from lab.store.settings import StoreSettings
from lab import workspace


def test_cache_hits_misses_and_persistence(tmp_path):
    emb = FakeEmbedder()
    cache = EmbeddingCache(tmp_path, emb.model_id, emb.dim)
    v1 = cache.embed(emb, ["a b", "c d", "a b"])
    assert emb.calls == 2 and cache.misses == 2 and cache.hits == 1
    np.testing.assert_array_equal(v1[0], v1[2])
    assert cache.flush() == 2
    again = EmbeddingCache(tmp_path, emb.model_id, emb.dim)
    v2 = again.embed(emb, ["c d", "a b"])
    assert emb.calls == 2 and again.hits == 2
    np.testing.assert_array_equal(v2[1], v1[0])


def test_cache_is_separate_per_model(tmp_path):
    a, b = FakeEmbedder(), FakeEmbedder(dim=64)
    EmbeddingCache(tmp_path, a.model_id, a.dim).embed(a, ["x"])
    cache_a = EmbeddingCache(tmp_path, a.model_id, a.dim)
    cache_a.embed(a, ["x"]); cache_a.flush()
    cache_b = EmbeddingCache(tmp_path, b.model_id, b.dim)
    cache_b.embed(b, ["x"])
    assert cache_b.misses == 1


def test_compact_merges_parts_and_keeps_vectors(tmp_path):
    emb = FakeEmbedder()
    cache = EmbeddingCache(tmp_path, emb.model_id, emb.dim)
    for word in ("one", "two", "three"):
        cache.embed(emb, [word]); cache.flush()
    assert len(list(cache.dir.glob("part-*.parquet"))) == 3
    assert cache.compact() == 3
    assert len(list(cache.dir.glob("part-*.parquet"))) == 1
    reloaded = EmbeddingCache(tmp_path, emb.model_id, emb.dim)
    np.testing.assert_array_equal(reloaded.embed(emb, ["two"])[0], emb.embed(["two"])[0])
    assert reloaded.hits == 1


def test_reingesting_unchanged_data_into_a_new_store_embeds_nothing(tmp_path, monkeypatch):
    shared = StoreSettings.of(workspace.Workspace(embed_cache=tmp_path / "shared-cache"))  # $LAB_EMBED_CACHE's
    records = [{"namespace": "n", "content": f"memory {i}"} for i in range(40)]
    first = Pipeline.open(tmp_path / "one", embedder=FakeEmbedder(), create=True, settings=shared)
    assert first.save_many(records, progress=False).embedded == 40
    first.close()
    emb = FakeEmbedder()
    second = Pipeline.open(tmp_path / "two", embedder=emb, create=True, settings=shared)
    report = second.save_many(records, progress=False)
    assert report.embedded == 0 and emb.calls == 0 and len(report.created) == 40
