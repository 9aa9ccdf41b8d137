"""The sweep file: dataset(s), search space, strategy, trial budget, objective and constraints.

```yaml
name: demo-small
dataset: demo                 # locomo, scifact, demo, a golden .yaml, a LoCoMo .json or a BEIR folder
base: lab                     # the preset (or a .yaml/.json SearchConfig) the space varies
strategy: grid                # grid | random | tpe
trials: 200                   # random / tpe: how many configurations; grid: a cap (all when absent)
seed: 0
objective: recall@10          # maximised, on the tune part
constraints: ["context_tokens <= 2000"]
ks: [5, 10]
validation: 0.3               # share of questions (by conversation where there are several) held out
space:
  fusion.k: [0, 1, 2, 5, 10, 20, 60, 100, 200]         # a list: these values
  fusion.weights.vector: {low: 0.0, high: 1.0, step: 0.25}  # a range (step: grid points)
  index.context_turns: [0, 2]                           # index time: eval store + candidates per value
  assemble.budget: [1000, 2000]                         # assembly: scored for the best configurations
```
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lab.config import ENCODERS, LexicalIndexConfig, read_yaml
from lab.errors import ValidationError
from lab.search.fusion import get_fuser
from lab.tune.batch import metric_names
from lab.tune.dimension import Dimension
from lab.fields import coerce
from lab.tune.params import LEXICAL_DIMS, PARAMS, param
from lab.tune.strategies import STRATEGIES

# every parameter a sweep can vary, with its kind (lab.tune.params declares each once, with its
# config path); the kind decides what a change costs
FUSION_PARAMS = {name: p.kind for name, p in PARAMS.items() if p.target == "search" and name != "index.depth"}
INDEX_PARAMS = {name: p.kind for name, p in PARAMS.items() if name.startswith("index.")}
ASSEMBLE_PARAMS = {name: p.kind for name, p in PARAMS.items() if p.target == "assemble"}
PARAM_KINDS = {**FUSION_PARAMS, **INDEX_PARAMS, **ASSEMBLE_PARAMS}
CONTEXT_METRICS = ("context_recall", "context_gold_critical", "context_tokens")
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_@0-9.]+)\s*(<=|>=|<|>|==)\s*(-?[0-9.eE+-]+)\s*$")


@dataclass(frozen=True)
class Constraint:
    metric: str
    op: str
    value: float

    def ok(self, measured: float) -> bool:
        return {"<=": measured <= self.value, ">=": measured >= self.value, "<": measured < self.value,
                ">": measured > self.value, "==": measured == self.value}[self.op]

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.value:g}"


@dataclass(frozen=True)
class SweepSpec:
    name: str
    dataset: str
    space: tuple[Dimension, ...]
    base: str = "lab"
    strategy: str = "grid"
    trials: int | None = None
    seed: int = 0
    objective: str = "recall@10"
    constraints: tuple[Constraint, ...] = ()
    ks: tuple[int, ...] = (5, 10)
    validation: float = 0.3
    top_n: int = 5  # best configurations logged as child runs and scored for assembly
    observations: bool = False
    source: dict[str, Any] = field(default_factory=dict, compare=False)

    def dims(self, stage: str) -> tuple[Dimension, ...]:
        return tuple(d for d in self.space if d.stage == stage)


_KEYS = {"name", "dataset", "space", "base", "strategy", "trials", "seed", "objective", "constraints", "ks",
         "validation", "top_n", "observations"}


def _dimension(name: str, raw: Any) -> Dimension:
    if name not in PARAM_KINDS:
        raise ValidationError(f"space: unknown parameter {name!r}; known: {sorted(PARAM_KINDS)}")
    kind = PARAM_KINDS[name]
    if isinstance(raw, list):
        if not raw:
            raise ValidationError(f"space.{name}: an empty list of values")
        return Dimension(name, tuple(_value(name, kind, v) for v in raw), kind=kind)
    if isinstance(raw, dict):
        unknown = sorted(set(raw) - {"low", "high", "step"})
        if unknown or "low" not in raw or "high" not in raw:
            raise ValidationError(f"space.{name}: a range needs low and high (and may have step), got {raw!r}")
        if kind not in (int, float):
            raise ValidationError(f"space.{name}: a range needs a numeric parameter; give a list of values")
        low, high = _value(name, float, raw["low"]), _value(name, float, raw["high"])
        if high < low:
            raise ValidationError(f"space.{name}: high {high} is below low {low}")
        if "step" in raw:
            step = coerce(float, raw["step"], f"space.{name}.step")
            if not math.isfinite(step) or step <= 0:
                raise ValidationError(f"space.{name}: step must be a finite number > 0, got {step}")
            n = int(math.floor((high - low) / step + 1e-9)) + 1
            values = tuple(kind(round(low + i * step, 10)) for i in range(n))
            return Dimension(name, values, low, high, kind)
        return Dimension(name, (), low, high, kind)
    return Dimension(name, (_value(name, kind, raw),), kind=kind)


def _value(name: str, kind: type, v: Any) -> Any:
    """One value of a dimension, coerced to its config field's kind and checked against the
    field's declared rule (lab.fields), so a sweep file is refused where a config would be."""
    if kind is tuple:  # names: the encoders a store carries, or the lists a search ranks
        known = list(ENCODERS) if name == "index.models" else list(ENCODERS.values())
        names = [v] if isinstance(v, str) else v
        if not isinstance(names, list) or any(n not in known for n in names):
            raise ValidationError(f"space.{name}: each value is a list of names from {known}, got {v!r}",
                                  field=f"space.{name}")
        return tuple(names)
    value = coerce(kind, v, f"space.{name}")
    declared = PARAMS[name].rule if name in PARAMS else param(name).rule
    problem = declared.problem(value) if (kind in (int, float) or declared.choices) else None
    if problem is None and kind in (int, float) and not math.isfinite(value):
        problem = f"must be a finite number, got {v!r}"
    if problem:
        raise ValidationError(f"space.{name} {problem}", field=f"space.{name}")
    return value


def _check_fuser(dim: Dimension) -> None:
    """Every fuser a sweep names is registered: a misspelt one fails when the sweep file is read."""
    if dim.name != "fusion.method":
        return

    for value in dim.values:
        try:
            get_fuser(value)
        except ValidationError as exc:
            raise ValidationError(f"space.{dim.name}: {exc}") from None


def _check_lexical(dim: Dimension) -> None:
    """Every value of a lexical index dimension makes a valid index configuration:
    a misspelt variant or stemmer fails when the sweep file is read, not at its index point."""
    if dim.name not in LEXICAL_DIMS:
        return
    field_name = LEXICAL_DIMS[dim.name][0]

    for value in dim.values or (dim.low, dim.high):
        try:
            LexicalIndexConfig(**{field_name: value})
        except ValidationError as exc:
            raise ValidationError(f"space.{dim.name}: {exc}") from None


def parse_spec(data: dict[str, Any], where: str = "sweep") -> SweepSpec:
    """A SweepSpec from a parsed YAML mapping; every problem names its key."""
    if not isinstance(data, dict):
        raise ValidationError(f"{where}: expected a mapping, got {type(data).__name__}")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ValidationError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_KEYS)}")
    for key in ("dataset", "space"):
        if key not in data:
            raise ValidationError(f"{where}: missing {key!r}")
    space = data["space"]
    if not isinstance(space, dict) or not space:
        raise ValidationError(f"{where}.space: expected a non-empty mapping of parameter -> values")
    dims = tuple(_dimension(str(k), v) for k, v in space.items())
    for dim in dims:
        _check_lexical(dim)
        _check_fuser(dim)
    strategy = str(data.get("strategy", "grid"))
    if strategy not in STRATEGIES:
        raise ValidationError(f"{where}.strategy: unknown {strategy!r}; known: {sorted(STRATEGIES)}")
    trials = data.get("trials")
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 1):
        raise ValidationError(f"{where}.trials: expected an integer >= 1, got {trials!r}")
    if strategy != "grid" and trials is None:
        raise ValidationError(f"{where}.trials: strategy {strategy!r} needs a trial budget")
    if strategy == "grid":
        open_ = [d.name for d in dims if not d.values]
        if open_:
            raise ValidationError(f"{where}.space: grid needs values or a step for {open_}")
    ks = tuple(int(k) for k in data.get("ks", (5, 10)))
    if not ks or any(k < 1 for k in ks):
        raise ValidationError(f"{where}.ks: expected cutoffs >= 1, got {list(ks)}")
    objective = str(data.get("objective", "recall@10"))
    _check_metric(objective, ks, f"{where}.objective")
    constraints = []
    for raw in data.get("constraints") or []:
        m = _CONSTRAINT.match(str(raw))
        if not m:
            raise ValidationError(f"{where}.constraints: cannot read {raw!r}; write e.g. 'context_tokens <= 2000'")
        _check_metric(m.group(1), ks, f"{where}.constraints")
        constraints.append(Constraint(m.group(1), m.group(2), float(m.group(3))))
    validation = data.get("validation", 0.3)
    if isinstance(validation, bool) or not isinstance(validation, (int, float)) or not 0 <= validation < 1:
        raise ValidationError(f"{where}.validation: expected a share in [0, 1), got {validation!r}")
    top_n = data.get("top_n", 5)
    if isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 1:
        raise ValidationError(f"{where}.top_n: expected an integer >= 1, got {top_n!r}")
    return SweepSpec(
        name=str(data.get("name") or "sweep"), dataset=str(data["dataset"]), space=dims,
        base=str(data.get("base", "lab")), strategy=strategy, trials=trials, seed=int(data.get("seed", 0)),
        objective=objective, constraints=tuple(constraints), ks=ks, validation=float(validation), top_n=top_n,
        observations=bool(data.get("observations", False)), source=data)


def _check_metric(name: str, ks: tuple[int, ...], where: str) -> None:
    known = [*metric_names(ks), *CONTEXT_METRICS]
    if name not in known:
        raise ValidationError(f"{where}: unknown metric {name!r}; known with ks {list(ks)}: {known}")


def load_spec(path: str | Path) -> SweepSpec:
    return parse_spec(read_yaml(path, "sweep file"), where=str(Path(path)))
