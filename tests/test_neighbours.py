"""The neighbour boost: a turn gains a share of the fused score of the turns next to it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config import FusionConfig, SearchConfig
from lab.errors import ValidationError
from lab.search.candidates import Query
from lab.search.fusion import fuse, prepare

SCHEMA = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32, "score": pl.Float64}


def table(rows):
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def episode(mid, ep, turn):
    return [("q", mid, "_episode", 0, float(ep)), ("q", mid, "_turn", 0, float(turn))]


def test_a_boost_lifts_the_turn_after_a_hit_and_makes_an_unranked_neighbour_a_result():
    rows = [("q", "a", "vector", 1, 0.9), ("q", "x", "vector", 2, 0.8), ("q", "y", "vector", 3, 0.7),
            ("q", "b", "vector", 4, 0.6)]
    # a and b are turns 0 and 1 of one episode; c (turn 2) was ranked by no list
    rows += episode("a", 0, 0) + episode("b", 0, 1) + episode("c", 0, 2) + episode("x", 9, 0) + episode("y", 7, 0)
    cands = table(rows)
    plain = fuse(cands, FusionConfig(k=1.0, weights={"vector": 1.0}, top_k=10))
    assert plain["memory_id"].to_list() == ["a", "x", "y", "b"]  # c is no result without a boost
    boosted = fuse(cands, FusionConfig(k=1.0, weights={"vector": 1.0}, top_k=10, neighbour_boost=0.5))
    # b: 1/5 + 0.5 * 1/2 = 0.45 passes x (1/3) and y (1/4); c: 0.5 * b's unboosted 1/5 = 0.1
    assert boosted["memory_id"].to_list() == ["a", "b", "x", "y", "c"]
    scores = dict(zip(boosted["memory_id"], boosted["score"]))
    assert scores["b"] == pytest.approx(1 / 5 + 0.5 / 2) and scores["c"] == pytest.approx(0.1)
    assert scores["a"] == pytest.approx(1 / 2 + 0.5 / 5)


def test_turns_of_other_episodes_or_queries_are_not_neighbours():
    rows = [("q", "a", "vector", 1, 0.9), ("r", "b", "vector", 1, 0.9)]
    rows += episode("a", 0, 0) + [("r", "b", "_episode", 0, 0.0), ("r", "b", "_turn", 0, 1.0)]
    rows += episode("z", 1, 1)  # turn 1 of another episode
    got = fuse(table(rows), FusionConfig(k=1.0, weights={"vector": 1.0}, neighbour_boost=1.0))
    assert sorted(got["memory_id"].to_list()) == ["a", "b"]
    assert prepare(table(rows)).adjacent()[1].tolist() == [-1, -1, -1]


def test_a_boost_outside_0_1_is_named():
    with pytest.raises(ValidationError, match=r"fusion.neighbour_boost must be .*<= 1, got 1.5"):
        FusionConfig(neighbour_boost=1.5)


def test_search_pools_the_turns_next_to_its_candidates_with_their_place_in_the_episode(pipe):
    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    lines = ["what did you name the puppy?", "we called him Biscuit", "cute", "unrelated weather talk"]
    pipe.save_many([{"id": f"t{i}", "namespace": "c", "content": text, "created_at": t0 + timedelta(seconds=30 * i),
                     "metadata": {"episode": "S1"}} for i, text in enumerate(lines)], progress=False)
    config = SearchConfig(signals=("lexical",), depth=1, fusion=FusionConfig(weights={"lexical": 1.0}))
    cands = pipe.retriever.candidates([Query("q", "puppy name", "c")], config)
    ranked = cands.filter(pl.col("signal") == "lexical")["memory_id"].to_list()
    assert ranked == ["t0"]
    turns = dict(cands.filter(pl.col("signal") == "_turn").select("memory_id", "score").iter_rows())
    assert turns == {"t0": 0.0, "t1": 1.0}  # the answer after the question joins the pool
    hits = pipe.search("puppy name", "c", k=3, config=SearchConfig(
        signals=("lexical",), depth=1, fusion=FusionConfig(weights={"lexical": 1.0}, neighbour_boost=0.5)))
    assert [h.memory_id for h in hits] == ["t0", "t1"]


def test_an_episode_decay_makes_room_for_other_episodes():
    rows = [("q", "a1", "vector", 1, 0.9), ("q", "a2", "vector", 2, 0.8), ("q", "a3", "vector", 3, 0.7),
            ("q", "b1", "vector", 4, 0.6), ("q", "loose", "vector", 5, 0.5)]
    rows += episode("a1", 0, 0) + episode("a2", 0, 5) + episode("a3", 0, 9) + episode("b1", 1, 0)
    cands = table(rows)
    plain = fuse(cands, FusionConfig(k=1.0, weights={"vector": 1.0}))
    assert plain["memory_id"].to_list() == ["a1", "a2", "a3", "b1", "loose"]
    got = fuse(cands, FusionConfig(k=1.0, weights={"vector": 1.0}, episode_decay=0.5))
    # a2: 1/3 * 0.5, a3: 1/4 * 0.25; b1 (1/5) and the memory outside episodes (1/6) keep theirs
    assert got["memory_id"].to_list() == ["a1", "b1", "a2", "loose", "a3"]
    assert dict(zip(got["memory_id"], got["score"]))["a3"] == pytest.approx(0.25 / 4)
    with pytest.raises(ValidationError, match=r"fusion.episode_decay must be .*<= 1, got 2"):
        FusionConfig(episode_decay=2)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["q", "r"]), st.integers(0, 11), st.integers(-1, 2), st.booleans()),
                min_size=1, max_size=16, unique_by=lambda t: t[:2]),
       st.sampled_from([0.1, 0.5, 0.9, 1.0]))
def test_an_episode_decay_ranks_as_greedy_diversification(picks, decay):
    # (query, memory, episode or -1, superseded) in vector-list order per query; superseded memories
    # are hidden (dead pairs, outside every episode's count). Greedy, per query: take the best
    # score times (1 - decay) ** (results already taken from its episode), ties by memory id
    rows, base = [], {"q": {}, "r": {}}
    for qid, m, ep, superseded in picks:
        rank = len(base[qid]) + 1
        rows.append((qid, f"m{m:02d}", "vector", rank, 0.0))
        rows.append((qid, f"m{m:02d}", "_superseded", 0, float(superseded)))
        if ep >= 0:
            rows += [(qid, f"m{m:02d}", "_episode", 0, float(ep)), (qid, f"m{m:02d}", "_turn", 0, float(m))]
        if not superseded:
            base[qid][f"m{m:02d}"] = (1.0 / (1.0 + rank), ep)
    got = fuse(table(rows), FusionConfig(k=1.0, weights={"vector": 1.0}, episode_decay=decay, superseded="hide",
                                         top_k=20))
    for qid, left in base.items():
        taken: dict[int, int] = {}
        want = []
        while left:
            def adjusted(mid):
                score, ep = left[mid]
                return score * (1 - decay) ** taken.get(ep, 0) if ep >= 0 else score
            best = min(left, key=lambda mid: (-adjusted(mid), mid))
            want.append(best)
            ep = left.pop(best)[1]
            if ep >= 0:
                taken[ep] = taken.get(ep, 0) + 1
        # at decay 1 an episode's later results all score 0 and tie: both order them by id
        assert got.filter(pl.col("qid") == qid)["memory_id"].to_list() == want


def test_with_a_learned_model_the_episode_decay_diversifies_its_probabilities():
    from lab.config import LearnedFusion

    rows = [("q", "a1", "vector", 1, 0.9), ("q", "a2", "vector", 2, 0.8), ("q", "b1", "vector", 3, 0.7)]
    rows += episode("a1", 0, 0) + episode("a2", 0, 1) + episode("b1", 1, 0)
    rows += [("q", "a1", "_cosine", 0, 0.9), ("q", "a2", "_cosine", 0, 0.8), ("q", "b1", "_cosine", 0, 0.7)]
    model = LearnedFusion(features=("cosine",), mean=(0.0,), scale=(1.0,), coef=(4.0,))
    learned = FusionConfig(k=1.0, weights={"vector": 1.0}, learned=model)
    assert fuse(table(rows), learned)["memory_id"].to_list() == ["a1", "a2", "b1"]  # the model ranks by cosine
    got = fuse(table(rows), FusionConfig(k=1.0, weights={"vector": 1.0}, learned=model, episode_decay=0.5))
    assert got["memory_id"].to_list() == ["a1", "b1", "a2"]


def _episodes(pipe, namespace: str, topical: bool) -> None:
    """Six episodes of six turns. Topical: each turn holds its episode's two topic words beside two
    of its own (adjacent turns alike, as in a conversation); else four words of its own (no turn
    more like its neighbour than any other: independent notes)."""
    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    rows = []
    for e in range(6):
        for t in range(6):
            own = [f"{namespace}w{e}x{t}a", f"{namespace}w{e}x{t}b"]
            words = [f"topic{e}alpha", f"topic{e}beta", *own] if topical else [*own, f"{namespace}w{e}x{t}c", f"{namespace}w{e}x{t}d"]
            rows.append({"id": f"{namespace}-{e}-{t}", "namespace": namespace, "content": " ".join(words),
                         "created_at": t0 + timedelta(minutes=10 * e, seconds=30 * t), "metadata": {"episode": f"E{e}"}})
    pipe.save_many(rows, progress=False)


def test_the_neighbour_boost_waits_for_adjacent_memories_to_be_alike(pipe):
    from lab.search.adjacency import adjacency_lift

    _episodes(pipe, "talk", topical=True)
    _episodes(pipe, "notes", topical=False)
    lift = {ns: adjacency_lift(pipe.retriever.view(ns), pipe.retriever.index(ns)) for ns in ("talk", "notes")}
    assert lift["talk"] > 0.3 and abs(lift["notes"]) < 0.05, lift
    # the lift rides on every candidate in an episode, the same for the whole namespace
    cands = pipe.retriever.candidates([Query("q", "notesw0x2a", "notes")], SearchConfig(signals=("lexical",), depth=1))
    assert set(cands.filter(pl.col("signal") == "_adjacency")["score"].to_list()) == {lift["notes"]}

    def results(ns, query, boost, min_lift):
        config = SearchConfig(signals=("lexical",), depth=1, fusion=FusionConfig(
            weights={"lexical": 1.0}, neighbour_boost=boost, neighbour_min_lift=min_lift))
        return [(h.memory_id, round(h.score, 9)) for h in pipe.search(query, ns, k=5, config=config)]

    # in the notes, a hit's neighbours are lifted only when the boost is told not to wait
    assert [m for m, _ in results("notes", "notesw0x2a", 0.5, -1.0)] == ["notes-0-2", "notes-0-1", "notes-0-3"]
    assert results("notes", "notesw0x2a", 0.5, 0.05) == results("notes", "notesw0x2a", 0.0, -1.0)
    # in the conversation the evidence is there: the boost acts as it always did
    assert results("talk", "talkw0x2a", 0.5, 0.05) == results("talk", "talkw0x2a", 0.5, -1.0)
    assert results("talk", "talkw0x2a", 0.5, 0.05) != results("talk", "talkw0x2a", 0.0, -1.0)


def test_a_minimum_lift_outside_minus_1_to_1_is_named():
    with pytest.raises(ValidationError, match="neighbour_min_lift"):
        FusionConfig(neighbour_min_lift=1.5)
