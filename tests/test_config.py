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
