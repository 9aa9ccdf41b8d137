"""The sweep's batch scorer is held equal to `fuse` + `retrieval_metrics`, configuration by configuration."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings, strategies as st

from lab.config import FusionConfig
from lab.eval.metrics import retrieval_metrics
from lab.search.fusion import fuse, prepare
from lab.tune.batch import BatchScorer, batchable

SIGNALS = ("lexical", "recency", "vector")


@st.composite
def tables(draw):
    n_q = draw(st.integers(1, 3))
    n_m = draw(st.integers(1, 9))
    rows, feats, qrels = [], [], []
    for q in range(n_q):
        qid = f"q{q}"
        seen = set()
        for s in SIGNALS:
            members = draw(st.lists(st.integers(0, n_m - 1), unique=True, max_size=n_m))
            # few distinct scores: ties inside lists and across signals are the interesting cases
            scores = sorted((draw(st.sampled_from([0.1, 0.5, 0.5, 0.9])) for _ in members), reverse=True)
            for rank, (m, sc) in enumerate(zip(members, scores), start=1):
                rows.append((qid, f"m{m}", s, rank, sc))
                seen.add(m)
        # turns next to candidates: features, no list (only a neighbour boost makes them live)
        around = set(draw(st.lists(st.integers(0, n_m - 1), unique=True, max_size=2))) - seen
        lift = draw(st.sampled_from([None, 0.0, 0.1]))  # the namespace's adjacency lift (none: not measured)
        for m in sorted(seen | around):
            feats.append((qid, f"m{m}", "_episode", 0, float(m // 3)))
            feats.append((qid, f"m{m}", "_turn", 0, float(m % 3)))
            if lift is not None:
                feats.append((qid, f"m{m}", "_adjacency", 0, lift))
        for m in sorted(seen | around):
            feats.append((qid, f"m{m}", "_coverage", 0, draw(st.sampled_from([0.0, 0.5, 1.0]))))
            feats.append((qid, f"m{m}", "_superseded", 0, draw(st.sampled_from([0.0, 0.0, 1.0]))))
            feats.append((qid, f"m{m}", "_age_hours", 0, draw(st.sampled_from([1.0, 30.0, 500.0]))))
        feats.append((qid, "", "_intent", 0, float(draw(st.integers(-1, 4)))))
        gold = draw(st.lists(st.integers(0, n_m + 1), unique=True, min_size=1, max_size=3))
        qrels += [(qid, f"m{g}", draw(st.integers(1, 2))) for g in gold]
    schema = {"qid": pl.String, "memory_id": pl.String, "signal": pl.String, "rank": pl.Int32, "score": pl.Float64}
    table = pl.DataFrame(rows + feats, schema=schema, orient="row")
    table = table.filter(~((pl.col("signal") == "_intent") & (pl.col("score") < 0)))
    qrels_df = pl.DataFrame(qrels, schema={"qid": pl.String, "memory_id": pl.String, "relevance": pl.Int64}, orient="row")
    return table, qrels_df, [f"q{q}" for q in range(n_q + 1)]  # one question without candidates


configs = st.builds(
    lambda method, k, w, bonus, boost, sup, factor, gating, neighbour, decay, min_lift: FusionConfig(
        method=method, k=k, weights=dict(zip(SIGNALS, w)), coverage_bonus=bonus, recent_boost=boost,
        superseded=sup, demote_factor=factor, intent_gating=gating, neighbour_boost=neighbour,
        episode_decay=decay, neighbour_min_lift=min_lift),
    st.sampled_from(["rrf", "rrf", "weighted_sum", "dbsf", "combmnz"]),
    st.sampled_from([0.0, 1.0, 2.5, 60.0]),
    st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 1.0, 2.0])] * 3),
    st.sampled_from([0.0, 0.3]),
    st.sampled_from([1.0, 1.5, 0.5]),
    st.sampled_from(["demote", "hide", "keep"]),
    st.sampled_from([0.5, 0.0]),
    st.booleans(),
    st.sampled_from([0.0, 0.0, 0.3]),
    st.sampled_from([0.0, 0.0, 0.3]),  # episode decay (outside the batch domain: scored through fuse)
    st.sampled_from([-1.0, 0.05, 0.1]),  # the neighbour boost's minimum adjacency lift
)


def plain_metrics(table, qrels, questions, config, ks):
    run = fuse(table, FusionConfig(**{**config.__dict__, "top_k": max(ks)}))
    per_q = retrieval_metrics(run, qrels, ks=ks, metrics=("recall", "ndcg", "hit"))
    full = pl.DataFrame({"qid": sorted(questions)}).join(per_q, on="qid", how="left").fill_null(0.0)
    out = {c: full[c].to_numpy() for c in full.columns if c != "qid"}
    first = run.join(qrels.filter(pl.col("relevance") >= 1), on=["qid", "memory_id"]).group_by("qid").agg(pl.col("rank").min())
    first = pl.DataFrame({"qid": sorted(questions)}).join(first, on="qid", how="left")
    out[f"mrr@{max(ks)}"] = np.asarray([1.0 / r if r is not None else 0.0 for r in first["rank"].to_list()])
    return out


@settings(max_examples=150, deadline=None)
@given(tables(), st.lists(configs, min_size=1, max_size=6), st.sampled_from([(1, 3), (2, 5), (10,)]))
def test_batch_equals_fuse_and_metrics(data, cfgs, ks):
    table, qrels, questions = data
    scorer = BatchScorer(prepare(table), qrels, questions, ks=ks)
    got = scorer.evaluate(cfgs)
    for i, config in enumerate(cfgs):
        want = plain_metrics(table, qrels, questions, config, ks)
        for name in scorer.metrics:
            np.testing.assert_allclose(got[name][i], want[name], rtol=0, atol=1e-12, err_msg=f"{name} {config}")


def test_rerank_takes_the_single_path_with_the_same_answer():
    table = pl.DataFrame({"qid": ["q"] * 7, "memory_id": ["a", "b", "a", "c", "a", "b", "c"],
                          "signal": ["vector", "vector", "lexical", "lexical", "_cosine", "_cosine", "_cosine"],
                          "rank": [1, 2, 1, 2, 0, 0, 0], "score": [0.9, 0.8, 3.0, 2.0, 0.1, 0.2, 0.9]})
    qrels = pl.DataFrame({"qid": ["q"], "memory_id": ["c"], "relevance": [1]})
    rerank = FusionConfig(rerank_depth=3)
    assert not batchable(rerank) and batchable(FusionConfig())
    scorer = BatchScorer(prepare(table), qrels, ["q"], ks=(1, 2))
    got = scorer.evaluate([rerank, FusionConfig()])
    assert got["recall@1"][0, 0] == 1.0  # re-ordered by query cosine, c (0.9) comes first
    assert got["recall@1"][1, 0] == 0.0 and got["recall@2"][1, 0] == 0.0  # plain RRF: a, then b (ties on id)


def test_bad_cutoffs_are_named():
    table = pl.DataFrame({"qid": ["q"], "memory_id": ["a"], "signal": ["vector"], "rank": [1], "score": [1.0]})
    with pytest.raises(Exception, match="cutoffs"):
        BatchScorer(prepare(table), pl.DataFrame({"qid": ["q"], "memory_id": ["a"], "relevance": [1]}), ["q"], ks=(0,))


def test_a_boosted_neighbour_counts_and_a_list_less_gold_only_with_a_neighbour_boost():
    # reproduces a case hypothesis found: gold m1 is in no list, only a turn next to the hit m0
    table = pl.DataFrame({"qid": ["q"] * 5, "memory_id": ["m0", "m0", "m0", "m1", "m1"],
                          "signal": ["lexical", "_episode", "_turn", "_episode", "_turn"],
                          "rank": [1, 0, 0, 0, 0], "score": [1.0, 0.0, 0.0, 0.0, 1.0]})
    qrels = pl.DataFrame({"qid": ["q", "q"], "memory_id": ["m0", "m1"], "relevance": [1, 1]})
    scorer = BatchScorer(prepare(table), qrels, ["q"], ks=(3,))
    boosted = FusionConfig(weights={"lexical": 1.0}, neighbour_boost=0.3)
    got = scorer.evaluate([boosted, FusionConfig(weights={"lexical": 1.0})])
    assert got["recall@3"][:, 0].tolist() == [1.0, 0.5]


def test_a_sweep_names_what_keeps_it_off_the_fast_path_before_it_starts():
    from dataclasses import replace as _replace

    from lab.search.presets import preset
    from lab.tune.batch import exact_path_reasons
    from lab.tune.dimension import Dimension
    from lab.tune.spec import SweepSpec
    from lab.tune.sweep import _Sweeper

    assert exact_path_reasons(FusionConfig()) == []
    # a neighbour boost is on the batch path (every pair of a question compared)
    assert exact_path_reasons(FusionConfig(neighbour_boost=0.3, rerank_depth=20, episode_decay=0.1)) == [
        "fusion.rerank_depth 20", "fusion.episode_decay 0.1"]
    sweeper = _Sweeper.__new__(_Sweeper)  # the check reads only the spec and the base configuration
    sweeper.base = preset("lab")  # its own neighbour boost is batchable
    sweeper.spec = SweepSpec("s", "demo", (Dimension("fusion.k", (1.0, 5.0)),
                                           Dimension("fusion.neighbour_boost", (0.0, 0.3))))
    assert sweeper.exact_path() == []
    sweeper.spec = SweepSpec("s", "demo", (Dimension("fusion.episode_decay", (0.0, 0.1)),))
    assert sweeper.exact_path() == ["fusion.episode_decay swept over [0.0, 0.1]"]
    sweeper.base = _replace(preset("lab"), fusion=_replace(preset("lab").fusion, rerank_depth=20))
    assert sweeper.exact_path()[0] == "fusion.rerank_depth 20 (the base lab)"


def test_the_rules_read_one_setting_per_declared_name_and_one_feature_per_declared_feature():
    from lab.search.fusion import rules

    config = FusionConfig(coverage_bonus=0.3, neighbour_boost=0.2, superseded="hide", intent_gating=True)
    assert rules.settings_of(rules.lever_table([config]), 0) == rules.settings(config)
    assert len(rules.settings(config)) == len(rules.SETTINGS)
    table = np.arange(2.0 * len(rules.FEATURES)).reshape(len(rules.FEATURES), 2)
    assert rules.features_of(table, 1) == tuple(table[:, 1])


def test_the_compiled_kernels_are_cached_under_their_rules_source():
    # numba's cache checks only the kernel's own file: the rules' digest in its closure is part of the key
    from lab.assemble import routing
    from lab.search.fusion import rules
    from lab.tune import kernels, zone_kernel

    assert [c.cell_contents for c in kernels.gold_ranks.py_func.__closure__] == [kernels.source_digest(rules)]
    assert [c.cell_contents for c in zone_kernel.fill_zones.py_func.__closure__] == [kernels.source_digest(routing)]
