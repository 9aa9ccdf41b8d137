"""Query-time configuration (``SearchConfig``): the signals and views ranked, filters, the graph
and hop walks, query analysis and fusion (with an optional learned fuser)."""
from __future__ import annotations

from dataclasses import dataclass

from lab.config.names import DERIVED_FACTS, ENCODERS, VIEW_SIGNALS, VIEWS
from lab.config.reading import parse_time
from lab.errors import ValidationError
from lab.fields import check_declared, check_number, setting


# "bridge" is in no preset (the nested selection dropped it: decision 0008), so its weight is not
# among the defaults either; a configuration that enables it weighs it 1 unless it says
SIGNALS: tuple[str, ...] = ("vector", "lexical", "recency", "frequency", "graph", "entity", "temporal", "hop",
                            "bridge")
# every ranked list search can make: the signals, each view's vector and lexical lists, and each
# extra encoder's list (ENCODERS)
LISTS: tuple[str, ...] = (*SIGNALS, *(f"{s}@{v}" for v in VIEWS for s in VIEW_SIGNALS), *ENCODERS.values())


def _default_weights() -> dict[str, float]:
    return {"vector": 1.0, "lexical": 1.0, "recency": 0.0, "frequency": 0.0, "graph": 0.0,
            "entity": 0.0, "temporal": 0.0, "hop": 0.0}


def _default_edge_weights() -> dict[str, float]:
    return {"related_to": 1.0, "supersedes": 1.0, "contradicts": 0.5, "derived_from": 1.0, "part_of": 0.7}


@dataclass(frozen=True)
class FilterConfig:
    """Applied before ranking: only memories passing every filter can be candidates."""

    types: tuple[str, ...] = setting((), doc="only memories of these kinds")
    tags: tuple[str, ...] = setting((), doc="only memories with every one of these tags")
    since: str | None = setting(None, doc="ISO 8601, created at or after")
    until: str | None = setting(None, doc="ISO 8601, created before")
    valid_only: bool = setting(True, doc="leave out invalidated memories")

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            if getattr(self, name) is not None:
                parse_time(getattr(self, name), f"filters.{name}")


@dataclass(frozen=True)
class AbstainConfig:
    """When search says "nothing relevant is stored": the best candidate's cosine similarity to the
    query below ``threshold`` (a cosine of the store's embedding model, fitted on tune questions by
    ``lab eval --abstention``). None: never abstain (the evidence is still reported)."""

    threshold: float | None = setting(None, low=-1, high=1,
                                      doc="abstain when the best candidate's cosine is below this (none: never)")

    def __post_init__(self) -> None:
        check_declared(self, "abstain.")


@dataclass(frozen=True)
class RerankConfig:
    """A rerank server's stage after fusion: the fused top ``top_n`` of each query sent with its
    text to a Cohere/Jina/TEI-shaped ``/rerank`` route, and re-ordered by the scores it answers
    (``lab.search.rerank``). None: no such stage."""

    server: str | None = setting(None, doc="rerank:MODEL@BASE_URL or rerank:FILE.yaml (none: no rerank stage)")
    top_n: int = setting(20, low=1, high=1000, doc="fused results per query sent to the reranker")

    def __post_init__(self) -> None:
        check_declared(self, "rerank.")
        if self.server is not None and (not isinstance(self.server, str) or not self.server.startswith("rerank:")):
            raise ValidationError(f"rerank.server must be rerank:MODEL@BASE_URL or rerank:FILE.yaml, got {self.server!r}",
                                  field="rerank.server")


@dataclass(frozen=True)
class GraphConfig:
    """Breadth-first walk over typed edges from the top vector and lexical hits."""

    seeds: int = setting(5, low=0, doc="top hits of the vector list and of the lexical list walked from")
    max_depth: int = setting(2, low=0, doc="hops at most")
    decay: float = setting(0.5, low=0, high=1, doc="score kept per hop")
    edge_weights: dict[str, float] = setting(default_factory=_default_edge_weights, low=0, doc="weight per relation")

    def __post_init__(self) -> None:
        check_declared(self, "graph.")


@dataclass(frozen=True)
class HopConfig:
    """The second hop: the vector index searched again with the query moved toward its first hits
    (Rocchio feedback), so evidence that resembles the first answers more than the question (the
    other half of a multi-hop question) can rank."""

    seeds: int = setting(3, low=1, doc="top hits of the vector and lexical lists (RRF-merged) moved toward")
    mix: float = setting(0.5, low=0, high=1, doc="share of the hits' mean vector in the second query (0: the query alone)")

    def __post_init__(self) -> None:
        check_declared(self, "hop.")


@dataclass(frozen=True)
class AnalysisConfig:
    """Rule-based query analysis; each effect can be switched off to measure it."""

    temporal: str = setting("boost", choices=("off", "boost", "filter"),
                            doc="a question's time: off, boost (a 'temporal' signal) or filter (a hard window)")
    entities: bool = setting(True, doc="exact matches of named entities and codes as an 'entity' signal")

    def __post_init__(self) -> None:
        check_declared(self, "analysis.")


# the features a learned fuser reads per (query, memory) candidate, besides one rank and one
# presence feature per ranked list ("rrf:LIST", "in:LIST"); lab.search.fusion.learned computes them
LEARNED_BASE_FEATURES: tuple[str, ...] = ("base_rel", "base_log_rank", "neighbour", "cosine", "coverage",
                                          "superseded", "log_age")


@dataclass(frozen=True)
class LearnedFusion:
    """A logistic model over a candidate's fusion features, applied on top of the base fusion (the
    rest of FusionConfig): its probability of being relevant becomes the fused score. Trained from
    gold labels by ``lab learn`` (lab.tune.learn); features are standardised with ``mean``/``scale``
    and each contributes ``coef * (x - mean) / scale`` to the logit."""

    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float = 0.0
    trained_on: str = ""  # provenance: dataset, questions, regularisation

    def __post_init__(self) -> None:
        n = len(self.features)
        if n == 0:
            raise ValidationError("fusion.learned.features must name at least one feature",
                                  field="fusion.learned.features")
        for name in ("mean", "scale", "coef"):
            if len(getattr(self, name)) != n:
                raise ValidationError(f"fusion.learned.{name} has {len(getattr(self, name))} values for {n} features",
                                      field=f"fusion.learned.{name}")
        for i, feature in enumerate(self.features):
            kind, _, target = feature.partition(":")
            if not (feature in LEARNED_BASE_FEATURES or (kind in ("rrf", "in") and target in LISTS)):
                raise ValidationError(f"fusion.learned.features[{i}]: unknown feature {feature!r}; known: "
                                      f"{list(LEARNED_BASE_FEATURES)}, and rrf:LIST / in:LIST for a list of {list(LISTS)}",
                                      field=f"fusion.learned.features[{i}]")
            check_number(f"fusion.learned.mean[{i}]", self.mean[i])
            check_number(f"fusion.learned.scale[{i}]", self.scale[i], above=0)
            check_number(f"fusion.learned.coef[{i}]", self.coef[i])
        if len(set(self.features)) != n:
            raise ValidationError("fusion.learned.features repeats a feature", field="fusion.learned.features")
        check_number("fusion.learned.intercept", self.intercept)


@dataclass(frozen=True)
class FusionConfig:
    """Query-time parameters: everything here is applied to cached candidates, no re-search."""

    method: str = setting("rrf", doc="the fuser (`lab fusers`): rrf, combmnz, dbsf, minmax")
    k: float = setting(60.0, low=0, doc="the RRF constant")
    intent_gating: bool = setting(False, doc="scale signal weights by the query's intent (LMA-style)")
    weights: dict[str, float] = setting(default_factory=_default_weights, low=0, doc="weight per ranked list")
    coverage_bonus: float = setting(0.0, low=0, high=1, doc="fused * (1 + bonus * query-term coverage)")
    recent_boost: float = setting(1.0, low=0, doc="multiplier for memories younger than recent_hours")
    recent_hours: float = setting(24.0, low=0, doc="what recent_boost counts as recent")
    superseded: str = setting("demote", choices=("demote", "hide", "keep"), doc="what happens to a superseded memory")
    demote_factor: float = setting(0.5, low=0, high=1, doc="a demoted memory's score multiplier")
    rerank_depth: int = setting(0, low=0, doc="re-order the top n by query-memory cosine before the cut")
    # 0..1: a memory gains this share of the better fused score of the turns just before and after
    # it in its episode (metadata "episode"/"session"), so a question and its answer lift each other
    neighbour_boost: float = setting(0.0, low=0, high=1, doc="share of the better neighbouring turn's score")
    # where memories are independent events, adjacent ones are no more alike than random pairs and
    # lifting neighbours is noise: the boost waits for that evidence (lab.search.adjacency)
    neighbour_min_lift: float = setting(-1.0, low=-1, high=1, doc="the neighbour boost applies in namespaces whose "
                                        "adjacent memories are at least this much more alike (cosine) than random "
                                        "pairs; -1: everywhere")
    # 0..1: episode diversification; the n-th best candidate of an episode has its score multiplied
    # by (1 - decay) ** (n - 1), so a top k filled from one session makes room for others (evidence
    # spread over sessions, multi-hop). Candidates outside episodes are left as they are. With a
    # learned model it decays the model's probability; a cosine rerank (rerank_depth) re-orders
    # its top after it.
    episode_decay: float = setting(0.0, low=0, high=1, doc="score decay per earlier pick of the same episode")
    # a learned fuser on top of the above: its probability that a candidate is relevant replaces the
    # fused score (superseded demotion still applies); None: the base fusion's score ranks
    learned: LearnedFusion | None = setting(None, doc="a learned model on top of the fusion (`lab learn`)")
    top_k: int = setting(10, low=1, doc="results returned")

    def __post_init__(self) -> None:
        check_declared(self, "fusion.")
        bad = sorted(set(self.weights) - set(LISTS))
        if bad:
            raise ValidationError(f"fusion.weights: unknown signal(s) {bad}; known: {list(SIGNALS)}, "
                                  f"and per view {list(LISTS[len(SIGNALS):])}", field="fusion.weights")


@dataclass(frozen=True)
class SearchConfig:
    """A whole retrieval configuration; presets are named instances of it."""

    name: str = setting("custom", doc="the configuration's name")
    description: str = setting("", doc="what it is for")
    signals: tuple[str, ...] = setting(("vector", "lexical"), doc=f"the signals ranked, of {list(SIGNALS)}")
    # extra views ranked as lists of their own, "vector@plain", "lexical@derived"... (see VIEWS):
    # a view ranks those of vector and lexical that ``signals`` enables, weighted like signals
    views: tuple[str, ...] = setting((), doc=f"extra views ranked as lists of their own, of {list(VIEWS)}")
    # derived facts (memories with a derived_from edge): "results", ranked like any memory, or
    # "sources_only", never results themselves: they rank only through the derived view, which
    # credits each hit to its source, so a fact lifts its source without taking a slot beside it
    # (without the derived view in ``views``, "sources_only" leaves facts out of search altogether)
    derived_facts: str = setting("results", choices=DERIVED_FACTS, doc="how derived facts rank")
    # lists of extra encoders the store carries (values of ENCODERS: "vector@e5", "sparse@e5"),
    # fused like the signals' lists (weights by the same names)
    encoders: tuple[str, ...] = setting((), doc=f"extra encoders' lists ranked, of {list(ENCODERS.values())}")
    depth: int = setting(50, low=1, doc="candidates per signal")
    half_life_hours: float = setting(168.0, above=0, doc="the recency signal's half-life")
    reference_time: str | None = setting(None, doc="ISO 8601 'now'; none: the namespace's latest memory")
    filters: FilterConfig = setting(default_factory=FilterConfig, doc="what may be a candidate at all")
    graph: GraphConfig = setting(default_factory=GraphConfig, doc="the graph signal's walk")
    hop: HopConfig = setting(default_factory=HopConfig, doc="the hop signal's second query")
    analysis: AnalysisConfig = setting(default_factory=AnalysisConfig, doc="rule-based query analysis")
    fusion: FusionConfig = setting(default_factory=FusionConfig, doc="how the ranked lists are fused")
    abstain: AbstainConfig = setting(default_factory=AbstainConfig, doc="when to answer 'nothing relevant stored'")
    rerank: RerankConfig = setting(default_factory=RerankConfig, doc="a rerank server's stage after fusion")

    def __post_init__(self) -> None:
        check_declared(self)
        bad = sorted(set(self.signals) - set(SIGNALS))
        if bad:
            raise ValidationError(f"signals: unknown signal(s) {bad}; known: {list(SIGNALS)}", field="signals")
        bad = sorted(set(self.views) - set(VIEWS))
        if bad:
            raise ValidationError(f"views: unknown view(s) {bad}; known: {list(VIEWS)}", field="views")
        if len(set(self.views)) != len(self.views):
            raise ValidationError(f"views lists a view twice: {list(self.views)}", field="views")
        bad = sorted(set(self.encoders) - set(ENCODERS.values()))
        if bad:
            raise ValidationError(f"encoders: unknown encoder list(s) {bad}; known: {list(ENCODERS.values())}",
                                  field="encoders")
        if self.signals and all(self.fusion.weights.get(s, 1.0) == 0 for s in self.signals):
            raise ValidationError(f"fusion.weights: every enabled signal {list(self.signals)} has weight 0, "
                                  "so nothing could rank; give at least one a weight > 0", field="fusion.weights")
