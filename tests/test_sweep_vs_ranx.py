"""The ranx comparison on a small fixture: plain weighted RRF through ranx and through lab's batch
scorer agree to 1e-9 on every configuration, and the comparison does see a difference when the
two fuse different things (so the benchmark's check can fail)."""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
from sweep_vs_ranx import TOLERANCE, compare, plain_rrf  # noqa: E402

pytestmark = pytest.mark.slow  # ranx compiles its kernels on first use


def fixture(seed: int = 0, questions: int = 30, memories: int = 40, depth: int = 25):
    rng = np.random.default_rng(seed)
    rows, qrels = [], []
    for q in range(questions):
        qid = f"q{q:02d}"
        for signal in ("vector", "lexical"):
            picked = rng.choice(memories, size=depth, replace=False)
            for rank, m in enumerate(picked, start=1):
                rows.append((qid, f"m{m:03d}", signal, rank, float(depth - rank)))
        for m in rng.choice(memories, size=int(rng.integers(1, 4)), replace=False):
            qrels.append((qid, f"m{m:03d}", 1))
    cands = pl.DataFrame(rows, schema={"qid": pl.String, "memory_id": pl.String, "signal": pl.String,
                                       "rank": pl.Int64, "score": pl.Float64}, orient="row")
    return cands, pl.DataFrame(qrels, schema={"qid": pl.String, "memory_id": pl.String, "relevance": pl.Int64},
                               orient="row")


def test_plain_rrf_turns_every_other_feature_off():
    config = plain_rrf(5, 0.3, 0.7)
    f = config.fusion
    assert config.signals == ("vector", "lexical") and config.views == ()
    assert (config.analysis.temporal, config.analysis.entities) == ("off", False)
    assert (f.coverage_bonus, f.recent_boost, f.neighbour_boost, f.episode_decay, f.rerank_depth) == (0, 1, 0, 0, 0)
    assert (f.superseded, f.learned, f.intent_gating) == ("keep", None, False)
    assert {s: w for s, w in f.weights.items() if w} == {"vector": 0.3, "lexical": 0.7}


def test_lab_equals_ranx_on_plain_weighted_rrf():
    cands, qrels = fixture()
    grid = [(k, w) for k in (0.5, 2.5, 60.5) for w in (0.3, 0.55, 0.8)]
    got = compare(cands, qrels, grid)
    assert got["differing"] == 0 and got["max_difference"] <= TOLERANCE
    assert got["best_lab"] == got["best_ranx"]


def test_the_comparison_sees_a_difference_when_there_is_one(monkeypatch):
    import sweep_vs_ranx

    cands, qrels = fixture(seed=3)
    grid = [(k, w) for k in (0.5, 60.5) for w in (0.3, 0.8)]
    real = sweep_vs_ranx.plain_rrf
    # lab fusing with a coverage-style change ranx does not make: the check must report it
    monkeypatch.setattr(sweep_vs_ranx, "plain_rrf", lambda k, v, lx: replace(
        real(k, v, lx), fusion=replace(real(k, v, lx).fusion, weights={**real(k, v, lx).fusion.weights,
                                                                        "vector": v * 3})))
    got = sweep_vs_ranx.compare(cands, qrels, grid)
    assert got["differing"] > 0
