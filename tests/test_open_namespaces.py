"""A process keeps at most `open_namespaces` namespaces' views and indexes open, the least recently
used closed first: a store of many small namespaces does not grow a server's memory with their
count, a closed namespace answers as before when opened again, and a search holding one that is
closed meanwhile still answers."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.index.open_namespaces import LeastRecentlyUsed
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.search.searcher import search
from lab.store.settings import StoreSettings
from lab.workspace import Workspace

NAMESPACES = [f"user-{i}" for i in range(5)]


def capped(n: int) -> StoreSettings:
    return replace(StoreSettings.default(), open_namespaces=n)


@pytest.fixture
def store(tmp_path):
    with Pipeline.open(tmp_path / "store", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"namespace": ns, "content": f"{ns} note {i} about topic{i} and colour{i % 3}"}
                        for ns in NAMESPACES for i in range(12)], progress=False)
    return tmp_path / "store"


def ranked(reader, ns: str) -> list[str]:
    return [r.memory_id for r in reader.search_response("topic3 colour0", ns, 5).results]


def test_the_least_recently_used_is_closed_first():
    lru = LeastRecentlyUsed(2)
    lru["a"], lru["b"] = 1, 2
    assert lru.get("a") == 1  # a is now the most recent
    lru["c"] = 3
    assert lru.keys() == ["a", "c"] and lru.closed == 1 and "b" not in lru


def test_a_reader_holds_at_most_the_cap_and_a_reopened_namespace_answers_as_before(store):
    uncapped = Retriever.open(store, embedder=FakeEmbedder())
    want = {ns: ranked(uncapped, ns) for ns in NAMESPACES}
    reader = Retriever.open(store, embedder=FakeEmbedder(), settings=capped(2))
    for _ in range(2):  # the second round reopens every namespace the first closed
        for ns in NAMESPACES:
            assert ranked(reader, ns) == want[ns]
            assert len(reader._views) <= 2 and len(reader.indexes.loaded()) <= 2
    assert reader.indexes._indexes.closed >= 2 * len(NAMESPACES) - 2


def test_a_namespace_closed_while_a_search_holds_it_still_answers_that_search(store):
    reader = Retriever.open(store, embedder=FakeEmbedder(), settings=capped(1))
    want = ranked(reader, "user-0")
    held = reader.snapshot("user-0")  # what a search in flight holds
    for ns in NAMESPACES[1:]:
        ranked(reader, ns)
    assert "user-0" not in reader._views and "user-0" not in reader.indexes.loaded()
    vector = reader.embed_queries(["topic3 colour0"])[0]
    answered = search(held, "topic3 colour0", vector, reader.search_config, k=5)
    assert [r.memory_id for r in answered.results] == want


def test_a_writer_closing_a_namespace_with_unsaved_writes_loses_none_of_them(store):
    with Pipeline.open(store, embedder=FakeEmbedder(), settings=capped(1)) as pipe:
        saved = pipe.save("quokka zebrafish rotation checklist", namespace="user-0").created[0]
        pipe.save("another note for the second user", namespace="user-1")  # closes user-0's index
        assert "user-0" not in pipe.indexes.loaded()
        assert pipe.search("quokka zebrafish rotation", "user-0", k=1, preset="bm25")[0].memory_id == saved
        pipe.save("and one more for the third", namespace="user-2")
    reader = Retriever.open(store, embedder=FakeEmbedder())
    assert reader.search_response("quokka zebrafish rotation", "user-0", 1, preset="bm25").results[0].memory_id == saved


@pytest.mark.parametrize("raw", ["0", "-3", "lots", "1.5"])
def test_a_cap_of_zero_or_nonsense_is_refused_naming_the_setting(raw):
    with pytest.raises(ValidationError, match=r"\$LAB_OPEN_NAMESPACES") as caught:
        Workspace.resolve(env={"LAB_OPEN_NAMESPACES": raw})
    assert caught.value.field == "open_namespaces"
    with pytest.raises(ValidationError, match="open_namespaces must be a whole number >= 1"):
        replace(StoreSettings.default(), open_namespaces=0)


def test_the_command_line_refuses_a_bad_cap_before_touching_a_store(tmp_path):
    done = subprocess.run([sys.executable, "-m", "lab", "stats", "--store", str(tmp_path / "none")],
                          env={**__import__("os").environ, "LAB_OPEN_NAMESPACES": "0"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "open_namespaces" in done.stderr and "LAB_OPEN_NAMESPACES" in done.stderr
    assert not (tmp_path / "none").exists()


def test_a_server_capped_at_two_open_namespaces_answers_in_all_of_them(tmp_path):
    """`lab serve` takes the cap from $LAB_OPEN_NAMESPACES; five namespaces written and searched
    in turn, twice over, each answer its own memory first (each reopened after it was closed)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from serving import Server, write_bundle

    bundle = write_bundle(tmp_path / "bundle")
    with Server(bundle, tmp_path / "store", env={"LAB_OPEN_NAMESPACES": "2"}) as srv, srv.client() as c:
        saved = {}
        for ns in NAMESPACES:
            assert c.post("/v1/namespaces", json={"name": ns}).status_code in (200, 201)
            r = c.post("/v1/memories", json={"namespace": ns, "content": f"the {ns} quokka ledger entry"})
            assert r.status_code == 201, r.text
            saved[ns] = r.json()["id"]
        for _ in range(2):
            for ns in NAMESPACES:
                r = c.post("/v1/search", json={"namespace": ns, "query": f"{ns} quokka ledger", "k": 1})
                assert r.status_code == 200 and r.json()["results"][0]["memory_id"] == saved[ns], r.text
