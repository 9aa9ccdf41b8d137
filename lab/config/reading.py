"""Configurations in and out: ISO times, dicts, JSON and YAML (a file's aliases bounded, errors
naming the file), and a config file read into its dataclass."""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from lab.errors import NotFoundError, ValidationError
from lab.fields import from_dict

T = TypeVar("T")


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
