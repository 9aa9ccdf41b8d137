"""The neighbour boost: a turn gains a share of the fused score of the turns next to it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import polars as pl
import pytest

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
