"""Frozen configuration dataclasses that round-trip through dicts, JSON and YAML."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from lab.errors import NotFoundError, ValidationError
# check_number and from_dict are lab.fields', imported from here by code that reads configs
from lab.fields import check_declared, check_number, from_dict, setting  # noqa: F401

T = TypeVar("T")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# the cutoffs every evaluation reports unless told otherwise (CLI, runner and metrics share them)
DEFAULT_KS: tuple[int, ...] = (1, 5, 10, 20, 50, 100)
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


def parse_time(value: Any, field: str) -> datetime:
    """ISO 8601 string or datetime -> aware UTC datetime (naive values are taken as UTC)."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, str):
        text = value.strip()
        if text.endswith("Z") or text.endswith("z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            raise ValidationError(
                f"{field}: {value!r} is not an ISO 8601 date-time (e.g. 2026-01-14T09:32:00Z)", field=field
            ) from None
    else:
        raise ValidationError(f"{field}: expected an ISO 8601 string, got {type(value).__name__}", field=field)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.astimezone(timezone.utc)


@dataclass(frozen=True)
class ChunkConfig:
    """Token windows over a memory's content; title and tags are prepended to every chunk.

    Index-time levers (each changes what is embedded and indexed, never what is returned):
    ``context_turns`` prepends up to that many earlier memories of the same episode (metadata
    "episode", else "session"; by time) to every chunk, so a reply like "yes, last week" is indexed
    with the question it answers. Only earlier memories are used, so a memory saved alone later
    is indexed exactly as it would be in a batch. ``time_in_text`` prepends the memory's date
    ("8 May 2023"), so a query naming a month or a year can match it.

    ``context_turns`` defaults to 2 (decision record in docs/decisions/, figures in the docs'
    results page); it changes nothing for memories without an episode.

    ``views`` indexes a memory again, once per named view, into indexes of its own, so search
    can rank each view as separate vector and lexical lists (``SearchConfig.views``). The one
    index-time view is ``plain``: the memory without the index-time context above. The
    contextual view finds a reply by the question it answers; the plain view keeps a turn's own
    words from being drowned by its neighbours'. Only memories that have index-time context get
    a second chunk (one more embedding each; identical texts are embedded once): for the others
    the plain text is the main one, and search reads their plain-view ranks from the main lists.
    A store of memories without episodes (and without ``time_in_text``) therefore pays nothing
    for the view, at index or at query time. With no index-time context configured at all
    (``context_turns`` 0, ``time_in_text`` off) nothing is indexed for it (``indexed_views``), and
    search ranks the main lists in the view's place.

    ``views`` defaults to ``("plain",)``: under leave-one-conversation-out cross-validation on
    LoCoMo dev, its lists (with the neighbour boost) lift ``lab``'s held-out recall@10 on every
    conversation (benchmarks/quality_cv.py).
    """

    size: int = setting(350, low=1, doc="tokens per chunk")
    overlap: int = setting(150, low=0, doc="tokens shared by consecutive chunks (< size)")
    prepend_title_tags: bool = setting(True, doc="prepend the title and tags to every chunk")
    context_turns: int = setting(2, low=0, high=20, doc="earlier turns of the episode indexed with each memory")
    time_in_text: bool = setting(False, doc="index each memory with its date")
    views: tuple[str, ...] = setting(("plain",), doc=f"extra index-time views, of {list(INDEX_VIEWS)}")

    def __post_init__(self) -> None:
        check_declared(self, "chunk.")
        if self.overlap >= self.size:
            raise ValidationError(f"chunk.overlap must be >= 0 and < chunk.size ({self.size}), got {self.overlap}",
                                  field="chunk.overlap")
        bad = sorted(set(self.views) - set(INDEX_VIEWS))
        if bad:
            raise ValidationError(f"chunk.views: unknown view(s) {bad}; index-time views: {list(INDEX_VIEWS)}",
                                  field="chunk.views")
        if len(set(self.views)) != len(self.views):
            raise ValidationError(f"chunk.views lists a view twice: {list(self.views)}", field="chunk.views")

    @property
    def indexed_views(self) -> tuple[str, ...]:
        """The extra views a store with this configuration declares: none without index-time
        context (the plain view would be the main one)."""
        return self.views if (self.context_turns or self.time_in_text) else ()


@dataclass(frozen=True)
class EmbedConfig:
    """Which embedder a store uses; the model id is recorded in the store and checked on open."""

    model: str = setting(DEFAULT_MODEL, doc="the store's embedding model (`lab models`)")
    batch_size: int = setting(64, low=1, doc="texts per model call")
    cache: bool = setting(True, doc="reuse vectors of texts embedded before")

    def __post_init__(self) -> None:
        check_declared(self, "embed.")


@dataclass(frozen=True)
class VectorIndexConfig:
    """hnswlib parameters; search ef is raised to at least k at query time."""

    m: int = setting(16, low=1, doc="hnswlib's links per node")
    ef_construction: int = setting(200, low=1, doc="hnswlib's candidate list while building")
    ef_search: int = setting(100, low=1, doc="hnswlib's candidate list while searching")
    seed: int = setting(100, doc="hnswlib's random seed")

    def __post_init__(self) -> None:
        check_declared(self, "index.vector.")


# bm25s's variants: Robertson's, Lucene's (the default), ATIRE's, BM25L and BM25+ (Lv & Zhai 2011)
BM25_METHODS = ("robertson", "lucene", "atire", "bm25l", "bm25+")


@dataclass(frozen=True)
class LexicalIndexConfig:
    """bm25s parameters: NLTK's English stopwords and the Snowball stemmer by default.

    k1 0.9, b 0.4 and the 179 stopwords of "en_plus" (bm25s's "en" has 33) won on every held-out
    LoCoMo conversation against Lucene's usual 1.5 / 0.75 and "en" (benchmarks/lexical_cv.py):
    a memory is a turn or a note, shorter and more alike in length than web documents, so length
    normalisation (b) matters less, and questions are full of function words ("did", "what",
    "her") that "en" keeps.
    """

    k1: float = setting(0.9, low=0, doc="BM25 term-frequency saturation")
    b: float = setting(0.4, low=0, high=1, doc="BM25 length normalisation")
    method: str = setting("lucene", choices=BM25_METHODS, doc="the BM25 variant")
    stopwords: str | None = setting("en_plus", doc="stopword list: en, en_plus, a language, or none")
    stemmer: str | None = setting("english", doc="Snowball stemmer language, or none")

    def __post_init__(self) -> None:
        check_declared(self, "index.lexical.")
        # one spelling of "off", so equal settings make equal manifests (a saved index is reused)
        for name in ("stopwords", "stemmer"):
            if getattr(self, name) in ("", "none"):
                object.__setattr__(self, name, None)
        if self.stemmer not in (None, "english"):
            import Stemmer  # PyStemmer, only to check an uncommon choice

            if self.stemmer not in Stemmer.algorithms():
                raise ValidationError(f"index.lexical.stemmer: unknown stemmer {self.stemmer!r}; known: "
                                      f"{Stemmer.algorithms()} (or none)", field="index.lexical.stemmer")
        if self.stopwords not in (None, "en", "en_plus", "english"):
            from bm25s.tokenization import _infer_stopwords  # bm25s's own names for its lists

            try:
                _infer_stopwords(self.stopwords)
            except ValueError:
                raise ValidationError(f"index.lexical.stopwords: unknown stopword list {self.stopwords!r}; known: "
                                      "en, en_plus, a language name bm25s knows (de, fr, es, ...) or none",
                                      field="index.lexical.stopwords") from None


@dataclass(frozen=True)
class IndexConfig:
    vector: VectorIndexConfig = setting(default_factory=VectorIndexConfig, doc="the vector index (hnswlib)")
    lexical: LexicalIndexConfig = setting(default_factory=LexicalIndexConfig, doc="the lexical index (bm25s)")
    # Writes since the last build go to a delta; past this many chunks the lexical delta is
    # folded into the main index in a background thread.
    delta_merge_threshold: int = setting(512, low=1, doc="chunks written before the lexical delta is merged")
    # encoders the store carries beside its own model (keys of ENCODERS): each ranks a list of its
    # own ("vector@e5") when a search config names it in ``encoders``; their passage vectors live
    # in the embedding cache, so adding one embeds only its own vectors
    models: tuple[str, ...] = setting((), doc=f"extra encoders the store carries, of {list(ENCODERS)}")

    def __post_init__(self) -> None:
        check_declared(self, "index.")
        bad = [m for m in self.models if m not in ENCODERS]
        if bad:
            raise ValidationError(f"index.models: unknown encoder(s) {bad}; known: {list(ENCODERS)}",
                                  field="index.models")
        if len(set(self.models)) != len(self.models):
            raise ValidationError(f"index.models lists an encoder twice: {list(self.models)}", field="index.models")


@dataclass(frozen=True)
class SaveConfig:
    """Index-time configuration: changing any of it needs a rebuild."""

    chunk: ChunkConfig = setting(default_factory=ChunkConfig, doc="how memories are cut into chunks")
    embed: EmbedConfig = setting(default_factory=EmbedConfig, doc="the embedding model")
    index: IndexConfig = setting(default_factory=IndexConfig, doc="the indexes built")


def to_dict(config: Any) -> dict[str, Any]:
    """A plain, JSON-able dict of a config dataclass (nested dataclasses become dicts)."""
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"not a config dataclass: {type(config).__name__}")
    return _plain(dataclasses.asdict(config))


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def to_json(config: Any) -> str:
    return json.dumps(to_dict(config), indent=2, sort_keys=True)


def to_yaml(config: Any) -> str:
    import yaml

    return yaml.safe_dump(to_dict(config), sort_keys=True)


def from_yaml(cls: type[T], text: str) -> T:
    return from_dict(cls, parse_yaml(text, None, cls.__name__))


YAML_ALIAS_NODES = 10_000  # nodes a file's aliases may add, all told (anchors reused, not a bomb)


def read_yaml(path: str | Path, what: str) -> Any:
    """A YAML file's parsed content. A missing file is a NotFoundError (exit 3, as every other
    missing input); invalid YAML or aliases that would expand past ``YAML_ALIAS_NODES`` nodes (a
    "billion laughs" bomb) a ValidationError; each names ``what`` and the file."""
    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"{what} not found: {p}")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    return parse_yaml(text, p, what)


def parse_yaml(text: str, path: Path | None, what: str) -> Any:
    """YAML text's content, its aliases bounded (``read_yaml``); errors name ``path`` when given."""
    import yaml

    where = f"{path}: " if path is not None else ""
    try:
        loader = yaml.SafeLoader(text)
        try:
            # composed first, its aliases are still shared nodes: count what they expand to before
            # building values that every later walk (JSON, templates) would expand in full
            node = loader.get_single_node()
            if node is not None:
                _count_alias_nodes(node, where, what)
            return None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        # the parser names its input "<unicode string>": name the file instead
        shown = str(exc).replace("<unicode string>", str(path)) if path is not None else str(exc)
        raise ValidationError(f"{where}invalid YAML: {shown}") from None
    except RecursionError:
        raise ValidationError(f"{where}{what} nested too deeply to read") from None


def _count_alias_nodes(root: Any, where: str, what: str) -> None:
    """Refuse a document whose aliases add more than ``YAML_ALIAS_NODES`` nodes, or refer to themselves."""
    sizes: dict[int, int] = {}  # id(node) -> its node count with aliases expanded
    open_nodes: set[int] = set()
    added = 0

    def refuse(why: str) -> ValidationError:
        return ValidationError(f"{where}{what}: {why}; write the repeated part out instead")

    def size(node: Any) -> int:
        nonlocal added
        key = id(node)
        if key in open_nodes:
            raise refuse("a YAML alias refers to the anchor it is inside (an endless document)")
        if key in sizes:  # a second visit is an alias: its whole subtree again
            added += sizes[key]
            if added > YAML_ALIAS_NODES:
                raise refuse(f"its YAML aliases expand to more than {YAML_ALIAS_NODES} nodes (the limit, "
                             "against alias bombs)")
            return sizes[key]
        open_nodes.add(key)
        children = node.value if isinstance(node.value, list) else []
        total = 1 + sum(size(c) for child in children for c in (child if isinstance(child, tuple) else (child,)))
        open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root)


def read_config_file(path: str | Path) -> Any:
    """The parsed content of a .json, .yaml or .yml config file; errors name the file."""
    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"config file not found: {p}")
    if p.suffix == ".json":
        try:
            return json.loads(p.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{p}: invalid JSON: {exc}") from None
    return read_yaml(p, "config file")


def read_config_mapping(path: str | Path) -> dict[str, Any]:
    """A config file's mapping of keys; an empty file (nothing, or only comments) is refused like
    any other non-mapping, naming the file: it is more likely a mistake than a wish for defaults."""
    p = Path(path)
    data = read_config_file(p)
    if data is None:
        raise ValidationError(f"{p}: the file is empty; a config file holds a mapping of config keys "
                              "(e.g. `fusion: {method: rrf}`)")
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def load_config(cls: type[T], path: str | Path) -> T:
    """Read a config from a .json, .yaml or .yml file."""
    p = Path(path)
    data = read_config_mapping(p)
    try:
        return from_dict(cls, data)
    except ValidationError as exc:
        raise ValidationError(f"{p}: {exc}", field=exc.field) from None


# --------------------------------------------------------------------------- search
SIGNALS: tuple[str, ...] = ("vector", "lexical", "recency", "frequency", "graph", "entity", "temporal", "hop")
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


# --------------------------------------------------------------------------- assemble
ZONES: tuple[str, ...] = ("critical", "middle", "recency")


@dataclass(frozen=True)
class AssembleConfig:
    """Position-aware context assembly: a token budget split into critical / middle / recency zones.

    Query-time only: changing any of it re-assembles cached results, no re-search.
    """

    # tokens of an assembled context: the one definition of the budget's bounds (the command line
    # and every served face take theirs from here)
    budget: int = setting(2000, low=1, high=1_000_000, doc="tokens of context (rendered lines: citation + text)")
    critical_ratio: float = setting(0.15, low=0, high=1, doc="the critical zone's share of the budget")
    middle_ratio: float = setting(0.65, low=0, high=1, doc="the middle zone's share of the budget")
    recency_ratio: float = setting(0.20, low=0, high=1, doc="the recency zone's share of the budget")
    critical_threshold: float = setting(0.7, low=0, high=1, doc="normalised score (score / best) at or above: critical")
    recency_threshold: float = setting(0.3, low=0, high=1, doc="recent items at or above this normalised score: recency")
    recent_hours: float = setting(24.0, low=0, doc="recent: created within this window before the reference time")
    reference_time: str | None = setting(None, doc="ISO 8601 'now'; none: the namespace's latest memory")
    counter: str = setting("estimate", choices=("estimate", "exact"),
                           doc="token counter: estimate (max(chars/4, words*1.5)) or exact (the model's tokenizer)")
    dedupe_threshold: float = setting(0.9, above=0, high=1, doc="word-trigram Jaccard at or above: near-duplicate")
    oversize: str = setting("truncate", choices=("truncate", "skip"), doc="an item longer than the whole budget")
    min_truncated_tokens: int = setting(16, low=1, doc="a truncated item keeps at least this many tokens")
    neighbours: int = setting(0, low=0, doc="adjacent turns of the same episode added around placed items")

    def __post_init__(self) -> None:
        check_declared(self, "assemble.")
        ratios = (self.critical_ratio, self.middle_ratio, self.recency_ratio)
        if any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
            raise ValidationError(
                "assemble zone ratios must be >= 0 and sum to 1, got critical "
                f"{self.critical_ratio} + middle {self.middle_ratio} + recency {self.recency_ratio} = {sum(ratios):g}",
                field="assemble.critical_ratio")


# --------------------------------------------------------------------------- candidates
@dataclass(frozen=True)
class Candidate:
    """What a sweep picks and the gate judges: a search configuration, plus the index-time (``save``)
    and assembly settings it was chosen with; None means the defaults."""

    search: SearchConfig
    save: SaveConfig | None = None
    assemble: AssembleConfig | None = None

    def to_yaml(self, header: str = "") -> str:
        """A candidate file: the SearchConfig's keys at the top level (so it is also a preset file),
        then ``save:`` and ``assemble:`` sections."""
        import yaml

        data = to_dict(self.search)
        for name in ("save", "assemble"):
            if getattr(self, name) is not None:
                data[name] = to_dict(getattr(self, name))
        return header + yaml.safe_dump(data, sort_keys=True)


def load_candidate(path: str | Path) -> Candidate:
    """A candidate file (.yaml/.yml/.json): a SearchConfig, optionally with ``save:`` (index-time)
    and ``assemble:`` sections, e.g. a sweep's best.yaml."""
    p = Path(path)
    data = dict(read_config_mapping(p))
    save = data.pop("save", None)
    assemble = data.pop("assemble", None)
    try:
        return Candidate(from_dict(SearchConfig, data),
                         None if save is None else from_dict(SaveConfig, save, where="save"),
                         None if assemble is None else from_dict(AssembleConfig, assemble, where="assemble"))
    except ValidationError as exc:
        raise ValidationError(f"{p}: {exc}", field=exc.field) from None
