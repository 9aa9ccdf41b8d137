"""The memories table's id set and content index follow our own updates and deletes without being
built again from every row (lab.store.lookups), and stay right."""
from __future__ import annotations

from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline
from lab.store.lookups import SCAN_AT_MOST, IdLookups
from lab.store.records import content_hash
from lab.store.store import warm_writes


def _seed(pipe: Pipeline) -> None:
    pipe.save_many([
        {"id": "a1", "namespace": "alpha", "content": "the billing service uses postgres"},
        {"id": "a2", "namespace": "alpha", "content": "deploys happen on tuesdays"},
        {"id": "a3", "namespace": "alpha", "content": "Priya owns the billing service"},
        {"id": "b1", "namespace": "beta", "content": "dentist on friday at nine"},
    ], progress=False)


MANY = [f"x{i}" for i in range(SCAN_AT_MOST)]  # with one more id: too many to answer by a scan


def _rebuilt(pipe: Pipeline) -> IdLookups:
    fresh = IdLookups()
    fresh.build(pipe.store.memories_table.stored(), pipe.store.memories_table.delta.version)
    return fresh


def test_updates_and_deletes_change_the_lookups_in_place_and_a_stale_content_is_checked(pipe, monkeypatch):
    _seed(pipe)
    table = pipe.store.memories_table
    assert table.has_ids(["a1", "zz"]) == {"a1"} and table.lookups.builds == 0  # a few ids: a scan
    assert table.find_by_hash("alpha", content_hash("alpha", "deploys happen on tuesdays")) == "a2"
    assert table.find_by_hash("beta", content_hash("alpha", "deploys happen on tuesdays")) is None
    assert table.lookups.builds == 0
    assert table.has_ids(["a1", *MANY]) == {"a1"}  # many: built here, once
    built = table.lookups.builds
    assert built == 1
    pipe.update("a1", importance=0.5)
    hashes = (table._id_hashes, table._content_hashes, pipe.store.chunks_table.stored_ids)
    rehashed = [h.rehashes for h in hashes]
    pipe.update("a2", content="deploys happen on thursdays now")
    pipe.delete("a3")  # soft: the row stays
    pipe.delete("b1", hard=True)
    assert table.has_ids(["a1", "a2", "a3", "b1"]) == {"a1", "a2", "a3"}
    assert table.lookups.builds == built, "our own rewrites and deletes built the lookups again"
    # the column hashes took the rewrites in too, and still hold every stored value
    stored, chunk_ids = table.stored(), pipe.store.chunks_table.delta.frame()["chunk_id"]
    assert all(hashes[0].may_hold([m]) for m in stored["id"]) and all(hashes[1].may_hold([c]) for c in stored["content_hash"])
    assert all(hashes[2].may_hold([c]) for c in chunk_ids)
    assert not hashes[1].may_hold([content_hash("alpha", "never saved")])
    assert [h.rehashes for h in hashes] == rehashed, "a rewrite of ours hashed a whole column again"
    assert table.lookups.ids == _rebuilt(pipe).ids
    # a2's new content is found as a2 (its entry is stale: confirmed from its row, nothing built)
    assert pipe.save("deploys happen on thursdays now", namespace="alpha").duplicates == ["a2"]
    assert table.lookups.builds == built
    # a2's old content names a2 no more: its stale entry is proven wrong from a2's row
    old = content_hash("alpha", "deploys happen on tuesdays")
    assert table.lookups.by_content[("alpha", old)] == "a2" and "a2" in table.lookups.stale
    assert table.find_by_hash("alpha", old) is None  # the content hashes say "not stored" first
    monkeypatch.setattr(table._content_hashes, "may_hold", lambda digests: True)  # as a hash collision would
    assert table.find_by_hash("alpha", old) is None
    assert table.lookups.builds == built + 1, "a stale entry proven wrong builds the lookups again"
    monkeypatch.undo()
    again = pipe.save("deploys happen on tuesdays", namespace="alpha")
    assert again.duplicates == [] and len(again.created) == 1
    # the hard-deleted memory's content is free again
    assert len(pipe.save("dentist on friday at nine", namespace="beta").created) == 1
    assert table.lookups.ids == _rebuilt(pipe).ids
    assert table.lookups.by_content == _rebuilt(pipe).by_content


def test_another_process_commit_builds_the_lookups_again(tmp_path):
    store = tmp_path / "store"
    with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as first:
        _seed(first)
        table = first.store.memories_table
        assert table.has_ids(["a1", *MANY]) == {"a1"}
        built = table.lookups.builds
        with Pipeline.open(store, embedder=FakeEmbedder()) as second:
            second.save_many([{"id": "c1", "namespace": "alpha", "content": "saved by another process"}],
                             progress=False)
            second.update("a1", content="the billing service moved to mysql")
        first.update("a2", importance=0.7)  # our commit lands after theirs: not the next version of ours
        assert not table.lookups.current(table.delta.version)
        assert table.has_ids(["c1", "a1", "a2"]) == {"c1", "a1", "a2"}  # a scan
        assert table.has_ids(["c1", "a1", "a2", *MANY]) == {"c1", "a1", "a2"}
        assert table.lookups.builds == built + 1
        assert first.save("the billing service moved to mysql", namespace="alpha").duplicates == ["a1"]
        assert table.lookups.current(table.delta.version)
        assert first.save("the billing service uses postgres", namespace="alpha").duplicates == []


def test_warming_the_writes_hashes_the_key_columns_once_and_the_first_save_hashes_no_column(tmp_path):
    """`lab serve` warms the write path (lab.store.store.warm_writes): the first save then hashes only what it
    appends, as every later save does."""
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        _seed(pipe)
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder()) as pipe:
        table = pipe.store.memories_table
        hashes = (table._id_hashes, table._content_hashes, pipe.store.chunks_table.stored_ids)
        assert [h.rehashes for h in hashes] == [0, 0, 0] and pipe.store._writer._lock is None
        warm_writes(pipe.store)
        assert [h.rehashes for h in hashes] == [1, 1, 1] and pipe.store._writer._lock is not None
        pipe.save("a first note after the warm-up", namespace="alpha")
        pipe.save("the billing service uses postgres", namespace="alpha")  # a duplicate, found as before
        assert [h.rehashes for h in hashes] == [1, 1, 1], "the first save hashed a whole column"
        assert all(hashes[0].may_hold([m]) for m in table.stored()["id"])
