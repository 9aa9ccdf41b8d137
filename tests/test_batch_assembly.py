"""The sweep's batch assembler is held equal to `assemble` + the context metrics, per (configuration, question)."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
from hypothesis import given, settings, strategies as st

from lab.assemble import AssembleConfig, Item, assemble
from lab.eval.context import context_row
from lab.tune.assembly import BatchAssembler

T0 = datetime(2024, 5, 1, 12, tzinfo=timezone.utc)
# texts: near-duplicates of each other, short ones (one shingle), and one longer than small budgets
TEXTS = ["we went hiking in the hills on sunday", "we went hiking in the hills on sunday!",
         "We went hiking in the hills on Sunday morning", "yes", "yes!", "the cat sat on the mat today",
         "a completely different sentence about painting and music lessons", " ".join(["long"] * 120)]


@st.composite
def questions(draw):
    out, gold = [], {}
    for q in range(draw(st.integers(1, 4))):
        n = draw(st.integers(0, 9))
        items = []
        for m in draw(st.lists(st.integers(0, 11), min_size=n, max_size=n, unique=True)):
            items.append(Item(
                f"m{m}", draw(st.sampled_from(TEXTS)), draw(st.sampled_from([0.0, 0.2, 0.5, 0.5, 0.8, 1.0])),
                draw(st.sampled_from([None, T0, T0 - timedelta(hours=5), T0 - timedelta(hours=30), T0 + timedelta(hours=1)])),
                draw(st.sampled_from(["semantic", "semantic", "episodic", "working", "anchor"])),
                draw(st.booleans())))
        ref = draw(st.sampled_from([None, T0, "2024-05-02T00:00:00+00:00"]))
        out.append((f"q{q}", items, ref))
        gold[f"q{q}"] = {f"m{g}" for g in draw(st.lists(st.integers(0, 13), max_size=3))}
    return out, gold


configs = st.builds(
    lambda budget, ratios, ct, rt, hours, oversize, dedupe, ref: AssembleConfig(
        budget=budget, critical_ratio=ratios[0], middle_ratio=round(1 - ratios[0] - ratios[1], 10),
        recency_ratio=ratios[1], critical_threshold=ct, recency_threshold=rt, recent_hours=hours,
        oversize=oversize, dedupe_threshold=dedupe, reference_time=ref),
    st.sampled_from([1, 12, 30, 60, 120, 400]), st.sampled_from([(0.15, 0.2), (0.5, 0.0), (0.0, 0.5), (1.0, 0.0)]),
    st.sampled_from([0.0, 0.5, 0.7, 1.0]), st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([0.0, 6.0, 24.0, 1e4]),
    st.sampled_from(["truncate", "skip"]), st.sampled_from([0.5, 0.9, 1.0]),
    st.sampled_from([None, None, "2024-05-01T10:00:00+00:00"]))


@settings(max_examples=300, deadline=None)
@given(questions(), st.lists(configs, min_size=1, max_size=4), st.sampled_from([None, "2024-05-01T18:00:00+00:00"]))
def test_batch_assembler_equals_assemble(qs, cfgs, fixed):
    questions_, gold = qs
    batch = BatchAssembler(questions_, gold, fixed_reference=fixed)
    got = batch.evaluate(cfgs)
    for c, cfg in enumerate(cfgs):
        for q, (qid, items, ref) in enumerate(questions_):
            ctx = assemble(items, cfg, reference_time=fixed or cfg.reference_time or ref)
            _, recall, critical, first, used = context_row(qid, ctx, gold[qid])
            assert got["context_recall"][c, q] == recall, (c, q)
            assert got["context_gold_critical"][c, q] == critical, (c, q)
            assert (np.isnan(got["context_first_gold"][c, q]) if first is None
                    else got["context_first_gold"][c, q] == first), (c, q, first, got["context_first_gold"][c, q])
            assert got["context_tokens"][c, q] == used, (c, q)


def test_near_duplicates_and_oversize_are_handled_not_ignored():
    long = " ".join(["word"] * 200)
    items = [Item("a", TEXTS[0], 1.0, T0), Item("b", TEXTS[1], 0.9, T0), Item("c", long, 0.8, T0)]
    batch = BatchAssembler([("q", items, T0)], {"q": {"b", "c"}})
    # b near-duplicates a (dropped); c is longer than the budget: truncated into it by assemble
    got = batch.evaluate([AssembleConfig(budget=100), AssembleConfig(budget=100, oversize="skip")])
    assert got["context_recall"].tolist() == [[0.5], [0.0]]
    assert batch.duplicates(0.9)[1].size == 2  # a <-> b, recorded both ways
