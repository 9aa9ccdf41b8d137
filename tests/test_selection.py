"""Honest selection: the permutation max-statistic against hand-computed cases, and a sweep that
reports its winner's corrected gain and tied set through `lab sweep` and `lab gate`."""
from __future__ import annotations

import json

import numpy as np
import pytest

from lab.errors import ValidationError
from lab.tune.selection import corrected_gain, describe, maxt_pvalues, tied_with_best


def test_maxt_matches_a_hand_enumeration_of_every_sign_flip():
    # two configurations, three questions, all 8 sign flips enumerated. Statistic: |sum d| / sqrt(sum d^2).
    # d1 = (1, 1, 1): observed sqrt(3). d2 = (1, 1, -1): observed 1/sqrt(3).
    # A flip's maximum reaches sqrt(3) when either column's flipped signs all agree: s = (+,+,+), (-,-,-)
    # for d1 and s = (+,+,-), (-,-,+) for d2: 4 of 8, so p1 = 0.5 (alone it would be 2/8 = 0.25);
    # every flip's maximum is >= 1/sqrt(3), so p2 = 1.
    d = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, -1.0]])
    assert maxt_pvalues(d).tolist() == [0.5, 1.0]
    assert maxt_pvalues(d[:, :1]).tolist() == [0.25]  # one configuration: no correction
    assert maxt_pvalues(np.zeros((3, 2))).tolist() == [1.0, 1.0]  # identical to the reference


def test_sampled_flips_are_seeded_and_never_zero():
    rng = np.random.default_rng(3)
    d = rng.normal(0.3, 1.0, size=(40, 5))
    p = maxt_pvalues(d, n_resamples=500, seed=1)
    assert p.tolist() == maxt_pvalues(d, n_resamples=500, seed=1).tolist()
    assert (p >= 1 / 501).all() and (p <= 1).all()
    with pytest.raises(ValidationError, match="NaN"):
        maxt_pvalues(np.array([[np.nan]]))


def test_the_winners_gain_is_corrected_for_every_configuration_compared():
    base = np.zeros(8)
    winner = np.array([1, 1, 1, 1, 1, 1, 0, 0], dtype=float)
    rivals = [np.roll(winner, i) * 0.9 for i in range(1, 6)]
    per_query = np.vstack([winner, *rivals])
    mask = np.ones(8, dtype=bool)
    gain = corrected_gain(per_query, base, 0, mask)
    assert gain["delta"] == pytest.approx(0.75) and gain["configurations"] == 6 and gain["questions"] == 8
    assert gain["p_corrected"] >= gain["p"]  # counting the comparisons never makes it more significant
    alone = corrected_gain(per_query[:1], base, 0, mask)
    assert alone["p_corrected"] == pytest.approx(1 / 2 ** 6 * 2)  # 8 of 256 flips: the six ones all agreeing, the two zeros either way


def test_tied_with_best_keeps_what_cannot_be_told_apart():
    n = 60
    best = np.ones(n)
    same = best.copy()
    near = best.copy()
    near[0] = 0  # one question worse: not distinguishable
    far = np.zeros(n)  # worse on every question: distinguishable
    tied, p = tied_with_best(np.vstack([best, same, near, far]), 0, np.ones(n, dtype=bool))
    assert tied == [0, 1, 2] and p[3] < 0.05


def test_describe_says_when_the_gain_is_not_significant():
    sel = {"objective": "recall@10", "base": "lab", "alpha": 0.05,
           "validation_gain": {"delta": 0.01, "p": 0.03, "p_corrected": 0.4, "configurations": 72, "questions": 300,
                               "significant": False, "alpha": 0.05},
           "tied_with_best": {"count": 2, "of": 72, "members": [{"trial": 4}, {"trial": 9}]}}
    lines = describe(sel)
    assert "corrected for 72 configurations compared, p 0.4000: NOT significant" in lines[0]
    assert "2 of 72 configurations (#4, #9;" in lines[1]


def test_a_sweep_reports_its_selection_and_the_gate_repeats_it(tmp_path):
    from test_tune import _gate, _gate_file, _sweep  # the demo sweep and gate of the tune tests (fake embedder)

    from lab.gate.run import report_table

    result = _sweep(tmp_path, "honest")
    sel = json.loads((result.folder / "selection.json").read_text())
    assert sel == json.loads(json.dumps(result.info["selection"], default=str))
    assert sel["configurations"] == 6 and sel["base"] == "lab"
    gain = sel["validation_gain"]
    assert gain["p_corrected"] >= gain["p"] and gain["questions"] > 0
    assert gain["delta"] == pytest.approx(result.best["validation/recall@10"] - base_recall(tmp_path, result), abs=1e-9)
    members = sel["tied_with_best"]["members"]
    assert members[0]["trial"] == result.best["trial"] and all(m["p_corrected"] >= 0.05 for m in members)
    gate = _gate(_gate_file(tmp_path, min={"recall@10": 0.1}), str(result.folder / "best.yaml"), tmp_path,
                 f"sqlite:///{tmp_path / 'mlflow.db'}")
    table = report_table(gate)
    assert "selection: against the base lab on validation" in table and "tied with the best on tune" in table
    assert ("note: the candidate's gain" in table) == (not gain["significant"])
    assert json.loads((gate.folder / "gate.json").read_text())["selection"] == sel


def base_recall(tmp_path, result) -> float:
    """The base preset's validation recall@10 computed apart from the sweep (`lab eval`'s path)."""
    import polars as pl

    from lab.embed.fake import FakeEmbedder
    from lab.eval.goldens import load_dataset
    from lab.eval.runner import evaluate
    from lab.eval.stores import eval_retriever
    from lab.search.presets import resolve

    dataset = load_dataset("demo")
    retriever = eval_retriever(dataset, root=tmp_path / "eval", embedder=FakeEmbedder())
    per_query = evaluate(retriever, dataset, resolve("lab")).per_query
    held = result.split.filter(pl.col("part") == "validation")["qid"].to_list()
    return float(per_query.filter(pl.col("qid").is_in(held))["recall@10"].mean())
