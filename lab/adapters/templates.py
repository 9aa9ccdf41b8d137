"""Request templates and response paths of declarative adapters (HTTP and MCP files).

A template is JSON-like data whose strings may name values in braces: ``"{query}"``. A string that
is exactly one placeholder takes the value as it is (a number stays a number, a list a list, and a
missing value drops its key); other strings are formatted. ``{"$each": TEMPLATE}`` in a save
template becomes one copy of TEMPLATE per memory of the batch.

A request's path is rendered by ``render_path``: each placeholder's value is percent-encoded as
one path segment (``/``, ``?``, ``#``, ``%``, ``:`` and ``.`` included), so a value (an id a server
answered) cannot add a segment, a query, a dot segment or a host.

A path picks values out of a response: dot-separated keys, ``[*]`` for every item of a list,
``[N]`` for one item: ``results[*].id``, ``memories[0].id``, ``data.hits``. A score or distance
picked must be a finite number (``number`` names the field otherwise).

``${VAR}`` and ``${VAR:-default}`` (in the fields a file's docstring names: a base URL, a command,
headers) read the environment, but only the variables the file declares at its top
(``reads_env: [NAME, ...]``, see ``FileEnv``); an undeclared one is refused before anything is sent
or run. The values read are never shown: ``FileEnv.redact`` puts their names back in every error
and in the log lines of the HTTP and MCP clients, and hides a URL's userinfo and query values.
An adapter file is trusted like code all the same: what it declares it may send anywhere.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping
from urllib.parse import quote

from lab.errors import ValidationError

# the loggers of the HTTP and MCP clients an adapter drives (they log URLs, and headers on errors)
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


def segment(value: Any) -> str:
    """``value`` as one path segment: every character but letters, digits, ``-``, ``_`` and ``~``
    percent-encoded, the dot too (``..`` would be a dot segment, which a server may resolve)."""
    return quote(str(value), safe="").replace(".", "%2E")


def render_path(template: str, values: Mapping[str, Any]) -> str:
    """A request path with each placeholder's value as one segment (``segment``); a missing value is empty."""
    return _ANY.sub(lambda m: "" if values.get(m.group(1)) is None else segment(values[m.group(1)]), template)


def render_plain(template: str, values: Mapping[str, Any]) -> str:
    """A string template with its values as they are (to see what a path would be unquoted)."""
    return _ANY.sub(lambda m: "" if values.get(m.group(1)) is None else str(values[m.group(1)]), template)


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
        out.append((str(ids[0]), number(scores[0], score_path, ids[0]) if scores else float(-n)))
    return out


def number(value: Any, field: str | None, of: Any) -> float:
    """``value`` (at ``field`` in the answer, for the hit ``of``) as a finite float, or a ValueError
    naming the field: NaN or an infinite score would sort anywhere and poison every mean."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"the value at '{field}' for id {str(of)[:80]!r} is not a number: {str(value)[:80]!r}") \
            from None
    if not math.isfinite(out):
        raise ValueError(f"the value at '{field}' for id {str(of)[:80]!r} is {value!r}, not a finite number")
    return out


def zipped(answer: Any, id_path: str, score_path: str | None, distance: bool = False) -> list[tuple[str, float]]:
    """(id, score) pairs of a columnar answer (``ids[0][*]`` beside ``distances[0][*]``, as Chroma
    answers), best first; a distance becomes the score ``1 - distance``. The two columns must be
    as long as each other."""
    ids = pick(answer, id_path)
    if not score_path:
        return [(str(i), float(-n)) for n, i in enumerate(ids)]
    scores = pick(answer, score_path)
    if len(scores) != len(ids):
        raise ValueError(f"the answer's columns do not line up: {len(ids)} ids at '{id_path}' but {len(scores)} "
                         f"values at '{score_path}'")
    return [(str(i), 1.0 - number(v, score_path, i) if distance else number(v, score_path, i))
            for i, v in zip(ids, scores)]


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
