"""Frozen configuration dataclasses that round-trip through dicts, JSON and YAML.

One face over the modules that hold them: ``names`` (the closed sets of names), ``reading``
(files, YAML, JSON, dicts, times), ``save`` (index time), ``search`` (query time), ``assemble``
(context assembly) and ``candidate`` (what a sweep picks and the gate judges). Import from here.
"""
from __future__ import annotations

# check_number and from_dict are lab.fields', imported from here by code that reads configs
from lab.fields import check_declared, check_number, from_dict, setting  # noqa: F401

from lab.config.names import (COMPARISON_FAMILY, CORRECTIONS, DEFAULT_KS, DEFAULT_MODEL, DERIVED_FACTS, ENCODERS, FAKE_MODEL,  # noqa: F401
                              INDEX_VIEWS, VIEW_SIGNALS, VIEWS)
from lab.config.reading import (YAML_ALIAS_NODES, from_yaml, load_config, parse_time, parse_yaml,  # noqa: F401
                                read_config_file, read_config_mapping, read_yaml, to_dict, to_json, to_yaml)
from lab.config.save import (BM25_METHODS, ChunkConfig, EmbedConfig, IndexConfig,  # noqa: F401
                             LexicalIndexConfig, SaveConfig, VectorIndexConfig)
from lab.config.search import (LEARNED_BASE_FEATURES, LISTS, SIGNALS, AbstainConfig, AnalysisConfig,  # noqa: F401
                               FilterConfig, FusionConfig, GraphConfig, HopConfig, LearnedFusion, RerankConfig,
                               SearchConfig)
from lab.config.assemble import ZONES, AssembleConfig  # noqa: F401
from lab.config.adapt import ADAPTER_KINDS, AdaptConfig, FinetuneConfig  # noqa: F401
from lab.config.candidate import Candidate, load_candidate  # noqa: F401
