"""One swept parameter: its name (``fusion.k``), its values or range, and its kind."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Dimension:
    name: str
    values: tuple[Any, ...] = ()  # the choices (a list, or a range with a step)
    low: float | None = None  # a continuous range (random / tpe draw from it; grid needs a step)
    high: float | None = None
    kind: type = float

    @property
    def stage(self) -> str:
        return self.name.split(".", 1)[0]
