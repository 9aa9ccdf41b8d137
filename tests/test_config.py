from __future__ import annotations

import pytest

from lab.config import ChunkConfig, SaveConfig, from_dict, from_yaml, to_dict, to_json, to_yaml
from lab.errors import ValidationError


def test_save_config_round_trips_through_dict_json_and_yaml():
    config = SaveConfig(chunk=ChunkConfig(size=100, overlap=20))
    assert from_dict(SaveConfig, to_dict(config)) == config
    assert from_yaml(SaveConfig, to_yaml(config)) == config
    import json

    assert from_dict(SaveConfig, json.loads(to_json(config))) == config


def test_unknown_key_is_named_with_the_allowed_ones():
    with pytest.raises(ValidationError, match=r"chunk: unknown key\(s\) \['sise'\]; allowed: \['context_turns', 'overlap'"):
        from_dict(SaveConfig, {"chunk": {"sise": 3}})


def test_wrong_type_is_named():
    with pytest.raises(ValidationError, match="chunk.size: expected an integer"):
        from_dict(SaveConfig, {"chunk": {"size": "big"}})


@pytest.mark.parametrize("size,overlap", [(0, 0), (10, 10), (10, -1)])
def test_chunk_config_rejects_impossible_windows(size, overlap):
    with pytest.raises(ValidationError):
        ChunkConfig(size=size, overlap=overlap)


@pytest.mark.parametrize("data, message", [
    ({"fusion": {"weights": {"vector": float("nan")}}}, r"fusion.weights.vector must be a finite number >= 0, got nan"),
    ({"fusion": {"weights": {"lexical": float("inf")}}}, r"fusion.weights.lexical must be a finite number >= 0, got inf"),
    ({"fusion": {"weights": {"vector": -0.5}}}, r"fusion.weights.vector must be a finite number >= 0, got -0.5"),
    ({"fusion": {"k": float("nan")}}, r"fusion.k must be a finite number >= 0, got nan"),
    ({"fusion": {"weights": {"vector": 0, "lexical": 0}}}, r"every enabled signal \['vector', 'lexical'\] has weight 0"),
    ({"half_life_hours": 0}, r"half_life_hours must be a finite number > 0, got 0"),
    ({"half_life_hours": -5}, r"half_life_hours must be a finite number > 0"),
    ({"fusion": {"recent_boost": -1}}, r"fusion.recent_boost must be a finite number >= 0"),
    ({"fusion": {"rerank_depth": -3}}, r"fusion.rerank_depth must be a finite number >= 0, got -3"),
    ({"graph": {"decay": -0.5}}, r"graph.decay must be a finite number >= 0 and <= 1, got -0.5"),
    ({"graph": {"edge_weights": {"related_to": float("nan")}}}, r"graph.edge_weights.related_to must be a finite"),
])
def test_bad_search_values_are_refused_naming_field_value_and_range(data, message):
    from lab.config import SearchConfig, from_dict

    with pytest.raises(ValidationError, match=message):
        from_dict(SearchConfig, data)


def test_bad_assembly_values_are_refused():
    from lab.config import AssembleConfig

    with pytest.raises(ValidationError, match=r"assemble.critical_ratio must be a finite number >= 0 and <= 1, got nan"):
        AssembleConfig(critical_ratio=float("nan"))
    with pytest.raises(ValidationError, match=r"assemble.recent_hours must be a finite number >= 0, got nan"):
        AssembleConfig(recent_hours=float("nan"))
