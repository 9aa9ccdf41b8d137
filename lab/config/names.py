"""The closed sets of names configurations choose from (views, encoders, the default models and
cutoffs), declared once and imported by the configs and by the code that reads them."""
from __future__ import annotations

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# the cutoffs every evaluation reports unless told otherwise (CLI, runner and metrics share them)
DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 20, 50, 100)
# the multiple-comparison corrections `lab compare`, `lab eval --system` and the gate take
# (lab.eval.multiple), and the metrics a comparison's correction counts unless --family says
CORRECTIONS: tuple[str, ...] = ("maxT", "holm", "bh", "none")
COMPARISON_FAMILY: tuple[str, ...] = ("recall@5", "recall@10", "ndcg@10", "mrr", "hit@10", "recall@100")
FAKE_MODEL = "fake-hash-256"
# Extra ways of indexing a memory (ChunkConfig.views), each its own vector and lexical index.
INDEX_VIEWS: tuple[str, ...] = ("plain",)
# Every view search can rank as separate lists (SearchConfig.views): the index-time ones, and
# "derived", a query-time view ranking derived facts (memories with a derived_from edge) and
# crediting each hit to the memory it was derived from.
VIEWS: tuple[str, ...] = (*INDEX_VIEWS, "derived")
DERIVED_FACTS: tuple[str, ...] = ("results", "sources_only")  # SearchConfig.derived_facts
VIEW_SIGNALS: tuple[str, ...] = ("vector", "lexical")  # the signals a view ranks
# Extra encoders a store may carry (IndexConfig.models, by model alias; lab.embed.registry knows
# the models), and the ranked list each one makes (SearchConfig.encoders)
ENCODERS: dict[str, str] = {"e5": "vector@e5", "e5-sparse": "sparse@e5", "minilm": "vector@minilm"}
