"""A namespace view moved on by saves, updates, deletes and logged accesses (lab.search.view_insert,
lab.search.view_remove) equals one built from scratch after every step of random sequences of saves,
accesses, updates, soft and hard deletes and edges; and those writes move the view rather than
rebuilding it."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import numpy as np
import polars as pl
from hypothesis import HealthCheck, example, given, settings, strategies as st

import lab.search.view_insert as view_insert
from lab.config import FilterConfig, SaveConfig
from lab.search.presets import resolve
from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.search.pending import PENDING_AT_MOST, PendingMatch
from lab.search.view import build_view

NS = "n"
FILTERED = replace(resolve("lab"), filters=FilterConfig(types=("fact", "decision"), tags=("a",)))
WORDS = ["quokka", "canary", "deploy", "billing", "yesterday", "river", "piano", "tuesday", "ledger", "zebrafish"]
START = datetime(2024, 3, 1, tzinfo=timezone.utc)

memory = st.fixed_dictionaries({
    "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
    "hours": st.sampled_from([0, 0, 5, 30, 200]),  # repeats: equal created_at times break ties by id
    "episode": st.sampled_from([None, "s1", "s2", "s0", "s9"]),
    "type": st.sampled_from(["fact", "semantic", "decision"]),  # widths differ: a wider type inserted
    "tags": st.lists(st.sampled_from(["a", "b"]), max_size=2),
})
step = st.one_of(
    st.tuples(st.just("save"), st.lists(memory, min_size=1, max_size=3)),
    st.tuples(st.just("save"), st.lists(memory, min_size=9, max_size=12)),  # more than a few at once
    st.tuples(st.just("access"), st.integers(0, 50)),
    st.tuples(st.just("update"), st.integers(0, 50)),
    st.tuples(st.just("retag"), st.integers(0, 50)),  # rewritten where it stands, its text unchanged
    st.tuples(st.just("move"), st.integers(0, 50)),  # another episode, or another time (out and in again)
    st.tuples(st.just("delete"), st.integers(0, 50)),
    st.tuples(st.just("hard_delete"), st.integers(0, 50)),
    st.tuples(st.just("edge"), st.integers(0, 50)),
)


def record(m: dict, i: int) -> dict:
    out = {"namespace": NS, "content": " ".join(m["words"]) + f" #{i}", "type": m["type"], "tags": m["tags"],
           "created_at": (START + timedelta(hours=m["hours"])).isoformat()}
    if m["episode"]:
        out["metadata"] = {"session": m["episode"]}
    return out


def exercise(pipe: Pipeline) -> None:
    """Work out what a view memoises, so a move has it to carry."""
    view = pipe.retriever.view(NS)
    view.dated(), view.event_s(), view.has_episodes(), view.episode_turns(), view.adjacent_turns()
    view.contains("quokka")
    view.types  # noqa: B018  (made: a move carries it)
    pipe.search("quokka deploy yesterday", NS, k=5)
    pipe.search("river ledger", NS, k=5, preset="bm25")
    pipe.search("quokka river", NS, k=5, config=FILTERED)


def assert_same(moved, built) -> None:
    assert moved.ids == built.ids
    for name in ("created_s", "access", "valid", "superseded", "by_newest", "by_access"):
        assert np.array_equal(getattr(moved, name), getattr(built, name)), name
    assert moved.text_lower.to_list() == built.text_lower.to_list()
    tags = lambda v: v.tags.to_list() if isinstance(v.tags, pl.Series) else v.tags  # noqa: E731
    assert tags(moved) == tags(built)
    assert (moved.neighbours, moved.contradicts, moved.derived_from) == (built.neighbours, built.contradicts,
                                                                          built.derived_from)
    assert moved.rows.equals(built.rows)
    assert moved.episodes.to_list() == built.episodes.to_list()
    for a, b in zip(moved._episode_order(), built._episode_order()):
        assert np.array_equal(a, b)
    for a, b in zip((*moved.episode_turns(), *moved.adjacent_turns()), (*built.episode_turns(), *built.adjacent_turns())):
        assert np.array_equal(a, b)
    assert np.array_equal(moved.dated(), built.dated()) and np.array_equal(moved.event_s(), built.event_s())
    assert np.array_equal(moved.contains("quokka"), built.contains("quokka"))
    assert all(moved.pos[m] == i for i, m in enumerate(built.ids))
    assert np.array_equal(moved.types, built.types)
    for filters, without_derived in list(moved._masks):
        assert np.array_equal(moved._masks[(filters, without_derived)], built._mask(filters, without_derived))
    for index_id, (mask, memory_of, n, passing) in list(moved._passing.items()):
        assert np.array_equal(moved.labels_passing(index_id, memory_of, mask),
                              built.labels_passing(index_id, memory_of, built._mask(*next(
                                  k for k, v in moved._masks.items() if v is mask))))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(first=st.lists(memory, min_size=1, max_size=6), steps=st.lists(step, min_size=1, max_size=8))
@example(first=[{"words": ["quokka"], "hours": 0, "episode": None, "type": "fact", "tags": []}] * 2,
         steps=[("update", 0), ("update", 0)])
def test_a_moved_view_equals_one_built_from_scratch(tmp_path_factory, first, steps):
    root = tmp_path_factory.mktemp("view") / "store"
    with Pipeline.open(root, SaveConfig(), embedder=FakeEmbedder(), create=True) as pipe:
        n = 0
        pipe.save_many([record(m, i) for i, m in enumerate(first)], progress=False)
        n += len(first)
        pipe.retriever.view(NS).contains("piano")  # memoised once, asked again only after every step
        for kind, arg in steps:
            exercise(pipe)
            ids = sorted(pipe.store.memories(NS)["id"].to_list())
            if kind == "save":
                pipe.save_many([record(m, n + i) for i, m in enumerate(arg)], progress=False)
                n += len(arg)
            elif kind == "access":
                pipe.writer.record_access([ids[arg % len(ids)], ids[(arg * 7) % len(ids)]])
            elif kind == "update":  # numbered: two updates to one content would be refused as duplicates
                pipe.update(ids[arg % len(ids)], content=f"updated piano tuesday {n}")
                n += 1
            elif kind == "retag":
                pipe.update(ids[arg % len(ids)], tags=["b"] if arg % 2 else ["a"], type="decision" if arg % 3 else "fact")
            elif kind == "move":
                pipe.update(ids[arg % len(ids)], **({"metadata": {"session": f"s{arg % 3}"}} if arg % 2 else
                                                    {"created_at": (START + timedelta(hours=arg)).isoformat()}))
            elif kind == "delete" and len(ids) > 1:
                pipe.delete(ids[arg % len(ids)])
            elif kind == "hard_delete" and len(ids) > 1:
                pipe.delete(ids[arg % len(ids)], hard=True)
            elif kind == "edge" and len(ids) > 1:
                pipe.add_edge(ids[arg % len(ids)], ids[(arg + 1) % len(ids)], "contradicts")
            moved = pipe.retriever.view(NS)
            built = build_view(pipe.store.memories(NS), pipe.store.edges(NS), NS, moved.key)
            assert_same(moved, built)
            # and the searches a moved view answers are a rebuilt one's
            fresh = Retriever.open(root, embedder=FakeEmbedder())
            for config in (resolve("lab"), resolve("bm25"), FILTERED):
                want = [(r.memory_id, round(r.score, 9))
                        for r in fresh.search_response("quokka deploy yesterday", NS, 5, config=config).results]
                got = [(h.memory_id, round(h.score, 9)) for h in pipe.search("quokka deploy yesterday", NS, k=5, config=config)]
                assert got == want, config.name
        moved = pipe.retriever.view(NS)
        assert np.array_equal(moved.contains("piano"), build_view(pipe.store.memories(NS), pipe.store.edges(NS), NS,
                                                                   moved.key).contains("piano"))


def test_a_move_carries_the_memoised_matches_unmoved_until_a_search_asks(pipe):
    """A save must not copy every memoised match (128 arrays of a million at a million memories):
    each waits for its moves until asked, and one left waiting too long is dropped, to be scanned."""
    pipe.save_many([{"namespace": NS, "content": f"note {i} about the river"} for i in range(20)], progress=False)
    pipe.retriever.view(NS).contains_all(("river", "quokka"))
    for i in range(PENDING_AT_MOST + 1):
        pipe.save(f"quokka sighting {i} by the river", namespace=NS)
        moved = pipe.retriever.view(NS)
        if i == 0:
            assert all(isinstance(moved._contains[n], PendingMatch) for n in ("river", "quokka"))
        if i == 1:
            pipe.delete(moved.ids[0], hard=True)  # a memory taken out between the moves
            moved = pipe.retriever.view(NS)
        if i == PENDING_AT_MOST - 3:
            moved.contains("quokka")  # asked: moved now, and memoised as an array again
            assert isinstance(moved._contains["quokka"], np.ndarray)
    assert "river" not in moved._contains  # waited through PENDING_AT_MOST moves: dropped
    assert isinstance(moved._contains["quokka"], PendingMatch) and len(moved._contains["quokka"].moves) == 3
    built = build_view(pipe.store.memories(NS), pipe.store.edges(NS), NS, moved.key)
    for needle in ("river", "quokka"):
        assert np.array_equal(moved.contains(needle), built.contains(needle)), needle
    assert int(moved.contains("quokka").sum()) == PENDING_AT_MOST + 1


def test_saves_updates_and_deletes_move_the_view_and_an_edge_builds_it_again(pipe, monkeypatch):
    pipe.save_many([{"namespace": NS, "content": f"note {i} about the river"} for i in range(20)], progress=False)
    pipe.search("river", NS)
    built = []
    real = view_insert.build_view
    monkeypatch.setattr(view_insert, "build_view", lambda *a, **k: built.append(1) or real(*a, **k))
    saved = pipe.save("quokka zebrafish canary deploy", namespace=NS).created[0]
    assert pipe.search("quokka zebrafish canary deploy", NS, k=1, preset="bm25")[0].memory_id == saved
    pipe.writer.record_access([saved])
    assert pipe.retriever.view(NS).access[pipe.retriever.view(NS).pos[saved]] == 1
    taken_out = []
    real_removed = view_insert.removed_view
    monkeypatch.setattr(view_insert, "removed_view", lambda *a: taken_out.append(1) or real_removed(*a))
    pipe.update(saved, content="quokka zebrafish canary rollback")
    assert pipe.search("quokka zebrafish canary rollback", NS, k=1, preset="bm25")[0].memory_id == saved
    other = pipe.store.memories(NS).sort("id")["id"][3]
    pipe.delete(other)  # soft: kept, marked invalid
    assert not pipe.retriever.view(NS).valid[pipe.retriever.view(NS).pos[other]]
    assert taken_out == []  # an update and a soft delete rewrite the memory where it stands
    pipe.delete(other, hard=True)
    assert other not in pipe.retriever.view(NS).pos
    assert taken_out == [1]
    assert built == []  # moved, every time
    ids = pipe.store.memories(NS).sort("id")["id"].to_list()
    pipe.add_edge(ids[0], ids[1], "contradicts")
    pipe.search("quokka", NS)
    assert built == [1]


def test_another_process_rewrite_builds_the_view_again(pipe, tmp_path, monkeypatch):
    """A reader does not know which ids another process's rewrite touched: it reads every row."""
    pipe.save_many([{"namespace": NS, "content": f"note {i} about the river"} for i in range(10)], progress=False)
    reader = Retriever.open(tmp_path / "store", embedder=FakeEmbedder())
    held = reader.view(NS)
    built = []
    real = view_insert.build_view
    monkeypatch.setattr(view_insert, "build_view", lambda *a, **k: built.append(1) or real(*a, **k))
    target = sorted(held.ids)[2]
    pipe.update(target, content="quokka rollback checklist")
    view = reader.view(NS)
    assert built == [1]
    assert view.text_lower[view.pos[target]].endswith("quokka rollback checklist")


def test_rows_of_a_view_left_in_pieces_by_saves_read_alike_by_slices_and_by_a_gather(pipe, monkeypatch):
    """`NamespaceView.rows_at` reads a few rows as one-row slices, many with one gather: the same rows."""
    import lab.search.view as view_module

    pipe.save_many([{"namespace": NS, "content": f"note {i} about the river", "tags": ["a"] * (i % 3)}
                    for i in range(30)], progress=False)
    pipe.search("river", NS)
    for i in range(4):  # each save splices the row frame: it is left in pieces
        pipe.save(f"a later note {i}", namespace=NS, tags=["b"])
    view = pipe.retriever.view(NS)
    assert view.rows.n_chunks() > 1
    positions = [33, 0, 17, 5, 33, 29]  # any order, repeats
    sliced = view.rows_at(positions)
    monkeypatch.setattr(view_module, "SLICE_AT_MOST", 0)
    assert sliced == view.rows_at(positions) == [view.rows.row(p, named=True) for p in positions]
    assert [r["id"] for r in sliced] == [view.ids[p] for p in positions]


def test_the_latest_time_is_memoised_per_array_and_follows_a_save(pipe):
    """`NamespaceView.latest` (every search's reference time) is taken once per times array: a view
    moved on by a later memory answers with that memory's time."""
    pipe.save_many([{"namespace": NS, "content": f"note {i}", "created_at": START + timedelta(hours=i)}
                     for i in range(5)], progress=False)
    view = pipe.retriever.view(NS)
    assert view.latest == START + timedelta(hours=4)
    assert view._latest[0] is view.created_s
    pipe.save("a later note", namespace=NS, created_at=START + timedelta(days=3))
    moved = pipe.retriever.view(NS)
    assert moved is not view and moved.latest == START + timedelta(days=3)
    assert view.latest == START + timedelta(hours=4)  # the old view keeps its own answer
