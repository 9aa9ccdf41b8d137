"""One definition of each rule: the episode key (Python and polars agree), chunk ids, item text,
the signal registry, the cutoffs, and the one bootstrap (its interval covers at the stated rate)."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lab.config import SIGNALS
from lab.errors import ValidationError
from lab.eval.metrics import DEFAULT_KS, bootstrap_ci, bootstrap_cis
from lab.search.signal_registry import SIGNALS as REGISTRY, get_signal
from lab.store.records import chunk_id, chunk_index_hash, episode_expr, episode_of, item_text

episode_values = st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.text(max_size=8)
other_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
metadata = st.fixed_dictionaries({}, optional={"episode": episode_values, "session": episode_values,
                                               "other": other_values})


@settings(max_examples=200, deadline=None)
@given(st.lists(metadata, min_size=1, max_size=8))
def test_the_episode_rule_is_the_same_in_python_and_in_polars(metas):
    """Over every metadata a memory can be stored with (normalize_memory's own output)."""
    from datetime import datetime, timezone

    from lab.store.records import normalize_memory

    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    texts = [normalize_memory({"content": "x", "namespace": "n", "metadata": m}, now=now)["metadata"] for m in metas]
    table = pl.DataFrame({"metadata": texts}).select(episode_expr()).to_series().to_list()
    assert table == [episode_of(t) for t in texts]


@pytest.mark.parametrize("value", [1.5, [1], {"a": 1}])
def test_an_episode_key_must_be_a_string_or_an_integer(value):
    from datetime import datetime, timezone

    from lab.store.records import normalize_memory

    with pytest.raises(ValidationError, match=r"metadata.session' must be a string or an integer"):
        normalize_memory({"content": "x", "namespace": "n", "metadata": {"session": value}},
                         now=datetime(2026, 1, 1, tzinfo=timezone.utc))


def test_episode_else_session_and_null_counts_as_absent():
    assert episode_of('{"episode": "e1", "session": 3}') == "e1"
    assert episode_of('{"episode": null, "session": 3}') == "3"
    assert episode_of('{"session": 3}') == "3"
    assert episode_of('{"other": 1}') is None and episode_of("") is None and episode_of("not json") is None


def test_chunk_ids_survive_memory_ids_with_hashes():
    cid = chunk_id("team#42", "abcdef0123456789", 3)
    assert cid == "team#42#abcdef012345#3" and chunk_index_hash(cid) == "abcdef012345"


def test_updating_a_memory_whose_id_holds_a_hash_replaces_its_chunks_in_the_index(pipe):
    pipe.save("an old wombat sighting", namespace="n", id="note#1")
    pipe.save("something else entirely", namespace="n", id="other")
    assert pipe.search("wombat", "n", k=1, preset="bm25")[0].memory_id == "note#1"
    pipe.update("note#1", content="a new koala sighting")
    assert pipe.search("koala", "n", k=1, preset="bm25")[0].memory_id == "note#1"
    assert pipe.search("koala", "n", k=1, preset="vector")[0].memory_id == "note#1"
    assert all(h.memory_id != "note#1" for h in pipe.search("wombat", "n", preset="bm25"))
    idx = pipe.index("n")
    live = [c for c, m, alive in zip(idx.chunk_ids, idx.memory_of, idx.live) if m == "note#1" and alive]
    assert len(live) == 1 and chunk_index_hash(live[0]) == pipe.get("note#1")["index_hash"][:12]


def test_item_text():
    assert item_text("Billing", "it failed") == "Billing: it failed"
    assert item_text("", "it failed") == "it failed"


def test_every_declared_signal_is_registered_in_order():
    assert set(REGISTRY) == set(SIGNALS)
    order = list(REGISTRY)
    # the graph walk, the hop and a 'when' question's temporal list seed from the vector and
    # lexical lists: those must be made before them
    assert max(order.index("vector"), order.index("lexical")) < min(order.index(s) for s in ("graph", "hop", "temporal"))
    with pytest.raises(ValidationError, match=r"unknown signal 'nope'; known: \['vector'"):
        get_signal("nope")


def test_the_cutoffs_are_declared_once():
    from lab.cli.eval import DEFAULT_KS as CLI_KS
    from lab.eval.runner import EvalOptions

    assert tuple(CLI_KS) == DEFAULT_KS == EvalOptions().ks


def test_the_bootstrap_interval_covers_the_true_mean_at_the_stated_rate():
    """Bernoulli(0.3) samples of 200 questions: the 90% and 95% intervals must cover 0.3 in about
    90% and 95% of 400 independent samples (binomial sd about 1.5 and 1.1 points). One resample
    draw serves every sample, as it serves every metric of an evaluation."""
    rng = np.random.default_rng(7)
    for confidence, low, high in ((0.90, 0.85, 0.95), (0.95, 0.91, 0.985)):
        covered = 0
        for _ in range(400):
            sample = (rng.random(200) < 0.3).astype(float)
            _, lo, hi = bootstrap_ci(sample, n_resamples=1000, confidence=confidence)
            covered += lo <= 0.3 <= hi
        assert low <= covered / 400 <= high, (confidence, covered / 400)


def test_bootstrap_columns_equal_one_column_at_a_time_and_large_draws_stream():
    values = np.random.default_rng(1).random((300, 3))
    together = bootstrap_cis(values, n_resamples=500, seed=4)
    alone = [bootstrap_ci(values[:, j], n_resamples=500, seed=4) for j in range(3)]
    assert together == [pytest.approx(a, rel=1e-12) for a in alone]  # the same draws, summed in another order
    big = bootstrap_ci(values[:, 0], n_resamples=40_000, seed=4)  # 12M cells: drawn in blocks
    assert big[1] < big[0] < big[2]
    with pytest.raises(ValidationError, match="two-dimensional"):
        bootstrap_cis(np.zeros(3))


def test_metadata_with_non_finite_numbers_is_refused():
    from datetime import datetime, timezone

    from lab.store.records import normalize_memory

    with pytest.raises(ValidationError, match="metadata' is not JSON-serialisable"):
        normalize_memory({"content": "x", "namespace": "n", "metadata": {"score": float("inf")}},
                         now=datetime(2026, 1, 1, tzinfo=timezone.utc))


def test_the_budget_and_content_limits_are_declared_once():
    """The assembly config's budget bounds are the served faces' and the command line's; the
    store's content limit is the served faces'. A config error names its field."""
    import argparse

    from lab.cli.search import _check_before_loading
    from lab.config import AssembleConfig
    from lab.fields import rule
    from lab.serve import contract as C
    from lab.store.records import MAX_CONTENT_CHARS

    declared = rule(AssembleConfig, "budget")
    assert (declared.low, declared.high) == (1, 1_000_000)
    for low_or_high in (declared.low - 1, declared.high + 1):
        with pytest.raises(ValidationError, match="assemble.budget must be") as refused:
            AssembleConfig(budget=low_or_high)
        assert refused.value.field == "assemble.budget"
        with pytest.raises(ValidationError, match=f"--budget must be a finite number >= 1 and <= 1000000, "
                                                  f"got {low_or_high}"):
            _check_before_loading(argparse.Namespace(query="x", store="nowhere", k=None, candidates=None,
                                                     budget=low_or_high, neighbours=None))
    schema = C.ContextIn.model_json_schema()["properties"]["budget"]["anyOf"][0]
    assert (schema["minimum"], schema["maximum"]) == (declared.low, declared.high)
    assert C.MemoryIn.model_json_schema()["properties"]["content"]["maxLength"] == MAX_CONTENT_CHARS
