"""What keeps a store's costs from growing with its size (issue 43 item 7, benchmarks/scale_store.py):
held by counting scans, copies and allocations, never by timing."""
from __future__ import annotations

import shutil

import numpy as np
import polars as pl
import pytest

from lab.embed.fake import FakeEmbedder
from lab.index.embeddings import embedding_matrix, scatter_embeddings
from lab.pipeline import Pipeline
from lab.store.chunks import ChunksTable
from lab.store.table import full_frame


def batch(start: int, n: int) -> list[dict]:
    return [{"namespace": "n", "content": f"note {i} about topic {i % 7}"} for i in range(start, start + n)]


@pytest.fixture
def scans(monkeypatch) -> list[list[str]]:
    """Every scan of the chunk rows a save makes to find its chunk ids stored already."""
    seen: list[list[str]] = []
    real = ChunksTable.stored

    def spy(self, ids):
        seen.append(list(ids))
        return real(self, ids)

    monkeypatch.setattr(ChunksTable, "stored", spy)
    return seen


def test_saves_do_not_scan_the_chunks_table_and_hash_its_ids_once(tmp_path, scans):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        for start in range(0, 60, 10):
            pipe.save_many(batch(start, 10), progress=False)
        pipe.save("one more, saved alone", namespace="n")
        assert scans == []  # no stored chunk had a new chunk's id: known from the hashes alone
        # the hashes followed the appended rows: the whole column was hashed once, on the first save
        assert pipe.store.chunks_table.stored_ids.rehashes == 1
        assert pipe.store.chunks("n").height == 61


def test_a_retry_in_the_same_process_after_a_cut_off_save_stores_each_chunk_once(tmp_path, scans, monkeypatch):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many(batch(0, 5), progress=False)
        real = pipe.store._memories.append

        def killed(*args, **kwargs):  # the memories commit fails after the chunks commit landed
            raise OSError("disk full")

        monkeypatch.setattr(pipe.store._memories, "append", killed)
        with pytest.raises(OSError):
            pipe.save("the memory being saved when the disk filled", "n")
        monkeypatch.setattr(pipe.store._memories, "append", real)
        pipe.save("the memory being saved when the disk filled", "n")
        assert len(scans) == 1 and len(scans[0]) == 1  # the hashes said "perhaps": the rows were looked at
        stored = pipe.store._chunks.frame()
        assert stored["chunk_id"].is_duplicated().sum() == 0 and stored.height == 6


def test_the_chunks_cache_holds_no_vectors_and_reads_them_from_the_files(tmp_path):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        for start in range(0, 30, 10):  # three data files
            pipe.save_many(batch(start, 10), progress=False)
        assert "embedding" not in pipe.store._chunks.frame().columns  # the indexes hold the vectors
        chunks = pipe.store.chunks("n")
        assert chunks.columns == pipe.store._chunks.schema.names
        want = FakeEmbedder().embed(chunks["text"].to_list())
        assert np.array_equal(embedding_matrix(chunks, FakeEmbedder().dim), want)
        orphan = full_frame(pipe.store._chunks).head(1).with_columns(pl.lit("n:gone#0").alias("chunk_id"),
                                                                        pl.lit("n:gone").alias("memory_id"))
        pipe.store._chunks.append(orphan.to_arrow().cast(pipe.store._chunks.schema))
        visible = pipe.store.chunks()
        assert visible.height == 30 and "n:gone#0" not in visible["chunk_id"].to_list()
        assert np.array_equal(embedding_matrix(visible, FakeEmbedder().dim), FakeEmbedder().embed(visible["text"].to_list()))


def test_an_index_loads_its_vectors_a_file_at_a_time(tmp_path, monkeypatch):
    import lab.store.row_cache as file_cache

    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        for start in range(0, 30, 10):
            pipe.save_many(batch(start, 10), progress=False)
    reads: list[list[str]] = []
    real = file_cache.read_parquet

    def spy(table, path, schema, columns):
        reads.append(columns)
        return real(table, path, schema, columns)

    monkeypatch.setattr(file_cache, "read_parquet", spy)
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        assert pipe.index("n").n_live == 30
    assert not [c for c in reads if "embedding" in c]  # a snapshot's vectors come from its own file
    shutil.rmtree(root / "indexes" / "n")  # no snapshot: the build reads them from the table
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        assert pipe.index("n").n_live == 30
    vector_reads = [c for c in reads if "embedding" in c]
    assert vector_reads == [["embedding"]] * 3  # each file's vector column once, on its own


def test_a_built_and_a_loaded_index_hold_each_chunks_vector_at_its_label(tmp_path):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many(batch(0, 40), progress=False)
        built = pipe.build_index("n")
        assert built.chunk_ids == sorted(built.chunk_ids)  # labels in chunk id order, whatever the file order
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        chunks = pipe.store.chunks("n")
        want = dict(zip(chunks["chunk_id"].to_list(), embedding_matrix(chunks, FakeEmbedder().dim)))
        loaded = pipe.index("n")  # from its snapshot
        for idx in (built, loaded):
            assert all(np.array_equal(idx._vectors[label], want[cid]) for label, cid in enumerate(idx.chunk_ids))
        assert (loaded.texts, loaded.label_of, loaded.memory_of) == (built.texts, built.label_of, built.memory_of)


def test_scatter_writes_each_row_where_it_is_told_and_skips_the_rest(monkeypatch):
    import lab.index.embeddings as embeddings

    monkeypatch.setattr(embeddings, "ROWS_PER_SLICE", 3)  # several slices, the last one short
    vectors = np.arange(7 * 2, dtype=np.float32).reshape(7, 2)
    frame = pl.DataFrame({"embedding": vectors}, schema={"embedding": pl.Array(pl.Float32, 2)})
    out = np.full((6, 2), -1.0, dtype=np.float32)
    scatter_embeddings(frame, np.array([5, 4, -1, 0, 1, 2, 3]), out)
    assert out.tolist() == [[6, 7], [8, 9], [10, 11], [12, 13], [2, 3], [0, 1]]
    with pytest.raises(ValueError, match="rows_to has 2 entries for a frame of 7 rows"):
        scatter_embeddings(frame, np.array([0, 1]), out)


def test_the_first_save_into_a_loaded_index_grows_it_by_a_quarter_not_double(tmp_path):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many(batch(0, 200), progress=False)
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        idx = pipe.index("n")
        assert len(idx._vectors) == 200 and idx.vector._graphs[0].get_max_elements() == 200
        # the snapshot's vectors are its file's pages, not a copy in memory; new ones go beside them
        assert isinstance(idx._vectors.base, np.memmap) and len(idx._vectors.tail) == 0
        pipe.save("one more memory", namespace="n")
        assert len(idx._vectors) == 250 and idx.vector._graphs[0].get_max_elements() == 250
        label = idx.labels_of(pipe.store.memories("n").filter(pl.col("content") == "one more memory")["id"][0])[0]
        assert label == 200 and np.array_equal(idx._vectors[label], FakeEmbedder().embed(["one more memory"])[0])
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:  # saved on close, mapped again on load
        idx = pipe.index("n")
        assert isinstance(idx._vectors.base, np.memmap) and len(idx._vectors) == 201
        assert np.array_equal(idx._vectors[200], FakeEmbedder().embed(["one more memory"])[0])


def test_the_rows_of_a_table_read_whole_give_their_vectors_from_the_frame():
    import pyarrow as pa

    from lab.store.row_cache import StoredRows

    vectors = np.arange(3 * 2, dtype=np.float32).reshape(3, 2)
    frame = pl.DataFrame({"embedding": vectors}, schema={"embedding": pl.Array(pl.Float32, 2)})
    schema = pa.schema([pa.field("embedding", pa.list_(pa.float32(), 2))])
    stored = StoredRows("chunks", schema, (), np.zeros(0, dtype=np.int64), frame)  # deletion vectors: no files
    assert stored.read("embedding", np.array([2, 0])).to_list() == [[4, 5], [0, 1]]
    out = np.zeros((3, 2), dtype=np.float32)
    stored.scatter("embedding", np.array([0, 1, 2]), np.array([2, -1, 0]), out)
    assert out.tolist() == [[4, 5], [0, 0], [0, 1]]


def test_the_substring_memo_is_bounded_by_bytes_and_holds_booleans(tmp_path, monkeypatch):
    import lab.search.view as view_module

    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many(batch(0, 20), progress=False)
        view = pipe.retriever.view("n")
        monkeypatch.setattr(view_module, "CONTAINS_MEMO_BYTES", 3 * 20)  # room for three needles of 20 memories
        for needle in ("topic 1", "topic 2", "topic 3", "topic 4", "note 1"):
            hit = view.contains(needle)
            assert hit.dtype == bool and len(view._contains) <= 3
        assert hit.sum() == 11  # note 1, note 10 ... note 19
        # a memo full when several needles are asked at once, some memoised and some not: clearing
        # it dropped the memoised ones, which were then not scanned (a KeyError the bridge list hit)
        view.contains_all(("topic 1", "topic 2"))
        got = view.contains_all(("topic 1", "topic 3", "topic 4"))
        assert [int(h.sum()) for h in got] == [int(view.contains(n).sum()) for n in ("topic 1", "topic 3", "topic 4")]


def test_an_exact_scan_in_blocks_ranks_as_one_over_every_vector(tmp_path, monkeypatch):
    import lab.index.view_index as view_index

    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many(batch(0, 50), progress=False)
        idx = pipe.index("n")
        query = FakeEmbedder().embed(["note 7 about topic 0"])[0]
        whole = idx.exact_vector(query, 10)
        monkeypatch.setattr(view_index, "EXACT_BLOCK", 7)  # several blocks, the last one short
        assert idx.exact_vector(query, 10) == whole
