"""Fusers against hand-computed values, and hypothesis properties of weighted RRF."""
from __future__ import annotations

import math

import polars as pl
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lab.config import FusionConfig
from lab.errors import ValidationError
from lab.search.fusion import FUSERS, fuse, fuse_detailed, prepare

SCHEMA = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32, "score": pl.Float64}
W = {"vector": 1.0, "lexical": 1.0}


def table(rows):
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


# vector: a (0.9), b (0.8), c (0.5); lexical: b (6.0), d (4.0), a (1.0)
CANDS = table([
    ("q", "a", "vector", 1, 0.9), ("q", "b", "vector", 2, 0.8), ("q", "c", "vector", 3, 0.5),
    ("q", "b", "lexical", 1, 6.0), ("q", "d", "lexical", 2, 4.0), ("q", "a", "lexical", 3, 1.0),
])


def scores(cfg: FusionConfig) -> dict[str, float]:
    out = fuse(CANDS, cfg)
    return dict(zip(out["memory_id"].to_list(), out["score"].to_list()))


def test_rrf_hand_computed():
    s = scores(FusionConfig(method="rrf", k=60, weights=W, superseded="keep"))
    assert s["a"] == pytest.approx(1 / (60 + 1) + 1 / (60 + 3))
    assert s["b"] == pytest.approx(1 / (60 + 2) + 1 / (60 + 1))
    assert s["c"] == pytest.approx(1 / (60 + 3))
    assert s["d"] == pytest.approx(1 / (60 + 2))
    assert fuse(CANDS, FusionConfig(k=60, weights=W))["memory_id"].to_list() == ["b", "a", "d", "c"]


def test_weighted_rrf_and_k_zero():
    s = scores(FusionConfig(k=0, weights={"vector": 0.35, "lexical": 0.25}))
    assert s["a"] == pytest.approx(0.35 / 1 + 0.25 / 3)
    assert s["d"] == pytest.approx(0.25 / 2)


def test_weighted_sum_minmax_hand_computed():
    s = scores(FusionConfig(method="weighted_sum", weights={"vector": 0.4, "lexical": 0.6}))
    assert s["a"] == pytest.approx(0.4 * 1.0 + 0.6 * 0.0)
    assert s["b"] == pytest.approx(0.4 * (0.8 - 0.5) / 0.4 + 0.6 * 1.0)
    assert s["c"] == pytest.approx(0.0)
    assert s["d"] == pytest.approx(0.6 * (4.0 - 1.0) / 5.0)


def test_dbsf_hand_computed():
    s = scores(FusionConfig(method="dbsf", weights=W))
    v = [0.9, 0.8, 0.5]
    mu = sum(v) / 3
    sd = math.sqrt(sum((x - mu) ** 2 for x in v) / 3)
    norm = lambda x, mu, sd: min(max((x - (mu - 3 * sd)) / (6 * sd), 0), 1)  # noqa: E731
    lx = [6.0, 4.0, 1.0]
    mu2 = sum(lx) / 3
    sd2 = math.sqrt(sum((x - mu2) ** 2 for x in lx) / 3)
    assert s["a"] == pytest.approx(norm(0.9, mu, sd) + norm(1.0, mu2, sd2))
    assert s["c"] == pytest.approx(norm(0.5, mu, sd))


def test_combmnz_hand_computed():
    s = scores(FusionConfig(method="combmnz", weights=W))
    assert s["b"] == pytest.approx(((0.8 - 0.5) / 0.4 + 1.0) * 2)
    assert s["a"] == pytest.approx((1.0 + 0.0) * 2)
    assert s["d"] == pytest.approx((4.0 - 1.0) / 5.0 * 1)


def test_unknown_fuser_lists_the_known_ones():
    with pytest.raises(ValidationError, match=r"unknown fusion method 'borda'; known: \['combmnz', 'dbsf', 'rrf', 'weighted_sum'\]"):
        fuse(CANDS, FusionConfig(method="borda"))
    assert set(FUSERS) == {"rrf", "weighted_sum", "dbsf", "combmnz"}


def test_ties_break_on_memory_id():
    c = table([("q", "z", "vector", 1, 1.0), ("q", "y", "lexical", 1, 1.0)])
    assert fuse(c, FusionConfig(weights=W))["memory_id"].to_list() == ["y", "z"]


def test_post_processing_superseded_coverage_rerank_topk():
    feats = table([
        ("q", "a", "_superseded", 0, 1.0), ("q", "d", "_coverage", 0, 1.0),
        ("q", "c", "_cosine", 0, 0.99), ("q", "", "_intent", 0, 0.0),
    ])
    c = pl.concat([CANDS, feats])
    demoted = scores_of(c, FusionConfig(k=60, weights=W, demote_factor=0.5))
    assert demoted["a"] == pytest.approx((1 / 61 + 1 / 63) * 0.5)
    assert "a" not in scores_of(c, FusionConfig(k=60, weights=W, superseded="hide"))
    bonus = scores_of(c, FusionConfig(k=60, weights=W, coverage_bonus=0.5, superseded="keep"))
    assert bonus["d"] == pytest.approx(1 / 62 * 1.5)
    # depth 4 holds every candidate: c (cosine .99) rises to the top; the rest tie at cosine 0
    # and break on memory id, so a follows
    reranked = fuse(c, FusionConfig(k=60, weights=W, rerank_depth=4, top_k=2))
    assert reranked["memory_id"].to_list() == ["c", "a"]
    # depth 2 holds only the fused top 2 (b, then a; c is fourth): c cannot rise, the two tie on cosine
    assert fuse(c, FusionConfig(k=60, weights=W, rerank_depth=2, top_k=2))["memory_id"].to_list() == ["a", "b"]
    assert fuse(c, FusionConfig(k=60, weights=W, top_k=2)).height == 2


def scores_of(c, cfg):
    out = fuse(c, cfg)
    return dict(zip(out["memory_id"].to_list(), out["score"].to_list()))


# ------------------------------------------------------------------ properties
lists = st.dictionaries(
    st.sampled_from(["vector", "lexical", "recency"]),
    st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=8, unique=True),
    min_size=1,
)


def to_table(ls: dict[str, list[str]], order_seed: int = 0) -> pl.DataFrame:
    rows = [("q", m, s, r, 1.0 / r) for s, ms in ls.items() for r, m in enumerate(ms, start=1)]
    if order_seed:
        rows = rows[order_seed % len(rows):] + rows[: order_seed % len(rows)]
    return table(rows)


CFG = FusionConfig(k=2.0, weights={"vector": 1.0, "lexical": 0.7, "recency": 0.3}, top_k=100)


@settings(max_examples=60, deadline=None)
@given(lists, st.integers(1, 50))
def test_input_order_does_not_change_the_result(ls, seed):
    assert fuse(to_table(ls), CFG).rows() == fuse(to_table(ls, seed), CFG).rows()


@settings(max_examples=60, deadline=None)
@given(lists, st.data())
def test_raising_a_rank_never_lowers_the_fused_position(ls, data):
    signal = data.draw(st.sampled_from(sorted(ls)))
    ms = ls[signal]
    assume(len(ms) >= 2)
    i = data.draw(st.integers(1, len(ms) - 1))
    target = ms[i]
    before = fuse(to_table(ls), CFG)["memory_id"].to_list().index(target)
    raised = dict(ls)
    raised[signal] = ms[: i - 1] + [target] + [ms[i - 1]] + ms[i + 1:]
    after = fuse(to_table(raised), CFG)["memory_id"].to_list().index(target)
    assert after <= before


@settings(max_examples=60, deadline=None)
@given(lists)
def test_a_zero_weight_removes_a_signal(ls):
    zero = FusionConfig(k=2.0, weights={"vector": 1.0, "lexical": 0.7, "recency": 0.0}, top_k=100)
    without = {s: m for s, m in ls.items() if s != "recency"}
    if not without:
        assert fuse(to_table(ls), zero).height == 0
        return
    assert fuse(to_table(ls), zero).rows() == fuse(to_table(without), zero).rows()


@settings(max_examples=40, deadline=None)
@given(lists)
def test_duplicates_collapse_to_one_result_per_memory(ls):
    out = fuse(to_table(ls), CFG)
    assert out["memory_id"].n_unique() == out.height
    assert out["rank"].to_list() == list(range(1, out.height + 1))


def test_contributions_are_reported_per_signal():
    ranked, contrib = fuse_detailed(CANDS, FusionConfig(k=60, weights=W))
    a = contrib.filter(pl.col("memory_id") == "a").sort("signal")
    assert a["contribution"].to_list() == pytest.approx([1 / 63, 1 / 61])


tie_lists = st.dictionaries(
    st.sampled_from(["vector", "lexical", "recency", "graph"]),
    st.lists(st.sampled_from("abcdefghijklmnop"), min_size=1, max_size=12, unique=True),
    min_size=1,
)


@settings(max_examples=80, deadline=None)
@given(st.lists(tie_lists, min_size=1, max_size=4), st.integers(1, 6), st.integers(0, 4),
       st.sampled_from(["rrf", "weighted_sum", "dbsf", "combmnz"]))
def test_the_top_k_cut_equals_the_head_of_the_full_ranking(per_query, k, depth, method):
    # many exact ties (equal ranks in equal-weight lists): the per-query cut must keep them all
    rows = [(f"q{i}", m, s, r, 1.0 / r) for i, ls in enumerate(per_query) for s, ms in ls.items()
            for r, m in enumerate(ms, start=1)]
    c = table(rows)
    cfg = FusionConfig(method=method, k=1.0, weights={"vector": 1.0, "lexical": 1.0, "recency": 1.0, "graph": 1.0},
                       rerank_depth=depth, top_k=k)
    cut = fuse(c, cfg)
    full = fuse_detailed(c, cfg, top_k=None)[0]
    assert cut.rows() == full.filter(pl.col("rank") <= k).rows()


def test_a_prepared_table_fuses_like_the_table_under_many_configs():
    prepared = prepare(CANDS)
    for cfg in (FusionConfig(k=60, weights=W), FusionConfig(method="dbsf", weights=W, top_k=2),
                FusionConfig(method="combmnz", weights={"vector": 0.0, "lexical": 1.0})):
        assert fuse(prepared, cfg).rows() == fuse(CANDS, cfg).rows()


def test_a_duplicate_row_keeps_the_memorys_best_rank_in_that_list():
    dup = table([("q", "a", "vector", 1, 0.9), ("q", "a", "vector", 3, 0.5), ("q", "b", "vector", 2, 0.8)])
    out = fuse(dup, FusionConfig(k=0, weights={"vector": 1.0}, superseded="keep"))
    assert dict(zip(out["memory_id"], out["score"])) == {"a": 1.0, "b": 0.5}


def test_a_table_without_its_columns_is_refused():
    with pytest.raises(ValidationError, match="lacks column"):
        fuse(pl.DataFrame({"qid": ["q"]}), FusionConfig())


def test_an_empty_candidate_table_fuses_to_no_results():
    assert fuse(table([]), FusionConfig()).height == 0
