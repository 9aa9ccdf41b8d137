"""A sweep point maps to configurations through the declared config paths (lab.tune.params), the
same configurations the hand-written mapping per field made."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from lab.config import AssembleConfig, ChunkConfig, IndexConfig, SaveConfig
from lab.search.presets import resolve
from lab.tune.params import LEXICAL_DIMS, PARAMS, apply, assemble_config, save_config, search_config


def hand_search(base, point):
    """The mapping as it was written by hand, field by field (the reference)."""
    fusion, weights, changes = base.fusion, dict(base.fusion.weights), {}
    for name, value in point.items():
        if name.startswith("fusion.weights."):
            weights[name.rsplit(".", 1)[1]] = float(value)
        elif name.startswith("fusion."):
            changes[name.split(".", 1)[1]] = value
    depth = point.get("index.depth")
    return replace(base, fusion=replace(fusion, weights=weights, **changes),
                   **({"depth": int(depth)} if depth is not None else {}))


def hand_save(point):
    default = ChunkConfig()
    chunk = ChunkConfig(size=int(point.get("index.chunk_size", default.size)),
                        overlap=int(point.get("index.chunk_overlap", default.overlap)),
                        context_turns=int(point.get("index.context_turns", default.context_turns)),
                        time_in_text=bool(point.get("index.time_in_text", default.time_in_text)))
    index = IndexConfig()
    if "index.ef_search" in point:
        index = replace(index, vector=replace(index.vector, ef_search=int(point["index.ef_search"])))
    lexical = {field: point[name] for name, (field, _) in LEXICAL_DIMS.items() if name in point}
    if lexical:
        index = replace(index, lexical=replace(index.lexical, **lexical))
    return SaveConfig(chunk=chunk, index=index)


points = st.fixed_dictionaries({}, optional={
    "fusion.k": st.sampled_from([0.0, 2.0, 60.0]), "fusion.weights.vector": st.sampled_from([0.5, 1.0, 1.5]),
    "fusion.weights.lexical@plain": st.sampled_from([0.0, 0.7]), "fusion.neighbour_boost": st.sampled_from([0.0, 0.3]),
    "fusion.method": st.sampled_from(["rrf", "dbsf"]), "index.depth": st.sampled_from([20, 50]),
    "index.context_turns": st.sampled_from([0, 2]), "index.time_in_text": st.booleans(),
    "index.chunk_size": st.sampled_from([256, 350]), "index.ef_search": st.sampled_from([50, 200]),
    "index.bm25_k1": st.sampled_from([0.9, 1.2]), "index.bm25_b": st.sampled_from([0.4, 0.75]),
    "index.stemmer": st.sampled_from(["english", "none"]),
})


@settings(max_examples=80, deadline=None)
@given(points)
def test_a_point_maps_as_the_hand_written_mapping_did(point):
    base = resolve("lab")
    assert search_config(base, point) == hand_search(base, point)
    assert save_config(point) == hand_save(point)


def test_assembly_ratios_leave_middle_the_rest_and_bad_values_are_refused():
    got = assemble_config(AssembleConfig(), {"assemble.critical_ratio": 0.3, "assemble.recency_ratio": 0.2,
                                             "assemble.budget": 900})
    assert (got.critical_ratio, got.middle_ratio, got.recency_ratio, got.budget) == (0.3, 0.5, 0.2, 900)
    with pytest.raises(ValueError):
        assemble_config(AssembleConfig(), {"assemble.critical_ratio": 0.9, "assemble.recency_ratio": 0.5})


def test_each_parameter_names_a_field_that_exists():
    configs = {"search": resolve("lab"), "save": SaveConfig(), "assemble": AssembleConfig()}
    for param in PARAMS.values():
        target, _, path = param.path.partition(".")
        obj = configs[target]
        for part in path.split(".")[:-1]:
            obj = getattr(obj, part)
        last = path.rsplit(".", 1)[-1]
        assert isinstance(obj, dict) or hasattr(obj, last), param  # a dict field (weights) takes any key
    assert apply(SaveConfig(), {"index.lexical.b": 0.3}).index.lexical.b == 0.3


def test_the_encoders_a_store_carries_are_a_sweep_dimension_that_ranks_their_lists():
    from lab.errors import ValidationError
    from lab.tune.params import names, table_point
    from lab.tune.spec import parse_spec

    spec = parse_spec({"name": "m", "dataset": "demo", "space": {"index.models": [[], ["e5"], ["e5", "e5-sparse"]]}})
    (dim,) = spec.space
    assert dim.values == ((), ("e5",), ("e5", "e5-sparse")) and dim.stage == "index"
    point = {"index.models": ("e5", "e5-sparse"), "fusion.k": 10}
    assert save_config(point).index.models == ("e5", "e5-sparse")
    assert search_config(resolve("lab"), point).encoders == ("vector@e5", "sparse@e5")
    # a point read back from the results table (names joined by "+") maps to the same configurations
    row = table_point(point)
    assert row["index.models"] == "e5+e5-sparse" and names(row["index.models"]) == ("e5", "e5-sparse")
    assert search_config(resolve("lab"), row) == search_config(resolve("lab"), point)
    assert save_config({"index.models": ""}).index.models == ()
    # a point naming the lists itself keeps them
    assert search_config(resolve("lab"), {"index.models": ("e5",), "encoders": ()}).encoders == ()
    with pytest.raises(ValidationError, match=r"space.index.models: each value is a list of names from \['e5'"):
        parse_spec({"name": "m", "dataset": "demo", "space": {"index.models": [["bge"]]}})
