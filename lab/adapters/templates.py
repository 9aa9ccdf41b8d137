"""Request templates and response paths of declarative adapters (HTTP and MCP files).

A template is JSON-like data whose strings may name values in braces: ``"{query}"``. A string that
is exactly one placeholder takes the value as it is (a number stays a number, a list a list, and a
missing value drops its key); other strings are formatted. ``{"$each": TEMPLATE}`` in a save
template becomes one copy of TEMPLATE per memory of the batch.

A path picks values out of a response: dot-separated keys, ``[*]`` for every item of a list,
``[N]`` for one item: ``results[*].id``, ``memories[0].id``, ``data.hits``.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from lab.errors import ValidationError

_ONE = re.compile(r"^\{(\w+)\}$")
_ANY = re.compile(r"\{(\w+)\}")
_STEP = re.compile(r"^(\w+)?((?:\[(?:\*|\d+)\])*)$")
_DROP = object()


def render(template: Any, values: Mapping[str, Any], items: list[Mapping[str, Any]] | None = None) -> Any:
    """``template`` with its placeholders filled from ``values`` (``items``: the batch for ``$each``)."""
    out = _render(template, values, items)
    return None if out is _DROP else out


def _render(t: Any, values: Mapping[str, Any], items: list[Mapping[str, Any]] | None) -> Any:
    if isinstance(t, str):
        whole = _ONE.match(t)
        if whole:
            value = values.get(whole.group(1))
            return _DROP if value is None else value
        return _ANY.sub(lambda m: "" if values.get(m.group(1)) is None else str(values[m.group(1)]), t)
    if isinstance(t, Mapping):
        if set(t) == {"$each"}:
            if items is None:
                raise ValidationError("'$each' is allowed only in a save template (one copy per memory)")
            return [x for x in (_render(t["$each"], {**values, **item}, None) for item in items) if x is not _DROP]
        out = {}
        for k, v in t.items():
            got = _render(v, values, items)
            if got is not _DROP:
                out[k] = got
        return out
    if isinstance(t, list):
        return [x for x in (_render(v, values, items) for v in t) if x is not _DROP]
    return t


def placeholders(template: Any) -> set[str]:
    """Every name a template uses."""
    if isinstance(template, str):
        return set(_ANY.findall(template))
    if isinstance(template, Mapping):
        return set().union(*(placeholders(v) for v in template.values())) if template else set()
    if isinstance(template, list):
        return set().union(*(placeholders(v) for v in template)) if template else set()
    return set()


def check_path(path: str, where: str) -> str:
    if not isinstance(path, str) or not path or not all(_STEP.match(s) for s in path.split(".")):
        raise ValidationError(f"{where}: {path!r} is not a response path (like results[*].id or data.hits)")
    return path


def ranked(answer: Any, hits: str, id_path: str, score_path: str | None) -> list[tuple[str, float] | int]:
    """(id, score) of each hit ``hits`` reaches in a search answer, best first (a hit without a
    score scores by its place); a hit without an id is its index instead, for the caller to name."""
    out: list[tuple[str, float] | int] = []
    for n, hit in enumerate(pick(answer, hits)):
        ids = pick(hit, id_path)
        if not ids:
            out.append(n)
            continue
        scores = pick(hit, score_path) if score_path else []
        out.append((str(ids[0]), float(scores[0]) if scores else float(-n)))
    return out


def pick(data: Any, path: str) -> list[Any]:
    """Every value ``path`` reaches in ``data`` (a path without ``[*]`` reaches at most one)."""
    current = [data]
    for step in path.split("."):
        key, indexes = _STEP.match(step).groups()  # type: ignore[union-attr]
        nxt = []
        for node in current:
            if key is not None:
                if not isinstance(node, Mapping) or key not in node:
                    continue
                node = node[key]
            nodes = [node]
            for index in re.findall(r"\[(\*|\d+)\]", indexes or ""):
                expanded = []
                for n in nodes:
                    if not isinstance(n, list):
                        continue
                    if index == "*":
                        expanded.extend(n)
                    elif int(index) < len(n):
                        expanded.append(n[int(index)])
                nodes = expanded
            nxt.extend(nodes)
        current = nxt
    return current
