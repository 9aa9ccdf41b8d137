from __future__ import annotations

from datetime import datetime, timezone

import pytest

from lab.errors import ValidationError
from lab.store.records import namespace_folder, normalize_edge, normalize_memory, validate_namespace

NOW = datetime(2026, 3, 1, tzinfo=timezone.utc)


@pytest.mark.parametrize("name", ["a", "team-1", "conv_26", "x.y", "A" * 64, "team-a/notes", "a/b/c/d"])
def test_valid_namespaces(name):
    assert validate_namespace(name) == name


@pytest.mark.parametrize("name", ["", "../etc", "a//b", "/a", "a/", "a/../b", "a/b/c/d/e", "a/con", "a/.x", "a\\b", "..", "a..b", ".hidden", "A" * 65, "sp ace", None, 3,
                                  "a\n", "team-a/notes\n"])  # "$" of a plain match lets a trailing newline through
def test_invalid_namespaces_are_refused_with_a_clear_error(name):
    with pytest.raises(ValidationError, match="namespace"):
        validate_namespace(name)


@pytest.mark.parametrize("value", ["m1\n", "a\n", "conv-26:D1:3\n"])
def test_an_id_ending_in_a_newline_is_refused_naming_it(value):
    import re

    from lab.store.records import validate_id

    with pytest.raises(ValidationError, match=f"invalid id {re.escape(repr(value))}"):
        validate_id(value)


def test_a_nested_namespace_has_its_own_flat_index_folder():
    assert namespace_folder("team-a/notes") == "team-a~notes"
    assert namespace_folder("team-a") == "team-a"
    with pytest.raises(ValidationError, match="namespace"):
        namespace_folder("team-a~notes")  # the folder name itself is no namespace: no collision


def test_defaults_are_filled_and_id_is_deterministic():
    a = normalize_memory({"content": "hello", "namespace": "n"}, now=NOW)
    b = normalize_memory({"content": "hello", "namespace": "n"}, now=NOW)
    assert a["id"] == b["id"] and a["id"].startswith("n:")
    assert a["type"] == "semantic" and a["valid"] and not a["pinned"]
    assert a["created_at"] == NOW == a["updated_at"]
    assert a["metadata"] == "{}"


def test_anchor_is_pinned_by_default():
    assert normalize_memory({"content": "x", "namespace": "n", "type": "anchor"}, now=NOW)["pinned"]


@pytest.mark.parametrize(
    "record,message",
    [
        ({"namespace": "n"}, "field 'content' must be a non-empty string"),
        ({"namespace": "n", "content": "   "}, "field 'content' must be a non-empty string"),
        ({"namespace": "n", "content": "x", "type": "memo"}, "field 'type': 'memo' is not one of"),
        ({"namespace": "n", "content": "x", "tags": "a,b"}, "field 'tags'"),
        ({"namespace": "n", "content": "x", "created_at": "yesterday"}, "created_at: 'yesterday' is not an ISO 8601"),
        ({"namespace": "n", "content": "x", "importance": 2}, "field 'importance'"),
        ({"namespace": "n", "content": "x", "pinned": "yes"}, "field 'pinned'"),
        ({"namespace": "n", "content": "x", "colour": "red"}, r"unknown field\(s\) \['colour'\]"),
        ({"namespace": "n", "content": "x", "metadata": [1]}, "field 'metadata' must be an object"),
        ({"namespace": "n", "content": "x", "id": "bad id"}, "field 'id'"),
        ({"content": "x"}, "field 'namespace' is required"),
        ({"namespace": "n", "content": "x", "created_at": "2026-01-02T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z"},
         "'updated_at' is earlier"),
    ],
)
def test_malformed_memory_errors_name_the_field(record, message):
    with pytest.raises(ValidationError, match=message):
        normalize_memory(record, now=NOW, where="line 7: ")


def test_error_is_prefixed_with_the_location():
    with pytest.raises(ValidationError, match="^line 7: field 'type'"):
        normalize_memory({"namespace": "n", "content": "x", "type": "nope"}, now=NOW, where="line 7: ")


def test_timestamps_are_utc_whatever_the_offset():
    row = normalize_memory({"namespace": "n", "content": "x", "created_at": "2026-01-01T10:00:00+02:00"}, now=NOW)
    assert row["created_at"] == datetime(2026, 1, 1, 8, tzinfo=timezone.utc)


def test_edges_are_validated():
    edge = normalize_edge({"src": "a", "dst": "b", "relation": "supersedes"}, now=NOW)
    assert edge["weight"] == 1.0 and edge["relation"] == "supersedes"
    with pytest.raises(ValidationError, match="'relation': 'likes' is not one of"):
        normalize_edge({"src": "a", "dst": "b", "relation": "likes"}, now=NOW)
    with pytest.raises(ValidationError, match="itself"):
        normalize_edge({"src": "a", "dst": "a"}, now=NOW)
    with pytest.raises(ValidationError, match="'dst' is required"):
        normalize_edge({"src": "a"}, now=NOW)
