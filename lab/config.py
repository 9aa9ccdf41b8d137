"""Frozen configuration dataclasses that round-trip through dicts, JSON and YAML."""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from lab.errors import ValidationError

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


def check_number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                 above: float | None = None) -> None:
    """A finite number within bounds, or a ValidationError naming the field, the value and the range.

    ``low``/``high`` are inclusive bounds, ``above`` an exclusive lower bound."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = ((low is None or value >= low) and (high is None or value <= high)
              and (above is None or value > above))
    if not ok:
        lo = f"> {above:g}" if above is not None else (f">= {low:g}" if low is not None else "")
        hi = f"<= {high:g}" if high is not None else ""
        allowed = " and ".join(p for p in (lo, hi) if p) or "any finite number"
        raise ValidationError(f"{name} must be a finite number {allowed}, got {value!r}", field=name)


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
                f"{field}: {value!r} is not an ISO 8601 date-time (e.g. 2026-01-14T09:32:00Z)"
            ) from None
    else:
        raise ValidationError(f"{field}: expected an ISO 8601 string, got {type(value).__name__}")
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

    size: int = 350
    overlap: int = 150
    prepend_title_tags: bool = True
    context_turns: int = 2
    time_in_text: bool = False
    views: tuple[str, ...] = ("plain",)

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValidationError(f"chunk.size must be >= 1, got {self.size}")
        if not 0 <= self.overlap < self.size:
            raise ValidationError(
                f"chunk.overlap must be >= 0 and < chunk.size ({self.size}), got {self.overlap}"
            )
        if not 0 <= self.context_turns <= 20:
            raise ValidationError(f"chunk.context_turns must be in 0..20, got {self.context_turns}")
        bad = sorted(set(self.views) - set(INDEX_VIEWS))
        if bad:
            raise ValidationError(f"chunk.views: unknown view(s) {bad}; index-time views: {list(INDEX_VIEWS)}")
        if len(set(self.views)) != len(self.views):
            raise ValidationError(f"chunk.views lists a view twice: {list(self.views)}")

    @property
    def indexed_views(self) -> tuple[str, ...]:
        """The extra views a store with this configuration declares: none without index-time
        context (the plain view would be the main one)."""
        return self.views if (self.context_turns or self.time_in_text) else ()


@dataclass(frozen=True)
class EmbedConfig:
    """Which embedder a store uses; the model id is recorded in the store and checked on open."""

    model: str = DEFAULT_MODEL
    batch_size: int = 64
    cache: bool = True

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValidationError(f"embed.batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True)
class VectorIndexConfig:
    """hnswlib parameters; search ef is raised to at least k at query time."""

    m: int = 16
    ef_construction: int = 200
    ef_search: int = 100
    seed: int = 100

    def __post_init__(self) -> None:
        for name in ("m", "ef_construction", "ef_search"):
            check_number(f"index.vector.{name}", getattr(self, name), low=1)


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

    k1: float = 0.9
    b: float = 0.4
    method: str = "lucene"
    stopwords: str | None = "en_plus"  # None (or "none"): no stopwords
    stemmer: str | None = "english"  # None (or "none"): no stemming

    def __post_init__(self) -> None:
        check_number("index.lexical.k1", self.k1, low=0)
        check_number("index.lexical.b", self.b, low=0, high=1)
        if self.method not in BM25_METHODS:
            raise ValidationError(f"index.lexical.method: unknown BM25 variant {self.method!r}; known: {list(BM25_METHODS)}")
        # one spelling of "off", so equal settings make equal manifests (a saved index is reused)
        for name in ("stopwords", "stemmer"):
            if getattr(self, name) in ("", "none"):
                object.__setattr__(self, name, None)
        if self.stemmer not in (None, "english"):
            import Stemmer  # PyStemmer, only to check an uncommon choice

            if self.stemmer not in Stemmer.algorithms():
                raise ValidationError(f"index.lexical.stemmer: unknown stemmer {self.stemmer!r}; known: "
                                      f"{Stemmer.algorithms()} (or none)")
        if self.stopwords not in (None, "en", "en_plus", "english"):
            from bm25s.tokenization import _infer_stopwords  # bm25s's own names for its lists

            try:
                _infer_stopwords(self.stopwords)
            except ValueError:
                raise ValidationError(f"index.lexical.stopwords: unknown stopword list {self.stopwords!r}; known: "
                                      "en, en_plus, a language name bm25s knows (de, fr, es, ...) or none") from None


@dataclass(frozen=True)
class IndexConfig:
    vector: VectorIndexConfig = field(default_factory=VectorIndexConfig)
    lexical: LexicalIndexConfig = field(default_factory=LexicalIndexConfig)
    # Writes since the last build go to a delta; past this many chunks the lexical delta is
    # folded into the main index in a background thread.
    delta_merge_threshold: int = 512
    # encoders the store carries beside its own model (keys of ENCODERS): each ranks a list of its
    # own ("vector@e5") when a search config names it in ``encoders``; their passage vectors live
    # in the embedding cache, so adding one embeds only its own vectors
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        bad = [m for m in self.models if m not in ENCODERS]
        if bad:
            raise ValidationError(f"index.models: unknown encoder(s) {bad}; known: {list(ENCODERS)}",
                                  field="index.models")
        if len(set(self.models)) != len(self.models):
            raise ValidationError(f"index.models lists an encoder twice: {list(self.models)}", field="index.models")


@dataclass(frozen=True)
class SaveConfig:
    """Index-time configuration: changing any of it needs a rebuild."""

    chunk: ChunkConfig = field(default_factory=ChunkConfig)
    embed: EmbedConfig = field(default_factory=EmbedConfig)
    index: IndexConfig = field(default_factory=IndexConfig)


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


def from_dict(cls: type[T], data: dict[str, Any] | None, *, where: str = "") -> T:
    """Build ``cls`` from a dict; unknown keys and wrong types raise a ValidationError naming them."""
    data = data or {}
    if not isinstance(data, dict):
        raise ValidationError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(
            f"{where or cls.__name__}: unknown key(s) {unknown}; allowed: {sorted(known)}"
        )
    kwargs = {}
    for name, value in data.items():
        kwargs[name] = _coerce(hints[name], value, f"{where}.{name}" if where else name)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where=where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(arg, value, where)
            except ValidationError as exc:
                errors.append(str(exc))
        raise ValidationError(f"{where}: {value!r} matches none of {args}")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise ValidationError(f"{where}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        item_tp = args[0] if args else Any
        items = [_coerce(item_tp, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValidationError(f"{where}: expected a mapping, got {value!r}")
        _, val_tp = typing.get_args(tp) or (Any, Any)
        return {str(k): _coerce(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValidationError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ValidationError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ValidationError(f"{where}: expected a string, got {value!r}")
        return value
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
    """A YAML file's parsed content; a missing file, invalid YAML or aliases that would expand past
    ``YAML_ALIAS_NODES`` nodes (a "billion laughs" bomb) is a ValidationError naming ``what``."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"{what} not found: {p}")
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
        raise ValidationError(f"config file not found: {p}")
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
        raise ValidationError(f"{p}: {exc}") from None


# --------------------------------------------------------------------------- search
SIGNALS: tuple[str, ...] = ("vector", "lexical", "recency", "frequency", "graph", "entity", "temporal")
# every ranked list search can make: the signals, each view's vector and lexical lists, and each
# extra encoder's list (ENCODERS)
LISTS: tuple[str, ...] = (*SIGNALS, *(f"{s}@{v}" for v in VIEWS for s in VIEW_SIGNALS), *ENCODERS.values())


def _default_weights() -> dict[str, float]:
    return {"vector": 1.0, "lexical": 1.0, "recency": 0.0, "frequency": 0.0, "graph": 0.0,
            "entity": 0.0, "temporal": 0.0}


def _default_edge_weights() -> dict[str, float]:
    return {"related_to": 1.0, "supersedes": 1.0, "contradicts": 0.5, "derived_from": 1.0, "part_of": 0.7}


@dataclass(frozen=True)
class FilterConfig:
    """Applied before ranking: only memories passing every filter can be candidates."""

    types: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    since: str | None = None  # ISO 8601, inclusive
    until: str | None = None  # ISO 8601, exclusive
    valid_only: bool = True

    def __post_init__(self) -> None:
        for name in ("since", "until"):
            if getattr(self, name) is not None:
                parse_time(getattr(self, name), f"filters.{name}")


@dataclass(frozen=True)
class GraphConfig:
    """Breadth-first walk over typed edges from the top vector and lexical hits."""

    seeds: int = 5  # top-n of the vector list and of the lexical list
    max_depth: int = 2
    decay: float = 0.5  # per hop
    edge_weights: dict[str, float] = field(default_factory=_default_edge_weights)

    def __post_init__(self) -> None:
        check_number("graph.seeds", self.seeds, low=0)
        check_number("graph.max_depth", self.max_depth, low=0)
        check_number("graph.decay", self.decay, low=0, high=1)
        for relation, weight in self.edge_weights.items():
            check_number(f"graph.edge_weights.{relation}", weight, low=0)


@dataclass(frozen=True)
class AnalysisConfig:
    """Rule-based query analysis; each effect can be switched off to measure it."""

    temporal: str = "boost"  # off | boost (a 'temporal' signal) | filter (a hard time window)
    entities: bool = True  # exact matches of named entities / codes as an 'entity' signal


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
            raise ValidationError("fusion.learned.features must name at least one feature")
        for name in ("mean", "scale", "coef"):
            if len(getattr(self, name)) != n:
                raise ValidationError(f"fusion.learned.{name} has {len(getattr(self, name))} values for {n} features")
        for i, feature in enumerate(self.features):
            kind, _, target = feature.partition(":")
            if not (feature in LEARNED_BASE_FEATURES or (kind in ("rrf", "in") and target in LISTS)):
                raise ValidationError(f"fusion.learned.features[{i}]: unknown feature {feature!r}; known: "
                                      f"{list(LEARNED_BASE_FEATURES)}, and rrf:LIST / in:LIST for a list of {list(LISTS)}")
            check_number(f"fusion.learned.mean[{i}]", self.mean[i])
            check_number(f"fusion.learned.scale[{i}]", self.scale[i], above=0)
            check_number(f"fusion.learned.coef[{i}]", self.coef[i])
        if len(set(self.features)) != n:
            raise ValidationError("fusion.learned.features repeats a feature")
        check_number("fusion.learned.intercept", self.intercept)


@dataclass(frozen=True)
class FusionConfig:
    """Query-time parameters: everything here is applied to cached candidates, no re-search."""

    method: str = "rrf"
    k: float = 60.0  # RRF constant, >= 0
    intent_gating: bool = False  # scale signal weights by the query's intent (LMA-style)
    weights: dict[str, float] = field(default_factory=_default_weights)
    coverage_bonus: float = 0.0  # 0..1: fused * (1 + bonus * query-term coverage)
    recent_boost: float = 1.0  # multiplier for memories younger than recent_hours
    recent_hours: float = 24.0
    superseded: str = "demote"  # demote | hide | keep
    demote_factor: float = 0.5
    rerank_depth: int = 0  # re-order the top-n by query-memory cosine before cutting to top_k
    # 0..1: a memory gains this share of the better fused score of the turns just before and after
    # it in its episode (metadata "episode"/"session"), so a question and its answer lift each other
    neighbour_boost: float = 0.0
    # 0..1: episode diversification; the n-th best candidate of an episode has its score multiplied
    # by (1 - decay) ** (n - 1), so a top k filled from one session makes room for others (evidence
    # spread over sessions, multi-hop). Candidates outside episodes are left as they are. With a
    # learned model it decays the model's probability; a cosine rerank (rerank_depth) re-orders
    # its top after it.
    episode_decay: float = 0.0
    # a learned fuser on top of the above: its probability that a candidate is relevant replaces the
    # fused score (superseded demotion still applies); None: the base fusion's score ranks
    learned: LearnedFusion | None = None
    top_k: int = 10

    def __post_init__(self) -> None:
        check_number("fusion.k", self.k, low=0)
        for signal, weight in self.weights.items():
            check_number(f"fusion.weights.{signal}", weight, low=0)
        check_number("fusion.coverage_bonus", self.coverage_bonus, low=0, high=1)
        check_number("fusion.recent_boost", self.recent_boost, low=0)
        check_number("fusion.recent_hours", self.recent_hours, low=0)
        check_number("fusion.demote_factor", self.demote_factor, low=0, high=1)
        check_number("fusion.rerank_depth", self.rerank_depth, low=0)
        check_number("fusion.neighbour_boost", self.neighbour_boost, low=0, high=1)
        check_number("fusion.episode_decay", self.episode_decay, low=0, high=1)
        if self.superseded not in ("demote", "hide", "keep"):
            raise ValidationError(f"fusion.superseded must be demote, hide or keep, got {self.superseded!r}")
        if self.top_k < 1:
            raise ValidationError(f"fusion.top_k must be >= 1, got {self.top_k}")
        bad = sorted(set(self.weights) - set(LISTS))
        if bad:
            raise ValidationError(f"fusion.weights: unknown signal(s) {bad}; known: {list(SIGNALS)}, "
                                  f"and per view {list(LISTS[len(SIGNALS):])}")


@dataclass(frozen=True)
class SearchConfig:
    """A whole retrieval configuration; presets are named instances of it."""

    name: str = "custom"
    description: str = ""
    signals: tuple[str, ...] = ("vector", "lexical")
    # extra views ranked as lists of their own, "vector@plain", "lexical@derived"... (see VIEWS):
    # a view ranks those of vector and lexical that ``signals`` enables, weighted like signals
    views: tuple[str, ...] = ()
    # derived facts (memories with a derived_from edge): "results", ranked like any memory, or
    # "sources_only", never results themselves: they rank only through the derived view, which
    # credits each hit to its source, so a fact lifts its source without taking a slot beside it
    # (without the derived view in ``views``, "sources_only" leaves facts out of search altogether)
    derived_facts: str = "results"
    # lists of extra encoders the store carries (values of ENCODERS: "vector@e5", "sparse@e5"),
    # fused like the signals' lists (weights by the same names)
    encoders: tuple[str, ...] = ()
    depth: int = 50  # candidates per signal
    half_life_hours: float = 168.0
    reference_time: str | None = None  # ISO; None = the namespace's latest memory (never the clock)
    filters: FilterConfig = field(default_factory=FilterConfig)
    graph: GraphConfig = field(default_factory=GraphConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    fusion: FusionConfig = field(default_factory=FusionConfig)

    def __post_init__(self) -> None:
        bad = sorted(set(self.signals) - set(SIGNALS))
        if bad:
            raise ValidationError(f"signals: unknown signal(s) {bad}; known: {list(SIGNALS)}")
        bad = sorted(set(self.views) - set(VIEWS))
        if bad:
            raise ValidationError(f"views: unknown view(s) {bad}; known: {list(VIEWS)}")
        if len(set(self.views)) != len(self.views):
            raise ValidationError(f"views lists a view twice: {list(self.views)}")
        bad = sorted(set(self.encoders) - set(ENCODERS.values()))
        if bad:
            raise ValidationError(f"encoders: unknown encoder list(s) {bad}; known: {list(ENCODERS.values())}",
                                  field="encoders")
        if self.derived_facts not in DERIVED_FACTS:
            raise ValidationError(f"derived_facts must be one of {list(DERIVED_FACTS)}, got {self.derived_facts!r}")
        if self.depth < 1:
            raise ValidationError(f"depth must be >= 1, got {self.depth}")
        check_number("half_life_hours", self.half_life_hours, above=0)
        if self.signals and all(self.fusion.weights.get(s, 1.0) == 0 for s in self.signals):
            raise ValidationError(f"fusion.weights: every enabled signal {list(self.signals)} has weight 0, "
                                  "so nothing could rank; give at least one a weight > 0")
        if self.analysis.temporal not in ("off", "boost", "filter"):
            raise ValidationError(
                f"analysis.temporal must be off, boost or filter, got {self.analysis.temporal!r}"
            )


# --------------------------------------------------------------------------- assemble
ZONES: tuple[str, ...] = ("critical", "middle", "recency")


# tokens of an assembled context: the one definition of the budget's bounds (the config, the
# command line and every served face check against it)
BUDGET_RANGE = (1, 1_000_000)


@dataclass(frozen=True)
class AssembleConfig:
    """Position-aware context assembly: a token budget split into critical / middle / recency zones.

    Query-time only: changing any of it re-assembles cached results, no re-search.
    """

    budget: int = 2000  # tokens, for the items' rendered lines (citation + text)
    critical_ratio: float = 0.15
    middle_ratio: float = 0.65
    recency_ratio: float = 0.20
    critical_threshold: float = 0.7  # normalised score (score / best score) at or above -> critical
    recency_threshold: float = 0.3  # recent items at or above this normalised score -> recency
    recent_hours: float = 24.0  # "recent" = created within this window before the reference time
    reference_time: str | None = None  # ISO; None = the namespace's latest memory (never the clock)
    counter: str = "estimate"  # estimate (max(chars/4, words*1.5)) | exact (the embedding model's tokenizer)
    dedupe_threshold: float = 0.9  # word-trigram Jaccard at or above -> near-duplicate, the weaker is dropped
    oversize: str = "truncate"  # an item longer than the whole budget: truncate (to the space left) | skip
    min_truncated_tokens: int = 16  # a truncated item keeps at least this many tokens, or is skipped
    neighbours: int = 0  # adjacent turns of the same episode added around placed items (0 = off)

    def __post_init__(self) -> None:
        check_number("assemble.budget", self.budget, low=BUDGET_RANGE[0], high=BUDGET_RANGE[1])
        for name in ("critical_ratio", "middle_ratio", "recency_ratio"):
            check_number(f"assemble.{name}", getattr(self, name), low=0, high=1)
        ratios = (self.critical_ratio, self.middle_ratio, self.recency_ratio)
        if any(r < 0 for r in ratios) or abs(sum(ratios) - 1.0) > 1e-6:
            raise ValidationError(
                "assemble zone ratios must be >= 0 and sum to 1, got critical "
                f"{self.critical_ratio} + middle {self.middle_ratio} + recency {self.recency_ratio} = {sum(ratios):g}"
            )
        if not 0 < self.dedupe_threshold <= 1:
            raise ValidationError(f"assemble.dedupe_threshold must be in (0, 1], got {self.dedupe_threshold}")
        for name in ("critical_threshold", "recency_threshold"):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ValidationError(f"assemble.{name} must be in [0, 1], got {value}")
        check_number("assemble.recent_hours", self.recent_hours, low=0)
        if self.counter not in ("estimate", "exact"):
            raise ValidationError(f"assemble.counter must be estimate or exact, got {self.counter!r}")
        if self.oversize not in ("truncate", "skip"):
            raise ValidationError(f"assemble.oversize must be truncate or skip, got {self.oversize!r}")
        if self.min_truncated_tokens < 1:
            raise ValidationError(f"assemble.min_truncated_tokens must be >= 1, got {self.min_truncated_tokens}")
        if self.neighbours < 0:
            raise ValidationError(f"assemble.neighbours must be >= 0, got {self.neighbours}")


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
        raise ValidationError(f"{p}: {exc}") from None
