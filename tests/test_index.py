"""Index persistence, reload, the delta for fresh writes, and merging it in."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from lab.config import IndexConfig, SaveConfig, VectorIndexConfig
from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline


def fill(pipe: Pipeline, n: int, ns: str = "n") -> None:
    pipe.save_many([{"namespace": ns, "content": f"note {i} about item{i} and group{i % 5}"} for i in range(n)],
                   progress=False)


def test_index_persists_with_a_manifest_and_reloads_without_rebuilding(pipe):
    fill(pipe, 30)
    before = [h.memory_id for h in pipe.search("item7 group2", "n", k=5)]
    pipe.close()
    manifest = json.loads((pipe.store.root / "indexes" / "n" / "manifest.json").read_text())
    assert manifest["store_version"] == str(pipe.store.version())
    assert manifest["n_live"] == 30 and manifest["embed_model"] == "fake-hash-256"
    assert manifest["config"]["vector"]["m"] == 16 and manifest["lab_version"]
    reopened = Pipeline.open(pipe.store.root, embedder=FakeEmbedder())
    idx = reopened.index("n")
    assert idx.built_at == manifest["built_at"]  # loaded, not rebuilt
    assert [h.memory_id for h in reopened.search("item7 group2", "n", k=5)] == before


def test_a_save_is_found_by_the_very_next_search_through_the_delta(pipe):
    fill(pipe, 20)
    pipe.search("item3", "n")  # builds the main index
    report = pipe.save("zanzibar quokka expedition", namespace="n")
    idx = pipe.index("n")
    assert idx.delta_size == 1
    hits = pipe.search("quokka", "n", k=3)
    assert hits[0].memory_id == report.created[0]
    assert {"vector", "lexical"} <= set(hits[0].signals)


def test_writes_from_another_process_are_synced_on_next_search(pipe):
    fill(pipe, 10)
    pipe.search("item1", "n")
    other = Pipeline.open(pipe.store.root, embedder=FakeEmbedder())
    new_id = other.save("platypus sighting by the river", namespace="n").created[0]
    other.delete(pipe.list("n")["id"].to_list()[-1], hard=True)
    hits = pipe.search("platypus", "n", k=1)
    assert hits[0].memory_id == new_id
    assert pipe.index("n").n_live == 10


def test_delta_is_merged_in_the_background_past_the_threshold(tmp_path):
    config = SaveConfig(index=IndexConfig(delta_merge_threshold=5))
    pipe = Pipeline.open(tmp_path / "s", config, embedder=FakeEmbedder(), create=True)
    fill(pipe, 10)
    idx = pipe.index("n")
    for i in range(7):
        pipe.save(f"fresh write number{i}", namespace="n")
    idx.wait_for_merge()
    assert idx.merges == 1 and idx.delta_size < 7
    assert pipe.search("number6", "n", k=1)[0].content == "fresh write number6"
    pipe.close()


def test_explicit_rebuild_folds_the_delta_and_matches_a_fresh_build(pipe):
    fill(pipe, 15)
    pipe.search("item1", "n")
    pipe.save("late arrival wombat", namespace="n")
    rebuilt = pipe.build_index("n")
    assert rebuilt.delta_size == 0 and rebuilt.n_live == 16
    assert pipe.search("wombat", "n", k=1)[0].content == "late arrival wombat"


def test_a_writer_with_a_new_index_config_records_it_and_rebuilds_the_snapshots(pipe):
    fill(pipe, 5)
    pipe.close()
    manifest_path = pipe.store.root / "indexes" / "n" / "manifest.json"
    assert json.loads(manifest_path.read_text())["config"]["vector"]["m"] == 16
    config = SaveConfig(embed=pipe.config.embed, index=IndexConfig(vector=VectorIndexConfig(m=8)))
    other = Pipeline.open(pipe.store.root, config, embedder=FakeEmbedder())
    assert other.index("n").config.vector.m == 8
    other.close()
    assert json.loads(manifest_path.read_text())["config"]["vector"]["m"] == 8
    # a reader now loads that snapshot (the recorded config is the new one) instead of rebuilding
    from lab.retriever import Retriever

    reader = Retriever.open(pipe.store.root, embedder=FakeEmbedder())
    assert reader.index("n").config.vector.m == 8 and reader.index("n").built_at == other.index("n").built_at


def test_reverting_an_update_keeps_the_memory_searchable(pipe):
    pipe.save("a wombat in the garden", namespace="n", id="w")
    pipe.search("wombat", "n")  # the index is loaded: updates go through apply
    pipe.update("w", content="a koala in the garden")
    pipe.update("w", content="a wombat in the garden")
    assert pipe.search("wombat", "n", k=1, preset="bm25")[0].memory_id == "w"
    assert pipe.index("n").labels_of("w")


def test_vector_search_returns_best_chunk_per_memory_and_respects_ef(pipe):
    fill(pipe, 200)
    idx = pipe.index("n")
    q = pipe.embedder.embed(["note 42 about item42 and group2"])[0]
    hits = idx.search_vector(q, 50)
    assert len(hits) == 50 and len({m for m, _ in hits}) == 50
    assert hits[0][1] > 0.99
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)


def test_long_memories_are_collapsed_from_several_chunks(tmp_path):
    from lab.config import ChunkConfig

    config = SaveConfig(chunk=ChunkConfig(size=20, overlap=5))
    pipe = Pipeline.open(tmp_path / "s", config, embedder=FakeEmbedder(), create=True)
    long_text = " ".join(f"filler{i}" for i in range(100)) + " needle"
    rid = pipe.save(long_text, namespace="n").created[0]
    pipe.save("short memory about needle too", namespace="n")
    assert pipe.store.chunks("n").filter(pl.col("memory_id") == rid).height == 7
    ids = [h.memory_id for h in pipe.search("needle", "n", k=5)]
    assert ids.count(rid) == 1 and len(ids) == 2


def test_exact_cosines_survive_a_reload_and_match_the_stored_vectors(pipe):
    fill(pipe, 30)
    idx = pipe.index("n")
    q = pipe.embedder.embed(["memory number 7"])[0]
    ids = sorted(set(idx.memory_of))[:12]
    before = idx.best_cosine(q, ids)
    chunks = pipe.store.chunks("n")
    for mid in ids[:3]:
        rows = chunks.filter(pl.col("memory_id") == mid)
        vectors = np.asarray(rows["embedding"].to_list(), dtype=np.float32)
        assert before[mid] == pytest.approx(float((vectors @ q).max()), abs=1e-6)
    pipe.close()
    again = Pipeline.open(pipe.store.root, embedder=FakeEmbedder())
    assert again.index("n").built_at == idx.built_at  # loaded from disk, not rebuilt
    assert again.index("n").best_cosine(q, ids) == pytest.approx(before)
    again.close()


def test_memories_of_only_stopwords_or_symbols_are_saved_and_searched_without_error(pipe):
    # found by schemathesis through the server: bm25s cannot index an empty vocabulary
    pipe.save("the and of", namespace="n")
    pipe.save("¿¡ — …", namespace="n")
    hits = pipe.search("the", "n")
    assert all("lexical" not in h.signals for h in hits)
    pipe.save("postgres holds the billing data", namespace="n")
    assert "lexical" in pipe.search("postgres", "n")[0].signals
    pipe.build("n")
    assert pipe.search("the and", "n") is not None


def test_candidate_cosines_are_each_memorys_best_live_chunk(tmp_path):
    # the array path candidates use (labels grouped by position) against the per-memory one
    from lab.config import ChunkConfig
    from lab.search.candidates import Query

    pipe = Pipeline.open(tmp_path / "s", SaveConfig(chunk=ChunkConfig(size=20, overlap=5)), embedder=FakeEmbedder(),
                         create=True)
    fill(pipe, 20)
    rid = pipe.save(" ".join(f"filler{i}" for i in range(100)) + " item3 needle", namespace="n").created[0]
    assert len(pipe.index("n").labels_of(rid)) > 3
    pipe.update(pipe.search("item4", "n", k=1)[0].memory_id, content="item4 rewritten, older chunk masked")
    pipe.delete(pipe.search("item5", "n", k=1)[0].memory_id, hard=True)
    cands = pipe.retriever.candidates([Query("q", "item3 needle item4", "n")], pipe.retriever.search_config)
    got = dict(cands.filter(pl.col("signal") == "_cosine").select("memory_id", "score").iter_rows())
    assert rid in got and len(got) > 5
    q = pipe.embedder.embed(["item3 needle item4"])[0]
    assert got == pytest.approx(pipe.index("n").best_cosine(q, list(got)), abs=1e-6)
    pipe.close()


@pytest.mark.parametrize("stemmer", ["english", None])
def test_the_analyzer_tokenizes_exactly_like_bm25s_on_real_text(stemmer):
    """The analyzer re-implements bm25s.tokenize for speed; the index's scores depend on the two
    agreeing token for token (stopwords, the word pattern, lower-casing, stems)."""
    import bm25s
    import Stemmer

    from conftest import require_dataset
    from lab.config import LexicalIndexConfig
    from lab.index.lexical import LexicalAnalyzer

    texts = []
    with open(require_dataset("scifact/corpus.jsonl"), encoding="utf-8") as f:
        for line, _ in zip(f, range(1500)):
            doc = json.loads(line)
            texts.append(doc["title"] + " " + doc["text"])
    conv = json.loads(require_dataset("locomo/locomo10-dev.json").read_text(encoding="utf-8"))[0]["conversation"]
    texts += [t["text"] for turns in conv.values() if isinstance(turns, list) for t in turns]
    texts += ["", "the and of", "DON'T stop -- me now!!", "Ünïcödé naïve CAFÉ 2023-05-08 x y zz", "running runs ran",
              "a turn numbered to be unique (#123456), 42 runs of 007", "٣٤ runs ²³ ran 1st 2nd"]
    config = LexicalIndexConfig(stemmer=stemmer)
    want = bm25s.tokenize(texts, stopwords=config.stopwords, stemmer=Stemmer.Stemmer(stemmer) if stemmer else None,
                          return_ids=False, show_progress=False)
    analyzer = LexicalAnalyzer(config)
    assert analyzer.tokens(texts) == want
    assert analyzer.tokens(texts) == want  # again, from the stem cache
    assert [analyzer.tokens([t])[0] for t in texts[:50]] == want[:50]  # one text at a time
    sets = analyzer.term_sets(texts[:40] + texts[:10])
    assert sets == [frozenset(w) for w in want[:40] + want[:10]]
    analyzer.TERM_SET_CACHE = 5  # past the bound the memo starts over, answers unchanged
    assert analyzer.term_sets(texts[40:60]) == [frozenset(w) for w in want[40:60]]
    assert len(analyzer._term_sets) <= 20
    # numbers skip the stemmer and its cache: ids and counts in texts do not fill it
    assert not any(w.isascii() and w.isdigit() for w in analyzer._stems)


def test_every_snowball_stemmer_leaves_numbers_as_they_are():
    """The analyzer hands numbers to no stemmer (LexicalAnalyzer._stem): right only while each
    stemmer returns them unchanged."""
    import Stemmer

    numbers = [str(i) for i in range(0, 100_000, 37)] + ["0", "00", "0042", "1" * 30]
    for name in Stemmer.algorithms():
        assert Stemmer.Stemmer(name).stemWords(numbers) == numbers, name


def test_vector_search_of_many_chunked_memories_equals_a_full_fold(tmp_path):
    from lab.config import ChunkConfig

    # memories of 7 chunks each: the first fetch (twice the chunks per memory wanted, counted
    # at most 2) holds too few memories, so the search must fetch again and still be exact
    pipe = Pipeline.open(tmp_path / "s", SaveConfig(chunk=ChunkConfig(size=20, overlap=5)), embedder=FakeEmbedder(),
                         create=True)
    pipe.save_many([{"id": f"m{i:02d}", "namespace": "n", "content": " ".join(f"w{i}x{j} topic{j % 5}" for j in range(40))}
                    for i in range(12)] + [{"id": f"s{i:02d}", "namespace": "n", "content": f"short note {i}"} for i in range(30)],
                   progress=False)
    pipe.search("warm", "n")
    idx = pipe.index("n")
    assert idx._chunks_per_memory() == 2.0  # many chunks per memory: capped at 2
    q = pipe.embedder.embed(["topic3 w4x3 topic1"])[0]
    labels = np.flatnonzero(idx.live)
    best: dict[str, float] = {}
    for label, sim in zip(labels.tolist(), idx.cosines(q, labels).tolist()):
        mid = idx.memory_of[label]
        best[mid] = max(best.get(mid, -2.0), sim)
    hits = idx.search_vector(q, 12)
    assert len({m for m, _ in hits}) == 12 and min(s for _, s in hits) > 0.1  # no cut through a tie at 0

    def ranked(pairs):  # hnswlib's float32 distances and these cosines differ in the last bits
        return sorted((-round(s, 5), m) for m, s in pairs)

    assert ranked(hits) == ranked(best.items())[:12]


def test_chunks_per_memory_is_one_for_single_chunk_memories_and_recounted_as_they_grow(pipe):
    fill(pipe, 50)
    pipe.search("warm", "n")
    idx = pipe.index("n")
    assert idx._chunks_per_memory() == 1.0
    n, distinct = len(idx.memory_of), len(set(idx.memory_of))
    idx.memory_of.extend([idx.memory_of[0]] * (n // 5))  # labels grown by a fifth, of one memory: recounted
    assert idx._chunks_per_memory() == (n + n // 5) / distinct
    idx.memory_of.append(idx.memory_of[0])  # grown by less than a tenth since: the count stands
    assert idx._chunks_per_memory() == (n + n // 5) / distinct
    del idx.memory_of[n:]  # the labels the index really has, for its snapshot at close
