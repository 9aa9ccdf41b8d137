"""The read side: a Retriever searches and assembles without writing a byte, at the latest or a
pinned version; the write side keeps the snapshots it changed; Pipeline composes both."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

import lab
from lab.config import SearchConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import ConflictError, StoreError
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.search.candidates import Query


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and modification time: a write changes one of them."""
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = Path(dirpath) / f
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def fill(path: Path, n: int = 20) -> None:
    with Pipeline.open(path, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"id": f"m{i}", "namespace": "n", "content": f"note {i} about item{i} in group{i % 3}",
                         "metadata": {"session": i // 5}} for i in range(n)], progress=False)


def test_a_read_never_writes_to_disk_even_when_indexes_are_missing_or_behind(tmp_path):
    store = tmp_path / "s"
    fill(store)
    with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:  # a write after the snapshot was saved
        pipe.save("late note about item99", namespace="n")
    import shutil

    shutil.rmtree(store / "indexes" / "n")  # and no snapshot at all
    before = tree(store)
    with Retriever.open(store, embedder=FakeEmbedder()) as r:
        assert r.search("item99", "n", k=1)[0].content == "late note about item99"
        ctx = r.context("note about item3", "n", 200)
        assert ctx.used <= 200 and ctx.items
        assert r.candidates([Query("q", "item4", "n")]).height
    assert tree(store) == before


def test_the_first_search_after_an_ingest_does_not_save_an_index(tmp_path):
    """The writer saves the indexes it changed when it closes; a read afterwards only loads them."""
    store = tmp_path / "s"
    fill(store)
    manifest = store / "indexes" / "n" / "manifest.json"
    assert manifest.is_file()  # saved by the write, not by a read
    before = tree(store)
    with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
        assert pipe.search("item7", "n", k=1)[0].memory_id == "m7"
    assert tree(store) == before


def test_a_pinned_retriever_sees_its_version_while_the_store_moves_on(tmp_path):
    store = tmp_path / "s"
    fill(store, 5)
    with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
        pinned = str(pipe.store.version())
        pipe.save("a wombat arrived later", namespace="n")
    old = Retriever.open(store, pin=pinned, embedder=FakeEmbedder(), search="bm25")
    new = Retriever.open(store, embedder=FakeEmbedder(), search="bm25")
    assert str(old.version) == pinned and str(new.version) != pinned
    assert all(h.content != "a wombat arrived later" for h in old.search("wombat", "n"))
    assert new.search("wombat", "n", k=1)[0].content == "a wombat arrived later"


def test_a_retriever_refuses_another_embedder_and_opens_nothing_it_cannot_read(tmp_path):
    store = tmp_path / "s"
    fill(store, 3)
    with pytest.raises(ConflictError, match="fake-hash-64"):
        Retriever.open(store, embedder=FakeEmbedder(dim=64))
    with pytest.raises(StoreError, match="no Delta table"):
        import shutil

        shutil.rmtree(store / "tables" / "edges")
        Retriever.open(store, embedder=FakeEmbedder())
    assert not (store / "tables" / "edges").exists()  # a read-only open creates nothing


def test_the_retriever_carries_its_configuration_and_a_call_may_override_it(tmp_path):
    store = tmp_path / "s"
    fill(store, 10)
    r = Retriever.open(store, embedder=FakeEmbedder(), search="bm25")
    assert r.search_config.name == "bm25"
    assert set(r.search("item3", "n")[0].signals) == {"lexical"}
    assert set(r.search("item3", "n", preset="vector")[0].signals) == {"vector"}
    custom = SearchConfig(name="both", signals=("vector", "lexical"))
    assert set(r.search("item3", "n", config=custom)[0].signals) == {"vector", "lexical"}


def test_pipeline_search_sees_a_save_at_once_and_records_access_through_the_writer(pipe):
    pipe.save("the pool size is 32", namespace="n", id="p")
    assert pipe.search("pool size", "n", k=1, record_access=True)[0].memory_id == "p"
    assert pipe.get("p")["access_count"] == 1
    assert pipe.search("pool size", "n", k=1)[0].memory_id == "p"
    assert pipe.get("p")["access_count"] == 1  # a plain search records nothing


def test_neighbours_come_from_the_episode_in_time_order(tmp_path):
    store = tmp_path / "s"
    with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"id": f"t{i}", "namespace": "n", "content": f"turn {i} word{i}",
                         "created_at": f"2026-01-01T00:0{i}:00Z", "metadata": {"episode": "e1"}} for i in range(5)]
                       + [{"id": "other", "namespace": "n", "content": "turn elsewhere",
                           "created_at": "2026-01-01T00:02:30Z", "metadata": {"episode": None, "session": "e2"}}],
                       progress=False)
    r = Retriever.open(store, embedder=FakeEmbedder())
    from lab.assemble import Item

    got = r.neighbours("n", [Item("t2", "turn 2", 1.0, episode="e1")], 1)
    assert [i.memory_id for i in got["t2"]] == ["t1", "t3"]
    assert r.view("n").episodes[r.view("n").pos["other"]] == "e2"  # a null episode falls back to the session


def test_the_public_api(tmp_path):
    store = tmp_path / "s"
    fill(store, 6)
    assert lab.__version__
    with lab.open_retriever(store, search="bm25", embedder=FakeEmbedder()) as r:
        hits = r.search("item2", "n", 3)
        assert hits[0].memory_id == "m2" and isinstance(hits[0], lab.Result)
        assert isinstance(r.context("item2", "n", 100), lab.Context)
    assert issubclass(lab.ValidationError, lab.LabError)
    assert lab.preset("lab") is lab.PRESETS["lab"]
    assert lab.fuse is __import__("lab.search.fusion", fromlist=["fuse"]).fuse
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        lab.nope  # noqa: B018


def test_a_reader_sees_each_commit_of_another_writer_at_its_next_search(tmp_path, monkeypatch):
    from lab.store import table

    store = tmp_path / "s"
    fill(store, 5)
    reader = Retriever.open(store, embedder=FakeEmbedder(), search="bm25")
    assert reader.search("item3", "n", k=1)[0].memory_id == "m3"
    with Pipeline.open(store, embedder=FakeEmbedder()) as writer:
        for i in range(3):  # no waiting: the next commit's log file is there the moment it lands
            writer.save(f"a numbat number{i} arrived", namespace="n", id=f"w{i}")
            assert reader.search(f"numbat number{i}", "n", k=1)[0].memory_id == f"w{i}"
        # a log whose next commit file is gone (cleaned up after a checkpoint) is still re-read whole
        monkeypatch.setattr(table.DeltaFrame, "_next_commit_exists", lambda self: False)
        monkeypatch.setattr(table, "FULL_CHECK_SECONDS", 0.0)
        writer.save("a quokka came last", namespace="n", id="w9")
        assert reader.search("quokka", "n", k=1)[0].memory_id == "w9"
