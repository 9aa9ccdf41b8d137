"""Frozen configuration dataclasses that round-trip through dicts, JSON and YAML."""
from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lab.errors import ValidationError

T = TypeVar("T")

DEFAULT_MODEL = "all-MiniLM-L6-v2"
FAKE_MODEL = "fake-hash-256"


@dataclass(frozen=True)
class ChunkConfig:
    """Token windows over a memory's content; title and tags are prepended to every chunk."""

    size: int = 350
    overlap: int = 150
    prepend_title_tags: bool = True

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValidationError(f"chunk.size must be >= 1, got {self.size}")
        if not 0 <= self.overlap < self.size:
            raise ValidationError(
                f"chunk.overlap must be >= 0 and < chunk.size ({self.size}), got {self.overlap}"
            )


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


@dataclass(frozen=True)
class LexicalIndexConfig:
    """bm25s parameters: English stopwords and the Snowball stemmer by default."""

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    stopwords: str = "en"
    stemmer: str | None = "english"


@dataclass(frozen=True)
class IndexConfig:
    vector: VectorIndexConfig = field(default_factory=VectorIndexConfig)
    lexical: LexicalIndexConfig = field(default_factory=LexicalIndexConfig)
    # Writes since the last build go to a delta; past this many chunks the lexical delta is
    # folded into the main index in a background thread.
    delta_merge_threshold: int = 512


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
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValidationError(f"invalid YAML: {exc}") from exc
    return from_dict(cls, data)


def load_config(cls: type[T], path: str | Path) -> T:
    """Read a config from a .json, .yaml or .yml file."""
    p = Path(path)
    if not p.is_file():
        raise ValidationError(f"config file not found: {p}")
    text = p.read_text(encoding="utf-8")
    if p.suffix == ".json":
        try:
            return from_dict(cls, json.loads(text))
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{p}: invalid JSON: {exc}") from exc
    return from_yaml(cls, text)
