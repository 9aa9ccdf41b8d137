"""Every parameter a sweep (or a notebook slider) can vary: its name, its kind, and the one config
path it sets, declared once. A sweep point (``{"fusion.k": 2, "index.bm25_b": 0.4, ...}``) becomes
the search, save and assembly configurations by one generic mapping over these paths.

Paths start with the configuration they set: ``search.`` (a SearchConfig), ``save.`` (the
index-time SaveConfig) or ``assemble.`` (an AssembleConfig); a path through a dict field (the
fusion weights) sets one key of it.
"""
from __future__ import annotations

from dataclasses import dataclass, is_dataclass, replace
from typing import Any

from lab.config import ENCODERS, LISTS, AssembleConfig, SaveConfig, SearchConfig
from lab.fields import Rule, kind_at, rule_at

# the configuration each path's first part names
_ROOTS: dict[str, type] = {"search": SearchConfig, "save": SaveConfig, "assemble": AssembleConfig}


@dataclass(frozen=True)
class Param:
    name: str  # as a sweep file names it: "fusion.k", "index.bm25_b"
    path: str  # the config field it sets: "search.fusion.k", "save.index.lexical.b"

    @property
    def target(self) -> str:
        """search | save | assemble: which configuration it changes (and so what a change costs)."""
        return self.path.split(".", 1)[0]

    @property
    def kind(self) -> type:
        """float, int, bool, str or tuple: the config field's own type, what a value is coerced to."""
        root, _, rest = self.path.partition(".")
        return kind_at(_ROOTS[root], rest)

    @property
    def rule(self) -> Rule:
        """The config field's declared bounds or choices."""
        root, _, rest = self.path.partition(".")
        return rule_at(_ROOTS[root], rest)


_FUSION = ("k", "method", "coverage_bonus", "recent_boost", "recent_hours", "superseded", "demote_factor",
           "rerank_depth", "intent_gating", "neighbour_boost", "episode_decay")
# the lexical index (bm25s); "none" for the stemmer or the stopwords turns them off
_LEXICAL = {"index.bm25_k1": "k1", "index.bm25_b": "b", "index.bm25_method": "method",
            "index.stemmer": "stemmer", "index.stopwords": "stopwords"}
_ASSEMBLE = ("budget", "critical_ratio", "recency_ratio", "critical_threshold", "recency_threshold", "recent_hours")

PARAMS: dict[str, Param] = {p.name: p for p in [
    *(Param(f"fusion.{f}", f"search.fusion.{f}") for f in _FUSION),
    *(Param(f"fusion.weights.{s}", f"search.fusion.weights.{s}") for s in LISTS),  # views too
    Param("index.context_turns", "save.chunk.context_turns"),
    Param("index.time_in_text", "save.chunk.time_in_text"),
    Param("index.chunk_size", "save.chunk.size"),
    Param("index.chunk_overlap", "save.chunk.overlap"),
    Param("index.ef_search", "save.index.vector.ef_search"),
    Param("index.depth", "search.depth"),  # candidates per signal: searched again, not rebuilt
    # extra encoders the store carries (a list of ENCODERS' keys); a point naming them ranks each
    # one's list too, unless it names the lists itself ("encoders")
    Param("index.models", "save.index.models"),
    Param("encoders", "search.encoders"),
    *(Param(name, f"save.index.lexical.{f}") for name, f in _LEXICAL.items()),
    *(Param(f"assemble.{f}", f"assemble.{f}") for f in _ASSEMBLE),
]}
# sweep dimension -> (LexicalIndexConfig field, kind)
LEXICAL_DIMS = {name: (f, PARAMS[name].kind) for name, f in _LEXICAL.items()}


def apply(config: Any, changes: dict[str, Any]) -> Any:
    """``config`` with each dotted path in ``changes`` set: one ``replace`` per nested config (so
    checks across fields see the new values together), a dict field updated key by key."""
    direct: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in changes.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            direct[head] = value
    for head, sub in nested.items():
        current = getattr(config, head)
        direct[head] = apply(current, sub) if is_dataclass(current) else {**current, **sub}
    return replace(config, **direct) if direct else config


def param(name: str) -> Param | None:
    """The parameter ``name`` (a weight of any list, views included, is one), or None."""
    if name in PARAMS:
        return PARAMS[name]
    return Param(name, f"search.{name}") if name.startswith("fusion.weights.") else None


def names(value: Any) -> tuple[str, ...]:
    """A list-of-names value (index.models, encoders) from a sweep file (a list) or a results
    table cell (names joined by "+", "" for none)."""
    if isinstance(value, str):
        return tuple(v for v in value.split("+") if v)
    return tuple(value)


def table_point(point: dict[str, Any]) -> dict[str, Any]:
    """The point as a results table holds it: a list of names as one string ("e5+e5-sparse")."""
    return {k: "+".join(v) if isinstance(v, tuple) else v for k, v in point.items()}


def _changes(point: dict[str, Any], target: str) -> dict[str, Any]:
    out = {}
    for name, value in point.items():
        param_ = param(name)
        if param_ is not None and param_.target == target:
            out[param_.path.split(".", 1)[1]] = names(value) if param_.kind is tuple else param_.kind(value)
    return out


def search_config(base: SearchConfig, point: dict[str, Any]) -> SearchConfig:
    """``base`` with the point's search-time parameters (fusion, weights, depth); a point that
    sets ``index.models`` ranks those encoders' lists (unless it sets ``encoders`` too)."""
    changes = _changes(point, "search")
    if "index.models" in point and "encoders" not in changes:
        changes["encoders"] = tuple(ENCODERS[m] for m in names(point["index.models"]) if m in ENCODERS)
    return apply(base, changes)


def save_config(point: dict[str, Any]) -> SaveConfig:
    """The default save configuration with the point's index-time parameters."""
    return apply(SaveConfig(), _changes(point, "save"))


def assemble_config(base: AssembleConfig, point: dict[str, Any]) -> AssembleConfig:
    """``base`` with the point's assembly parameters; the middle zone takes what critical and
    recency leave."""
    changes = _changes(point, "assemble")
    if "critical_ratio" in changes or "recency_ratio" in changes:
        crit = changes.get("critical_ratio", base.critical_ratio)
        rec = changes.get("recency_ratio", base.recency_ratio)
        changes["middle_ratio"] = round(1.0 - crit - rec, 10)
    return apply(base, changes)
