"""Named configurations reproducing the seed systems under one harness, plus lab's own default.

Each preset follows what its system's documents describe; where the harness cannot follow, the
description says what it approximates.
"""
from __future__ import annotations

from lab.config import (
    AnalysisConfig, FilterConfig, FusionConfig, SearchConfig, from_dict, load_config, to_dict,
)
from lab.errors import ValidationError
from lab.search.fusion import get_fuser

ALL_FIVE = ("vector", "lexical", "recency", "frequency", "graph")
MAIA_WEIGHTS = {"vector": 0.35, "lexical": 0.25, "recency": 0.20, "frequency": 0.10, "graph": 0.10}


def _w(**weights: float) -> dict[str, float]:
    base = {"vector": 0.0, "lexical": 0.0, "recency": 0.0, "frequency": 0.0, "graph": 0.0, "entity": 0.0, "temporal": 0.0,
            "hop": 0.0}
    base.update(weights)
    return base


PRESETS: dict[str, SearchConfig] = {
    "maia": SearchConfig(
        name="maia",
        description="MAIA as documented: five signals fused by weighted RRF (k=60; vector .35, text .25, "
        "recency .20, frequency .10, graph .10), 7-day half-life.",
        signals=ALL_FIVE, half_life_hours=168.0,
        fusion=FusionConfig(method="rrf", k=60.0, weights=_w(**MAIA_WEIGHTS)),
    ),
    "maia-code": SearchConfig(
        name="maia-code",
        description="MAIA as built: the same five weights on min-max normalised scores, summed.",
        signals=ALL_FIVE, half_life_hours=168.0,
        fusion=FusionConfig(method="weighted_sum", weights=_w(**MAIA_WEIGHTS)),
    ),
    "brainbridge": SearchConfig(
        name="brainbridge",
        description="BrainBridge: BM25 + vector by RRF k=60 with a lexical-coverage bonus, top 20 "
        "re-ranked to a final top 3 (its reranker is approximated by query-chunk cosine). The final "
        "top 3 caps recall at k > 3: that is the system's real behaviour. 350/150-token chunks with "
        "title/tags prepended are the store's defaults.",
        signals=("vector", "lexical"),
        fusion=FusionConfig(method="rrf", k=60.0, weights=_w(vector=1.0, lexical=1.0), coverage_bonus=0.25,
                            rerank_depth=20, top_k=3),
    ),
    "lma": SearchConfig(
        name="lma",
        description="LMA: weighted RRF k=60 over vector and full text, intent-gated (weights scaled by "
        "the rule-based intent of the query).",
        signals=("vector", "lexical"),
        fusion=FusionConfig(method="rrf", k=60.0, weights=_w(vector=0.6, lexical=0.4), intent_gating=True),
    ),
    "mie": SearchConfig(
        name="mie",
        description="MIE: vector search plus an exact-substring mode (the 'entity' signal); invalidated "
        "and superseded facts hidden. Its per-memory-type vector search is approximated by one vector "
        "list over all types.",
        signals=("vector", "entity"),
        analysis=AnalysisConfig(temporal="off", entities=True),
        filters=FilterConfig(valid_only=True),
        fusion=FusionConfig(method="rrf", k=60.0, weights=_w(vector=1.0, entity=1.0), superseded="hide"),
    ),
    "stackmemory": SearchConfig(
        name="stackmemory",
        description="StackMemory: 0.6 text / 0.4 vector weighted sum of normalised scores, x1.2 for "
        "items under 24 h old.",
        signals=("vector", "lexical"),
        fusion=FusionConfig(method="weighted_sum", weights=_w(vector=0.4, lexical=0.6), recent_boost=1.2,
                            recent_hours=24.0),
    ),
    "lab": SearchConfig(
        name="lab",
        description="lab's default, chosen by nested cross-validation over LoCoMo dev, SciFact train, the "
        "demo goldens, the LongMemEval-S dev half and LoCoMo with its turns shuffled (docs/decisions/0004, 0008): "
        "vector + BM25 by RRF k 2, over each memory with its episode context and plain (the 'plain' view's own "
        "lists; the two share the text's weight); a 'when' question helped by its first hits that hold a time "
        "expression, a named time window by the memories said or telling of then; adjacent turns lift each "
        "other where the namespace's adjacent memories are alike (a conversation, not independent notes); a "
        "query-term coverage bonus; superseded memories demoted.",
        signals=("vector", "lexical", "temporal"),
        views=("plain",),
        analysis=AnalysisConfig(temporal="boost", entities=False),
        fusion=FusionConfig(
            method="rrf", k=2.0, coverage_bonus=0.1, neighbour_boost=0.3, neighbour_min_lift=0.05,
            # each memory's text weight (1 for vector, 1 for BM25) split evenly between its text with
            # context and its plain text: a memory without context, ranked alike in both, weighs
            # against the temporal list as it would without the view
            weights={**_w(vector=0.5, lexical=0.5, temporal=1.0), "vector@plain": 0.5, "lexical@plain": 0.5},
        ),
    ),
}

# Baselines for the comparison tables: one signal alone, and plain RRF over vector + BM25.
PRESETS.update({
    "bm25": SearchConfig(name="bm25", description="baseline: BM25 alone", signals=("lexical",),
                         fusion=FusionConfig(weights=_w(lexical=1.0))),
    "vector": SearchConfig(name="vector", description="baseline: vector search alone", signals=("vector",),
                           fusion=FusionConfig(weights=_w(vector=1.0))),
    "rrf-k60": SearchConfig(name="rrf-k60", description="baseline: RRF k=60 over vector + BM25",
                            fusion=FusionConfig(k=60.0, weights=_w(vector=1.0, lexical=1.0))),
    "rrf-k2": SearchConfig(name="rrf-k2", description="baseline: RRF k=2 over vector + BM25",
                           fusion=FusionConfig(k=2.0, weights=_w(vector=1.0, lexical=1.0))),
})


def preset(name: str) -> SearchConfig:
    if name not in PRESETS:
        raise ValidationError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name]


def checked(config: SearchConfig, where: str) -> SearchConfig:
    """A configuration read from a file, checked against the registries (the fuser's name) before
    any work starts: the config layer cannot see the registries, so this is where a file's
    unknown fuser is caught, not after minutes of loading and indexing."""
    try:
        get_fuser(config.fusion.method)
    except ValidationError as exc:
        raise ValidationError(f"{where}: field 'fusion.method': {exc}", field="fusion.method") from None
    return config


def resolve(name_or_path: str | None) -> SearchConfig:
    """A preset name, or a YAML/JSON config file path; None gives the `lab` preset."""
    if name_or_path is None:
        return PRESETS["lab"]
    if name_or_path in PRESETS:
        return PRESETS[name_or_path]
    if name_or_path.endswith((".yaml", ".yml", ".json")):
        return checked(load_config(SearchConfig, name_or_path), name_or_path)
    raise ValidationError(f"unknown preset {name_or_path!r}; known: {sorted(PRESETS)} (or a .yaml/.json file)")


__all__ = ["PRESETS", "preset", "resolve", "to_dict", "from_dict"]
