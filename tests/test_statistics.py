"""Declared statistics (issue 61 #4): the correction (maxT, Holm, Benjamini-Hochberg, none) over a
family fixed by a flag, not by the metrics shown; McNemar's exact test for binary metrics; paired
effect sizes with CIs; a small-n warning; and the same choices in the gate's non-regression checks."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from scipy.stats import binomtest, false_discovery_control

from lab.config import SearchConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.eval.comparison import compare_many
from lab.eval.goldens import load_golden
from lab.eval.multiple import benjamini_hochberg, holm
from lab.eval.paired import MAX_CI_WIDTH, effect_size, mcnemar, small_n
from lab.eval.report import write_run
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_retriever

ROOT = Path(__file__).resolve().parent.parent


def test_holm_and_benjamini_hochberg_by_hand_and_against_scipy():
    p = np.array([0.01, 0.04, 0.03, 0.005])
    # Holm: sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04, then running maximum
    assert holm(p).tolist() == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # BH: sorted times 4/rank = 0.02, 0.02, 0.04, 0.04, then running minimum from the top
    assert benjamini_hochberg(p).tolist() == pytest.approx([0.02, 0.04, 0.04, 0.02])
    rng = np.random.default_rng(5)
    for _ in range(20):
        q = rng.random(rng.integers(1, 30)) ** 3
        assert benjamini_hochberg(q) == pytest.approx(false_discovery_control(q, method="bh"))
        assert (holm(q) >= q).all() and (holm(q) <= 1).all()


def test_mcnemar_counts_only_the_disagreements_and_is_the_exact_binomial():
    a = np.array([1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1])
    b = np.array([1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
    got = mcnemar(a, b)
    assert (got["only_a"], got["only_b"]) == (1, 9)
    assert got["p"] == pytest.approx(2 * 11 / 1024)  # 2 * P(X <= 1), X ~ Binomial(10, 1/2)
    assert got["p"] == pytest.approx(binomtest(9, 10, 0.5).pvalue)
    assert mcnemar(a, a)["p"] == 1.0


def test_effect_size_is_cohens_dz_with_a_bootstrap_interval_around_it():
    d = np.random.default_rng(1).normal(0.3, 1.0, 400)
    got = effect_size(d)
    assert got["d_z"] == pytest.approx(d.mean() / d.std(ddof=1), abs=1e-4)
    assert got["low"] < got["d_z"] < got["high"] and got["high"] - got["low"] < 0.3
    assert effect_size(np.zeros(50)) == {"d_z": None, "low": None, "high": None}
    one = np.zeros(120)
    one[7] = 1.0  # one question of 120 differs: most resamples hold no difference, so no interval
    assert effect_size(one)["d_z"] == pytest.approx(one.mean() / one.std(ddof=1), abs=1e-4)
    assert effect_size(one)["low"] is None


def test_small_n_names_the_widest_figure_and_holds_a_tight_one():
    assert small_n({"recall@10": (0.78, 0.83)}, 997) is None
    loose = small_n({"recall@10": (0.47, 0.64), "ndcg@10": (0.34, 0.47)}, 120)
    assert loose.startswith("120 questions hold these figures to +/-0.085") and "recall@10's 95% CI" in loose
    assert f"over the {MAX_CI_WIDTH:g}" in loose
    assert small_n({"recall@10": (0.9, 0.95)}, 12).startswith("12 questions (fewer than 30) cannot hold a figure")


def _runs() -> dict[str, pl.DataFrame]:
    rng = np.random.default_rng(7)
    base = rng.random(300)
    out = {}
    for name, shift in (("a", 0.0), ("b", 0.04), ("c", -0.02)):
        values = np.clip(base + shift + rng.normal(0, 0.1, 300), 0, 1)
        out[name] = pl.DataFrame({"qid": [f"q{i}" for i in range(300)], "recall@10": values,
                                  "ndcg@10": values * 0.8, "hit@10": (values > 0.5).astype(float)})
    return out


@pytest.mark.parametrize("correction", ["maxT", "holm", "bh", "none"])
def test_the_family_not_the_display_fixes_the_correction(correction):
    runs = _runs()
    family = ["recall@10", "ndcg@10", "hit@10"]
    one = compare_many(runs, ["recall@10"], correction=correction, family=family)
    all_ = compare_many(runs, family, correction=correction, family=family)
    assert one.family_size == all_.family_size == 6
    for run in ("b", "c"):
        assert one.changes[run]["recall@10"]["p_corrected"] == all_.changes[run]["recall@10"]["p_corrected"]
    raw = np.array([all_.changes[r][m]["p"] for r in ("b", "c") for m in family])
    corrected = np.array([all_.changes[r][m]["p_corrected"] for r in ("b", "c") for m in family])
    expected = {"holm": holm(raw), "bh": benjamini_hochberg(raw), "none": raw}.get(correction)
    if expected is not None:
        assert corrected == pytest.approx(expected)
    else:
        assert (corrected >= raw - 0.02).all()  # maxT: never far below the comparison's own test
    hit = all_.changes["b"]["hit@10"]
    assert hit["test"] == "McNemar exact" and hit["p"] == hit["mcnemar"]["p"]
    assert hit["better"] == hit["mcnemar"]["only_b"] and hit["worse"] == hit["mcnemar"]["only_a"]
    assert all_.changes["b"]["recall@10"]["test"] == "randomization"
    # a smaller family corrects less (Holm, maxT) or alike, never more
    if correction in ("holm", "maxT"):
        alone = compare_many(runs, ["recall@10"], correction=correction, family=["recall@10"])
        assert alone.changes["b"]["recall@10"]["p_corrected"] <= one.changes["b"]["recall@10"]["p_corrected"] + 1e-9


def test_a_shown_metric_outside_the_family_and_a_family_a_run_lacks_are_refused():
    runs = _runs()
    with pytest.raises(ValidationError, match=r"metric\(s\) \['hit@10'\] are shown but not in the declared family"):
        compare_many(runs, ["hit@10"], family=["recall@10"])
    with pytest.raises(ValidationError, match=r"run 'a' has no column\(s\) \['mrr'\] of the family"):
        compare_many(runs, ["recall@10"], family=["recall@10", "mrr"])
    with pytest.raises(ValidationError, match="--correction must be one of maxT, holm, bh, none, got 'bonferroni'"):
        compare_many(runs, ["recall@10"], correction="bonferroni")


@pytest.fixture
def demo_runs(tmp_path):
    """Two real run folders on the demo goldens: bm25 against vector and bm25 fused."""
    d = load_golden(ROOT / "goldens" / "demo.yaml")
    retriever = eval_retriever(d, embedder=FakeEmbedder(), root=tmp_path / "eval")
    try:
        out = {}
        for name, signals in (("bm25", ("lexical",)), ("hybrid", ("vector", "lexical"))):
            result = evaluate(retriever, d, SearchConfig(name=name, signals=signals), EvalOptions(budget=0))
            out[name] = (result, write_run(result, d.qrels, tmp_path / name))
        yield out
    finally:
        retriever.close()


def _lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=180, cwd=ROOT)


def test_lab_compare_states_its_family_and_correction_on_real_runs(demo_runs):
    a, b = (str(demo_runs[n][1]) for n in ("bm25", "hybrid"))
    got = json.loads(_lab("compare", a, b, "--correction", "bh", "--family", "recall@10", "hit@10", "mrr", "--json").stdout)
    assert got["correction"] == "bh" and got["family"] == ["recall@10", "hit@10", "mrr"] and got["family_size"] == 3
    changes = got["changes"]["hybrid"]
    raw = np.array([changes[m]["p"] for m in got["family"]])
    assert [changes[m]["p_corrected"] for m in got["family"]] == pytest.approx(benjamini_hochberg(raw))
    pq = {n: demo_runs[n][0].per_query.sort("qid") for n in demo_runs}
    only_b = int(((pq["hybrid"]["hit@10"] > 0) & (pq["bm25"]["hit@10"] == 0)).sum())
    assert changes["hit@10"]["mcnemar"]["only_b"] == only_b and changes["hit@10"]["test"] == "McNemar exact"
    assert changes["recall@10"]["effect"]["d_z"] is not None
    # the two-run text: one line per family metric, the test, the corrected p, the effect size, one small-n line
    text = _lab("compare", a, b, "--correction", "holm")
    assert text.returncode == 0, text.stderr
    assert "p corr: Holm's step-down (family-wise error) over a declared family of 6 comparisons" in text.stdout
    assert "McNemar exact (" in text.stdout and "d_z [95% CI]" in text.stdout
    assert sum(line.startswith("warning: 120 questions hold these figures") for line in text.stdout.splitlines()) == 1
    # showing fewer metrics leaves the corrected p of those shown as it was
    one = json.loads(_lab("compare", a, b, "--metric", "recall@10", "--json").stdout)
    six = json.loads(_lab("compare", a, b, "--json").stdout)
    assert one["changes"]["hybrid"]["recall@10"]["p_corrected"] == six["changes"]["hybrid"]["recall@10"]["p_corrected"]
    refused = _lab("compare", a, b, "--metric", "precision@10", "--family", "recall@10")
    assert refused.returncode != 0 and "['precision@10'] are shown but not in the declared family" in refused.stderr
    bad = _lab("compare", a, b, "--correction", "bonferroni")
    assert bad.returncode != 0 and "--correction: invalid choice: 'bonferroni'" in bad.stderr


def test_an_evaluation_on_too_few_questions_says_so_in_its_metrics_and_report(demo_runs):
    result, folder = demo_runs["bm25"]
    said = result.metrics["small_n"]
    assert len(said) == 1 and said[0].startswith(f"{result.metrics['questions']} questions hold these figures")
    assert json.loads((folder / "metrics.json").read_text())["small_n"] == said
    report = (folder / "report.md").read_text()
    assert "## Warnings" in report and f"- {said[0]}" in report


@pytest.mark.parametrize("correction", ["none", "holm"])
def test_the_gates_non_regression_checks_take_the_declared_correction(demo_runs, correction):
    from lab.gate.checks import Suite, suite_checks

    champion, candidate = demo_runs["hybrid"][0], demo_runs["bm25"][0]
    suite = Suite("demo", "demo", non_regression=("recall@10", "ndcg@10", "hit@10"))
    checks = suite_checks(suite, candidate, None, SimpleNamespace(per_query=champion.per_query), 0.05, 0, correction)
    paired = compare_many({"champion": champion.per_query, "candidate": candidate.per_query},
                          list(suite.non_regression), "champion", correction=correction).changes["candidate"]
    for check in checks:
        if not check.name.startswith("non-regression"):
            continue
        metric = check.name.split()[-1]
        ch = paired[metric]
        assert check.passed == (not (ch["delta"] < 0 and ch["p_corrected"] < 0.05)), check
        assert (f"corrected ({correction}, 3 metrics)" in check.note) == (correction != "none")
    assert "McNemar exact" in next(c.note for c in checks if c.name == "non-regression hit@10")


def test_a_gate_file_with_an_unknown_correction_is_refused_naming_the_setting(tmp_path):
    from lab.gate.checks import load_gate

    path = tmp_path / "gate.yaml"
    path.write_text("correction: bonferroni\nsuites:\n  demo: {dataset: demo}\n")
    with pytest.raises(ValidationError, match=r"gate.yaml: correction must be one of maxT, holm, bh, none, got 'bonferroni'"):
        load_gate(path)
    path.write_text("correction: holm\nsuites:\n  demo: {dataset: demo}\n")
    assert load_gate(path).correction == "holm"
