"""Declared fields: each settings input's bounds, closed set of choices and one-line doc, written
once as dataclass field metadata, with the one checker and the one coercer every settings object
uses (search, save and assembly configs, the server's settings, the workspace, sweep points).

A field is declared with `setting`::

    k: float = setting(60.0, low=0, doc="the RRF constant")

and everything that takes that input derives from the declaration: the config's own check
(`check_declared`, from ``__post_init__``), the served request models and MCP parameters
(`pydantic_bounds`), the command line's early checks and a sweep's dimension kinds (`rule_at`,
`kind_at`). Why not pydantic models for the configs themselves: they are frozen stdlib dataclasses
that sweeps ``replace`` millions of times, hash as cache keys and round-trip through YAML, and lab's
error texts (field, value, allowed range, source) are part of its interface; pydantic is used
where it already is, at the served faces, with bounds taken from here.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, TypeVar

from lab.errors import ValidationError

T = TypeVar("T")
RULE = "lab.rule"  # the metadata key a declared field's Rule is stored under


@dataclass(frozen=True)
class Rule:
    """What a field allows: numeric bounds (``low``/``high`` inclusive, ``above``/``below``
    exclusive), a closed set of ``choices``, and its one-line ``doc``."""

    low: float | None = None
    high: float | None = None
    above: float | None = None
    below: float | None = None
    choices: tuple[Any, ...] | None = None
    doc: str = ""

    @property
    def numeric(self) -> bool:
        return any(b is not None for b in (self.low, self.high, self.above, self.below))

    def allowed(self) -> str:
        """The allowed range or set in words: ">= 0 and <= 1", "demote, hide or keep"."""
        if self.choices is not None:
            names = [str(c) for c in self.choices]
            return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" or {names[-1]}"
        lo = (f"> {_shown(self.above)}" if self.above is not None else
              f">= {_shown(self.low)}" if self.low is not None else "")
        hi = (f"< {_shown(self.below)}" if self.below is not None else
              f"<= {_shown(self.high)}" if self.high is not None else "")
        return " and ".join(p for p in (lo, hi) if p) or "any finite number"

    def problem(self, value: Any) -> str | None:
        """What is wrong with ``value`` ("must be ..., got ..."), or None when it is allowed."""
        if self.choices is not None:
            return None if value in self.choices else f"must be {self.allowed()}, got {value!r}"
        if not self.numeric:
            return None
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        if ok:
            ok = ((self.low is None or value >= self.low) and (self.high is None or value <= self.high)
                  and (self.above is None or value > self.above) and (self.below is None or value < self.below))
        return None if ok else f"must be a finite number {self.allowed()}, got {value!r}"

    def pydantic(self) -> dict[str, Any]:
        """The same bounds as keyword arguments of ``pydantic.Field`` (ge, le, gt, lt, description)."""
        names = {"low": "ge", "high": "le", "above": "gt", "below": "lt"}
        out: dict[str, Any] = {names[k]: getattr(self, k) for k in names if getattr(self, k) is not None}
        if self.doc:
            out["description"] = self.doc
        return out


def _shown(bound: float) -> str:
    """A bound as a person writes it: 1000000, not 1e+06; 0.001 as is."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 1e15 else f"{bound:g}"


def setting(default: Any = MISSING, *, default_factory: Any = MISSING, low: float | None = None,
            high: float | None = None, above: float | None = None, below: float | None = None,
            choices: tuple[Any, ...] | None = None, doc: str = "") -> Any:
    """A dataclass field carrying its `Rule` (bounds, choices, doc) as metadata."""
    rule = Rule(low, high, above, below, tuple(choices) if choices is not None else None, doc)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={RULE: rule})


def rule(cls: type, name: str) -> Rule:
    """The declared rule of field ``name`` of ``cls`` (an empty Rule when it declares none)."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f.metadata.get(RULE, Rule())
    raise KeyError(f"{cls.__name__} has no field {name!r}")


def check_declared(obj: Any, prefix: str = "", *, said: str = "") -> None:
    """Check every declared field of ``obj`` against its rule: a ValidationError names the field
    (``prefix`` + name, e.g. ``fusion.k``), the value and what is allowed, and carries ``field``;
    ``said`` goes before the name in the message only ("setting port must be ...")."""
    for name, declared, choices, low, high, strict in _checked(type(obj)):
        value = getattr(obj, name)
        if isinstance(value, dict):  # a bound on a mapping bounds each of its values (the weights)
            for key, item in value.items():
                check_number(f"{prefix}{name}.{key}", item, low=declared.low,
                             high=declared.high, above=declared.above)
            continue
        # the common case, an allowed value, in a few comparisons (sweeps build configs by the million)
        if choices is not None:
            if value in choices:
                continue
        elif value is None or (type(value) in (int, float) and low <= value <= high and math.isfinite(value)
                               and (not strict or declared.problem(value) is None)):
            continue  # None: an optional field left unset
        problem = declared.problem(value)  # a number of another type (numpy's) is checked here
        if problem:
            raise ValidationError(f"{said}{prefix}{name} {problem}", field=f"{prefix}{name}")


_CHECKED: dict[type, tuple[tuple[str, Rule, Any, float, float, bool], ...]] = {}


def _checked(cls: type) -> tuple[tuple[str, Rule, Any, float, float, bool], ...]:
    """The fields of ``cls`` whose rule checks something, with their inclusive span, looked up once
    per class."""
    if cls not in _CHECKED:
        out = []
        for f in dataclasses.fields(cls):
            r = f.metadata.get(RULE)
            if r is not None and (r.numeric or r.choices is not None):
                low = max(x for x in (r.low, r.above, -math.inf) if x is not None)
                high = min(x for x in (r.high, r.below, math.inf) if x is not None)
                strict = r.above is not None or r.below is not None  # an exclusive bound: the full check
                out.append((f.name, r, r.choices, low, high, strict))
        _CHECKED[cls] = tuple(out)
    return _CHECKED[cls]


def check_number(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                 above: float | None = None) -> None:
    """A finite number within bounds, or a ValidationError naming the field, the value and the range
    (for values that are not a declared field: a dict's entries, a list's items)."""
    if (type(value) in (int, float) and math.isfinite(value) and (low is None or value >= low)
            and (high is None or value <= high) and (above is None or value > above)):
        return
    bounded = Rule(low=low, high=high, above=above)  # a number of another type (numpy's) is checked here
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    problem = bounded.problem(value) if bounded.numeric else (None if ok else f"must be a finite number, got {value!r}")
    if problem:
        raise ValidationError(f"{name} {problem}", field=name)


# --------------------------------------------------------------------------- the one coercer
def from_dict(cls: type[T], data: dict[str, Any] | None, *, where: str = "") -> T:
    """Build ``cls`` from a dict; unknown keys and wrong types raise a ValidationError naming them."""
    data = data or {}
    if not isinstance(data, dict):
        raise ValidationError(f"{where or cls.__name__}: expected a mapping, got {type(data).__name__}",
                              field=where or None)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(f"{where or cls.__name__}: unknown key(s) {unknown}; allowed: {sorted(known)}",
                              field=f"{where}.{unknown[0]}" if where else unknown[0])
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in data
               and f.default is MISSING and f.default_factory is MISSING]  # type: ignore[misc]
    if missing:
        name = f"{where}.{missing[0]}" if where else missing[0]
        raise ValidationError(f"{name!r} is required" + (f" (also missing: {missing[1:]})" if missing[1:] else ""),
                              field=name)
    kwargs = {name: coerce(hints[name], value, f"{where}.{name}" if where else name) for name, value in data.items()}
    return cls(**kwargs)


_TRUE, _FALSE = ("true", "on", "yes", "1"), ("false", "off", "no", "0")


def coerce(tp: Any, value: Any, where: str, *, text: bool = False, field: str | None = None) -> Any:
    """``value`` as type ``tp`` (a config field's type), or a ValidationError naming ``where``.

    ``text``: the value came as text (a flag, an environment variable), so "8080" is the integer
    8080 and "on" is true; values from a file or a request keep their own types. ``field``: the
    error's field when ``where`` says more than the field's name ("setting port from $LAB_SERVE_PORT")."""
    field = field or where
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, where=where)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return coerce(arg, value, where, text=text, field=field)
            except ValidationError:
                continue
        raise ValidationError(f"{where}: {value!r} matches none of {args}", field=field)
    if origin in (tuple, list):
        if text and isinstance(value, str):  # a flag's or a variable's list: "models,embeddings"
            value = [part.strip() for part in value.split(",") if part.strip()]
        if not isinstance(value, (list, tuple)):
            raise ValidationError(f"{where}: expected a list, got {value!r}", field=field)
        args = typing.get_args(tp)
        items = [coerce(args[0] if args else Any, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise ValidationError(f"{where}: expected a mapping, got {value!r}", field=field)
        _, val_tp = typing.get_args(tp) or (Any, Any)
        return {str(k): coerce(val_tp, v, f"{where}.{k}") for k, v in value.items()}
    if tp in (int, float):
        return _number(tp, value, where, text, field)
    if tp is bool:
        if text and isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        if not isinstance(value, bool):
            raise ValidationError(f"{where}: expected true or false, got {value!r}", field=field)
        return value
    if tp is str:
        if text and isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str):
            raise ValidationError(f"{where}: expected a string, got {value!r}", field=field)
        return value
    if tp is Path:
        if not isinstance(value, (str, Path)):
            raise ValidationError(f"{where}: expected a path, got {value!r}", field=field)
        return Path(value)
    return value


def _number(tp: type, value: Any, where: str, text: bool, field: str) -> Any:
    what = "an integer" if tp is int else "a number"
    if text and isinstance(value, str):
        try:
            parsed = float(value.strip())
        except ValueError:
            raise ValidationError(f"{where}: {value!r} is not {what}", field=field) from None
        if tp is int and not (math.isfinite(parsed) and parsed.is_integer()):
            raise ValidationError(f"{where}: {value!r} is not {what}", field=field)
        return int(parsed) if tp is int else parsed
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValidationError(f"{where}: expected {what}, got {value!r}", field=field)
    if tp is int:
        if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
            raise ValidationError(f"{where}: expected an integer, got {value!r}", field=field)
        return int(value)
    return float(value)


# --------------------------------------------------------------------------- paths into configs
@functools.lru_cache(maxsize=None)
def field_type(cls: type, path: str) -> Any:
    """The declared type at a dotted ``path`` into ``cls`` ("fusion.k" of SearchConfig: float); a
    step through a dict field ("fusion.weights.vector") gives the dict's value type."""
    tp: Any = cls
    for step in path.split("."):
        tp = _bare(tp)
        if dataclasses.is_dataclass(tp):
            hints = typing.get_type_hints(tp)
            if step not in hints:
                raise KeyError(f"{tp.__name__} has no field {step!r}")
            tp = hints[step]
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            raise KeyError(f"{path}: {step!r} is below a {tp}")
    return tp


def kind_at(cls: type, path: str) -> type:
    """The plain kind of the value at ``path``: int, float, bool, str or tuple (what a sweep value
    or a text value is coerced to)."""
    tp = _bare(field_type(cls, path))
    origin = typing.get_origin(tp)
    return origin if origin in (tuple, list) else tp


def rule_at(cls: type, path: str) -> Rule:
    """The declared rule of the field at ``path``; a dict entry's is its dict field's (an empty Rule
    for an undeclared field)."""
    head, _, last = path.rpartition(".")
    owner = _bare(field_type(cls, head)) if head else cls
    if dataclasses.is_dataclass(owner):
        return rule(owner, last)
    return rule_at(cls, head) if typing.get_origin(owner) is dict else Rule()


def _bare(tp: Any) -> Any:
    """``X | None`` -> X."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp
