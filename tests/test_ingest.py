"""`lab ingest` file formats: JSONL and Parquet, folders with edges, located errors, nothing lost."""
from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lab.errors import ValidationError


def write_jsonl(path, rows):
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


MEMS = [
    {"id": "m1", "namespace": "n", "content": "first memory", "type": "fact"},
    {"id": "m2", "namespace": "n", "content": "second memory", "tags": ["x"]},
    {"id": "m3", "namespace": "n", "content": "third memory", "created_at": "2026-01-01T00:00:00Z"},
]


def test_folder_with_memories_and_edges(pipe, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_jsonl(folder / "memories.jsonl", MEMS)
    write_jsonl(folder / "edges.jsonl", [{"src": "m2", "dst": "m1", "relation": "supersedes"}])
    report = pipe.ingest(folder, progress=False)
    assert report.created == ["m1", "m2", "m3"] and report.edges == 1
    again = pipe.ingest(folder, progress=False)
    assert again.created == [] and again.edges == 0 and len(again.duplicates) == 3


def test_parquet_file(pipe, tmp_path):
    rows = [dict(r, metadata=json.dumps({"k": i})) for i, r in enumerate(MEMS)]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "m.parquet")
    report = pipe.ingest(tmp_path / "m.parquet", progress=False)
    assert len(report.created) == 3
    assert json.loads(pipe.get("m2")["metadata"]) == {"k": 1}


def test_duplicate_content_under_a_new_id_keeps_edges_on_the_stored_memory(pipe, tmp_path):
    pipe.save("first memory", namespace="n", id="orig")
    folder = tmp_path / "d"
    folder.mkdir()
    write_jsonl(folder / "memories.jsonl", MEMS)
    write_jsonl(folder / "edges.jsonl", [{"src": "m2", "dst": "m1"}])
    report = pipe.ingest(folder, progress=False)
    assert report.id_map == {"m1": "orig"}
    assert pipe.store.edges("n").select("src", "dst").rows() == [("m2", "orig")]


@pytest.mark.parametrize(
    "line,message",
    [
        ('{"namespace": "n", "content": "ok"}\n{"namespace": "n", "content": 5}', "line 2: field 'content'"),
        ('{"namespace": "n", "content": "ok"}\n\n{bad json', "line 3: invalid JSON"),
        ('[1, 2]', "line 1: expected a JSON object"),
        ('{"namespace": "n", "content": "ok", "type": "memo"}', "line 1: field 'type'"),
        ('{"namespace": "../n", "content": "ok"}', "line 1: field 'namespace'"),
    ],
)
def test_malformed_files_name_the_line_and_field_and_store_nothing(pipe, tmp_path, line, message):
    pipe.save("already here", namespace="n")
    version = pipe.store.version()
    path = tmp_path / "bad.jsonl"
    path.write_text(line, encoding="utf-8")
    with pytest.raises(ValidationError, match=message):
        pipe.ingest(path, progress=False)
    assert pipe.store.version() == version
    assert pipe.store.memories()["content"].to_list() == ["already here"]


def test_edge_to_an_unknown_memory_fails_before_any_write(pipe, tmp_path):
    folder = tmp_path / "d"
    folder.mkdir()
    write_jsonl(folder / "memories.jsonl", MEMS)
    write_jsonl(folder / "edges.jsonl", [{"src": "m1", "dst": "m2"}, {"src": "m1", "dst": "ghost"}])
    with pytest.raises(ValidationError, match="edges.jsonl line 2: edge field 'dst': no memory with id 'ghost'"):
        pipe.ingest(folder, progress=False)
    assert pipe.store.memories().height == 0


def test_unsupported_and_missing_paths(pipe, tmp_path):
    (tmp_path / "x.csv").write_text("a,b")
    with pytest.raises(ValidationError, match="unsupported file type '.csv'"):
        pipe.ingest(tmp_path / "x.csv", progress=False)
    with pytest.raises(ValidationError, match="no such file or folder"):
        pipe.ingest(tmp_path / "nope", progress=False)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValidationError, match="holds no memories.jsonl"):
        pipe.ingest(tmp_path / "empty", progress=False)


def test_a_failing_ingest_writes_nothing(tmp_path):
    """Each of these used to fail after memories, chunks or a namespace were committed."""
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("already here", namespace="old", id="m-old")
        before = pipe.store.version()
        cases = {
            "cross": ([{"id": "a", "namespace": "new", "content": "alpha"}],
                      [{"src": "a", "dst": "m-old"}], "crosses namespaces"),
            "overflow": ([{"id": "b", "namespace": "new", "content": "beta", "access_count": 2**70}], [],
                         "access_count' must be an integer in 0..9223372036854775807"),
            "surrogate": ([{"id": "c", "namespace": "new", "content": "gamma \ud800"}], [], "lone surrogate"),
            "edge_list_id": ([{"id": "d", "namespace": "new", "content": "delta"}], [{"src": ["d"], "dst": "m-old"}],
                             "edges.jsonl line 1: edge field invalid src"),
        }
        for name, (memories, edges, message) in cases.items():
            folder = tmp_path / name
            folder.mkdir()
            (folder / "memories.jsonl").write_text("".join(json.dumps(m) + "\n" for m in memories), encoding="utf-8")
            if edges:
                (folder / "edges.jsonl").write_text("".join(json.dumps(e) + "\n" for e in edges), encoding="utf-8")
            with pytest.raises(ValidationError, match=message):
                pipe.ingest(folder)
            assert pipe.store.version() == before and pipe.store.namespaces() == ["old"], name


def test_bad_bytes_and_duplicate_ids_name_their_lines(tmp_path):
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"namespace": "n", "content": "fine"}\n{"namespace": "n", "content": "caf\xe9"}\n')
    dup = tmp_path / "dup.jsonl"
    dup.write_text('{"id": "x", "namespace": "n", "content": "one"}\n{"id": "y", "namespace": "n", "content": "two"}\n'
                   '{"id": "x", "namespace": "n", "content": "three"}\n', encoding="utf-8")
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        with pytest.raises(ValidationError, match=r"bad.jsonl line 2: not UTF-8 text: byte 35 of the line \(0xe9\)"):
            pipe.ingest(bad)
        with pytest.raises(ValidationError, match=r"id 'x' is used for different contents at dup.jsonl line 1, dup.jsonl line 3"):
            pipe.ingest(dup)
        assert pipe.store.memories().height == 0


@pytest.mark.parametrize("name", ["CON", "nul.txt", "Lpt3", "abc.", "a..b"])
def test_unsafe_namespace_names_are_refused(name):
    from lab.store.records import validate_namespace

    with pytest.raises(ValidationError, match="invalid namespace"):
        validate_namespace(name)
