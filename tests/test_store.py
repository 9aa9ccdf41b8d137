"""Every store operation through the pipeline, with the fake embedder."""
from __future__ import annotations

from datetime import datetime, timezone

import polars as pl
import pytest

from lab.embed.fake import FakeEmbedder
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.pipeline import Pipeline


def t(day: int) -> str:
    return f"2026-01-{day:02d}T12:00:00Z"


def seed(pipe: Pipeline) -> list[str]:
    report = pipe.save_many([
        {"id": "a1", "namespace": "alpha", "content": "the billing service uses postgres", "type": "fact",
         "tags": ["billing", "db"], "created_at": t(1)},
        {"id": "a2", "namespace": "alpha", "content": "deploys happen on tuesdays", "type": "decision",
         "tags": ["ops"], "created_at": t(5)},
        {"id": "a3", "namespace": "alpha", "content": "Priya owns the billing service", "type": "entity",
         "tags": ["billing"], "created_at": t(9), "pinned": True},
        {"id": "b1", "namespace": "beta", "content": "dentist on friday at nine", "type": "event", "created_at": t(3)},
    ], progress=False)
    return report.created


def test_create_one_and_batch_then_get(pipe):
    assert seed(pipe) == ["a1", "a2", "a3", "b1"]
    row = pipe.get("a3")
    assert row["content"] == "Priya owns the billing service"
    assert row["pinned"] and row["tags"] == ["billing"] and row["type"] == "entity"
    assert row["created_at"] == datetime(2026, 1, 9, 12, tzinfo=timezone.utc)
    single = pipe.save("a single saved memory", namespace="beta")
    assert len(single.created) == 1 and pipe.get(single.created[0])["namespace"] == "beta"


def test_get_unknown_id_is_not_found(pipe):
    with pytest.raises(NotFoundError, match="no memory with id 'nope'"):
        pipe.get("nope")


def test_same_content_same_namespace_is_stored_once(pipe):
    seed(pipe)
    again = pipe.save("deploys happen on tuesdays", namespace="alpha")
    assert again.created == [] and again.duplicates == ["a2"]
    other_ns = pipe.save("deploys happen on tuesdays", namespace="beta")
    assert len(other_ns.created) == 1
    assert pipe.store.memories().height == 5


def test_explicit_id_clash_with_other_content_is_a_conflict_and_writes_nothing(pipe):
    seed(pipe)
    version = pipe.store.version()
    with pytest.raises(ConflictError, match="a1"):
        pipe.save_many([{"id": "new", "namespace": "alpha", "content": "fresh"},
                        {"id": "a1", "namespace": "alpha", "content": "other text"}], progress=False)
    assert pipe.store.version() == version
    with pytest.raises(NotFoundError):
        pipe.get("new")


def test_a_bad_record_in_a_batch_writes_nothing(pipe):
    seed(pipe)
    version = pipe.store.version()
    with pytest.raises(ValidationError, match="record 1: field 'type'"):
        pipe.save_many([{"namespace": "alpha", "content": "good"},
                        {"namespace": "alpha", "content": "bad", "type": "nope"}], progress=False)
    assert pipe.store.version() == version
    assert pipe.store.memories().height == 4


def test_update_fields_and_content_reembeds(pipe):
    seed(pipe)
    embedded_before = pipe.embedder.calls
    pipe.update("a2", importance=0.9, tags=["ops", "release"])
    row = pipe.get("a2")
    assert row["importance"] == 0.9 and row["tags"] == ["ops", "release"]
    assert row["updated_at"] > row["created_at"]
    assert pipe.embedder.calls == embedded_before + 1  # tags are in the indexed text
    pipe.update("a2", content="deploys happen on thursdays now")
    assert pipe.get("a2")["content"] == "deploys happen on thursdays now"
    assert pipe.search("thursdays", "alpha", k=1)[0].memory_id == "a2"
    assert all(h.memory_id != "a2" for h in pipe.search("tuesdays", "alpha", k=3) if "tuesdays" in h.content)
    # only the current chunks are visible
    assert pipe.store.chunks("alpha").filter(pl.col("memory_id") == "a2").height == 1


def test_update_rejects_unknown_fields_and_duplicate_content(pipe):
    seed(pipe)
    with pytest.raises(ValidationError, match=r"cannot update field\(s\) \['namespace'\]"):
        pipe.update("a1", namespace="beta")
    with pytest.raises(ConflictError, match="a2"):
        pipe.update("a1", content="deploys happen on tuesdays")
    with pytest.raises(ValidationError, match="importance"):
        pipe.update("a1", importance=5)
    assert pipe.get("a1")["content"] == "the billing service uses postgres"


def test_soft_delete_marks_invalid_and_hides_from_search(pipe):
    seed(pipe)
    assert pipe.delete("a1") == 1
    row = pipe.get("a1")
    assert row["valid"] is False
    assert all(h.memory_id != "a1" for h in pipe.search("postgres billing", "alpha", k=5))
    assert pipe.list("alpha", valid=False)["id"].to_list() == ["a1"]


def test_hard_delete_removes_memory_edges_and_chunks(pipe):
    seed(pipe)
    pipe.add_edge("a3", "a1", "related_to")
    pipe.search("billing", "alpha")  # load the index so the delete must update it
    assert pipe.delete(["a1"], hard=True) == 1
    with pytest.raises(NotFoundError):
        pipe.get("a1")
    assert pipe.store.edges("alpha").height == 0
    assert pipe.store.chunks("alpha").filter(pl.col("memory_id") == "a1").height == 0
    assert all(h.memory_id != "a1" for h in pipe.search("postgres", "alpha", k=5))
    with pytest.raises(NotFoundError, match="a1"):
        pipe.delete("a1")


def test_list_filters_and_pagination(pipe):
    seed(pipe)
    assert pipe.list("alpha")["id"].to_list() == ["a3", "a2", "a1"]  # newest first
    assert pipe.list("alpha", types=["fact", "entity"])["id"].to_list() == ["a3", "a1"]
    assert pipe.list("alpha", tags=["billing"])["id"].to_list() == ["a3", "a1"]
    since = datetime(2026, 1, 4, tzinfo=timezone.utc)
    until = datetime(2026, 1, 9, tzinfo=timezone.utc)
    assert pipe.list("alpha", since=since, until=until)["id"].to_list() == ["a2"]
    assert pipe.list(None, limit=2)["id"].to_list() == ["a3", "a2"]
    assert pipe.list(None, offset=2, limit=2)["id"].to_list() == ["b1", "a1"]
    with pytest.raises(ValidationError, match="unknown memory type"):
        pipe.list("alpha", types=["fcat"])
    with pytest.raises(NotFoundError, match="unknown namespace 'gamma'"):
        pipe.list("gamma")


def test_namespaces_create_list_delete(pipe):
    seed(pipe)
    assert pipe.store.namespaces() == ["alpha", "beta"]
    assert pipe.store.namespaces_table.create("gamma", "empty one")
    with pytest.raises(ConflictError):
        pipe.store.namespaces_table.create("gamma")
    with pytest.raises(ValidationError):
        pipe.store.namespaces_table.create("../x")
    pipe.search("dentist", "beta")
    pipe.close()  # persists the beta index on disk
    assert (pipe.store.root / "indexes" / "beta" / "manifest.json").is_file()
    assert pipe.delete_namespace("beta") == {"memories": 1}
    assert pipe.store.namespaces() == ["alpha", "gamma"]
    assert pipe.store.memories("beta").height == 0
    assert not (pipe.store.root / "indexes" / "beta").exists()
    with pytest.raises(NotFoundError, match="unknown namespace 'beta'"):
        pipe.search("dentist", "beta")


def test_a_nested_namespace_is_separate_from_its_parent_and_survives_its_deletion(pipe):
    pipe.save_many([{"id": "p1", "namespace": "team-a", "content": "the parent team's note"},
                    {"id": "c1", "namespace": "team-a/notes", "content": "the child namespace's note"}],
                   progress=False)
    assert [r.memory_id for r in pipe.search("note", "team-a/notes")] == ["c1"]
    pipe.search("note", "team-a")
    pipe.close()
    indexes = pipe.store.root / "indexes"
    assert sorted(p.name for p in indexes.iterdir() if not p.name.startswith(".")) == ["team-a", "team-a~notes"]
    pipe.delete_namespace("team-a")
    assert (indexes / "team-a~notes" / "manifest.json").is_file()
    assert [r.memory_id for r in pipe.search("note", "team-a/notes")] == ["c1"]


def test_edges_add_list_remove(pipe):
    seed(pipe)
    assert pipe.add_edges([
        {"src": "a3", "dst": "a1", "relation": "related_to", "weight": 0.5},
        {"src": "a2", "dst": "a1", "relation": "supersedes"},
    ]) == 2
    assert pipe.add_edge("a3", "a1", "related_to") == 0  # already there
    edges = pipe.store.edges("alpha")
    assert edges.select("src", "dst", "relation").rows() == [("a2", "a1", "supersedes"), ("a3", "a1", "related_to")]
    assert pipe.store.edges(memory_id="a2")["dst"].to_list() == ["a1"]
    assert pipe.store.edges(relation="supersedes").height == 1
    with pytest.raises(ValidationError, match="crosses namespaces"):
        pipe.add_edge("a1", "b1")
    with pytest.raises(NotFoundError, match="'zz'"):
        pipe.add_edge("a1", "zz")
    assert pipe.store.edges_table.remove("a3", "a1") == 1
    with pytest.raises(NotFoundError):
        pipe.store.edges_table.remove("a3", "a1")
    assert pipe.store.edges("alpha").height == 1


def test_access_log_folds_into_counts(pipe):
    seed(pipe)
    at = datetime(2026, 2, 1, tzinfo=timezone.utc)
    pipe.store.record_access(["a1", "a1", "a2"], at=at)
    assert pipe.get("a1")["access_count"] == 2 and pipe.get("a1")["accessed_at"] == at
    assert pipe.get("a3")["access_count"] == 0
    pipe.update("a1", importance=0.1)  # an update must not double-count accesses
    assert pipe.get("a1")["access_count"] == 2


def test_stats_and_version(pipe):
    seed(pipe)
    pipe.add_edge("a3", "a1")
    stats = pipe.stats()
    assert stats["memories"] == 4 and stats["chunks"] == 4 and stats["edges"] == 1
    assert stats["by_namespace"] == {"alpha": 3, "beta": 1}
    assert stats["by_type"]["fact"] == 1
    assert stats["version"] == str(pipe.store.version())
    with pytest.raises(NotFoundError):
        pipe.stats("nope")


def test_a_pinned_version_reads_the_past_and_refuses_writes(pipe, tmp_path):
    seed(pipe)
    version = pipe.store.version()
    pipe.update("a1", content="the billing service moved to mysql")
    pipe.save("later memory", namespace="alpha")
    old = Pipeline.open(pipe.store.root, embedder=FakeEmbedder(), pin=str(version))
    assert old.get("a1")["content"] == "the billing service uses postgres"
    assert old.store.memories().height == 4
    assert old.search("postgres", "alpha", k=1)[0].memory_id == "a1"
    with pytest.raises(ConflictError, match="read-only"):
        old.save("x", namespace="alpha")
    with pytest.raises(ValidationError, match="M.C.E.A"):
        Pipeline.open(pipe.store.root, embedder=FakeEmbedder(), pin="12")


def test_compact_merges_files_and_drops_stale_chunks(pipe, monkeypatch):
    for i in range(12):
        pipe.save(f"memory {i}", namespace="alpha")
    pipe.update(pipe.list("alpha")["id"][0], content="changed")
    # an update killed after its memories commit, before it deleted the chunks it replaced
    monkeypatch.setattr(pipe.store.chunks_table, "drop_superseded", lambda rows, ids=None: None)
    pipe.update(pipe.list("alpha")["id"][1], content="changed again")
    monkeypatch.undo()
    files_before = pipe.store.file_counts()
    report = pipe.compact()
    assert report["stale_chunks_removed"] == 1
    after = pipe.store.file_counts()
    assert after["memories"] < files_before["memories"] and after["chunks"] < files_before["chunks"]
    assert pipe.store.memories().height == 12
    assert pipe.search("changed", "alpha", k=1)[0].content == "changed"


def test_compact_keeps_an_index_with_few_dead_chunks_and_rebuilds_a_worn_one(tmp_path):
    import json

    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"namespace": "few", "content": f"note {i} about the garden"} for i in range(20)]
                       + [{"namespace": "worn", "content": f"note {i} about the kitchen"} for i in range(20)],
                       progress=False)
        pipe.index("few"), pipe.index("worn")  # loaded: a delete masks its chunks' labels (not rebuilt)
        pipe.delete(pipe.list("few")["id"][:2].to_list(), hard=True)  # a tenth of its chunks dead
        pipe.delete(pipe.list("worn")["id"][:10].to_list(), hard=True)  # half of them
    graph = (root / "indexes" / "few" / "vectors.hnsw").read_bytes()
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        report = pipe.compact()
        assert (report["indexes_rebuilt"], report["indexes_kept"]) == (["worn"], ["few"])
        assert len(pipe.search("garden", "few", k=30)) == 18 and len(pipe.search("kitchen", "worn", k=30)) == 10
        version = str(pipe.store.version())
    # kept: the same graph, saved again at the compacted store's version; rebuilt: no dead labels left
    manifests = {ns: json.loads((root / "indexes" / ns / "manifest.json").read_text()) for ns in ("few", "worn")}
    assert (root / "indexes" / "few" / "vectors.hnsw").read_bytes() == graph
    assert manifests["few"]["store_version"] == manifests["worn"]["store_version"] == version
    assert (manifests["few"]["n_labels"], manifests["few"]["n_live"]) == (20, 18)
    assert (manifests["worn"]["n_labels"], manifests["worn"]["n_live"]) == (10, 10)


def test_content_updates_leave_no_chunk_rows_behind_and_the_store_checks_clean(pipe):
    from lab.write.check import check_store

    seed(pipe)
    for i in range(3):  # PATCHes that re-chunk: content, then tags (indexed with the content)
        pipe.update("a1", content=f"the billing service uses postgres {i + 14}")
        pipe.update("a2", tags=["ops", f"release-{i}"])
    report = check_store(pipe.store.root)
    assert [str(p) for p in report.problems] == []  # it warned "6 orphan chunk row(s) (left by a save cut off ...)"
    stored = pipe.store._chunks.frame()
    assert stored.height == pipe.store.chunks().height == 4  # one chunk per memory, no superseded rows
    assert stored.filter(pl.col("memory_id") == "a1")["index_hash"].to_list() == [pipe.get("a1")["index_hash"]]


def test_an_update_killed_before_it_deleted_the_old_chunks_is_named_by_check(pipe, monkeypatch):
    from lab.write.check import check_store

    seed(pipe)
    monkeypatch.setattr(pipe.store.chunks_table, "drop_superseded", lambda rows, ids=None: None)  # killed right there
    pipe.update("a1", content="the billing service moved to mysql")
    assert pipe.get("a1")["content"] == "the billing service moved to mysql"  # its memories commit landed
    pipe.close()
    assert [str(p) for p in check_store(pipe.store.root).problems] == [
        "warning table chunks: 1 orphan chunk row(s) (left by a save, update or delete cut off between its "
        "commits; compact or repair removes them)"]


def test_a_reader_racing_an_update_never_reads_the_memory_without_its_chunks(pipe):
    from lab.retriever import Retriever

    seed(pipe)
    reader = Retriever.open(pipe.store.root, embedder=FakeEmbedder())
    table = reader.store._chunks
    read_chunks = table.frame
    landed = []

    def update_in_between():  # the whole update lands after the reader read the memories
        if not landed:
            landed.append(pipe.update("a2", content="deploys happen on wednesdays"))
        return read_chunks()

    table.frame = update_in_between
    visible = reader.store.chunks("alpha")
    table.frame = read_chunks
    assert landed and sorted(visible["memory_id"].to_list()) == ["a1", "a2", "a3"]
    assert reader.search("wednesdays", "alpha", k=1)[0].memory_id == "a2"
    reader.close()


def test_store_refuses_another_embedder_or_chunking(pipe):
    seed(pipe)
    pipe.close()
    with pytest.raises(ConflictError, match="fake-hash-256"):
        Pipeline.open(pipe.store.root, embedder=FakeEmbedder(dim=64))
    from lab.config import ChunkConfig, SaveConfig

    with pytest.raises(ConflictError, match="chunk config"):
        Pipeline.open(pipe.store.root, SaveConfig(chunk=ChunkConfig(size=10, overlap=0)), embedder=FakeEmbedder())


def test_open_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(NotFoundError, match="no lab store"):
        Pipeline.open(tmp_path / "none", embedder=FakeEmbedder())


def test_a_store_creation_killed_half_way_is_started_over(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from lab.store.layout import INFO_FILE
    from lab.store.store import Store

    root = tmp_path / "s"
    # a creation killed after writing the info file's temporary copy, while making the tables
    code = ("import sys, time; from lab.store import store as s\n"
            "orig = s.Store.__init__\n"
            "def slow(self, *a, **k):\n    orig(self, *a, **k); print('made', flush=True); time.sleep(60)\n"
            "s.Store.__init__ = slow\n"
            f"s.Store.create({str(root)!r}, embed_model='fake-hash-256', dim=256, save_config={{}})\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "made"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (root / (INFO_FILE + ".tmp")).is_file() and not (root / INFO_FILE).exists()
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:  # refused before
        pipe.save("after the crash", namespace="n")
    assert Store.open(root).memories().height == 1
    # a folder holding data is never taken for an interrupted creation
    (root / INFO_FILE).rename(root / (INFO_FILE + ".tmp"))
    with pytest.raises(ConflictError, match="not empty"):
        Store.create(root, embed_model="fake-hash-256", dim=256, save_config={})


def test_index_folders_of_look_alike_namespaces_do_not_clobber_each_other(tmp_path):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("first namespace memory", namespace="x")
        pipe.save("second namespace memory", namespace="x.tmp")
        pipe.build()  # saving x used to delete the index folder of x.tmp (its old temp-folder name)
    assert sorted(p.name for p in (tmp_path / "s" / "indexes").iterdir()) == ["x", "x.tmp"]
    from lab.write.check import check_store

    assert check_store(tmp_path / "s").problems == []


def test_messages_name_the_file_and_the_real_command(tmp_path):
    from lab.config import SearchConfig, load_config

    bad = tmp_path / "bad.yaml"
    bad.write_text("fusion: [unclosed\n", encoding="utf-8")
    with pytest.raises(ValidationError, match=rf"(?s){bad}: invalid YAML: .*in \"{bad}\", line 1"):
        load_config(SearchConfig, bad)
    with pytest.raises(NotFoundError, match=r"create one with `lab init --store "):
        Pipeline.open(tmp_path / "nowhere", embedder=FakeEmbedder())


def _classes_over(limit: int, folder):
    """(file, class, lines) of each class in ``folder``'s modules longer than ``limit`` lines."""
    import ast

    out = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > limit:
                out.append((path.name, node.name, node.end_lineno - node.lineno + 1))
    return out


def test_the_store_is_a_thin_lifecycle_over_classes_of_under_200_lines(tmp_path):
    from tests.conftest import ROOT

    assert _classes_over(200, ROOT / "lab" / "store") == []
    planted = tmp_path / "big.py"  # the check can fail: a class of 201 lines is found
    planted.write_text("class Big:\n" + "    x = 1\n" * 200, encoding="utf-8")
    assert _classes_over(200, tmp_path) == [("big.py", "Big", 201)]


def test_the_store_marker_is_named_once_in_lab():
    from tests.conftest import ROOT
    from lab.store.layout import INFO_FILE

    spelled = [p.relative_to(ROOT).as_posix() for p in sorted((ROOT / "lab").rglob("*.py"))
               if INFO_FILE in p.read_text(encoding="utf-8")]
    assert spelled == ["lab/store/layout.py"]  # everything else asks lab.store.layout (is_store, info_path)
