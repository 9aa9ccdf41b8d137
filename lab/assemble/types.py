"""The data of assembly: items offered, items placed, zone usage, skips, the context, and the rendered line."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from lab.assemble.dedupe import Signature
from lab.assemble.render import render
from lab.store.records import item_text


@dataclass(frozen=True)
class Item:
    """One retrieved memory (or chunk of one) offered to assembly."""
    memory_id: str
    text: str
    score: float
    created_at: datetime | None = None
    type: str = "semantic"
    pinned: bool = False
    episode: str | None = None  # session / episode key, for neighbour expansion
    chunk: int = 0  # ordinal when the item is one chunk of a longer memory


@dataclass(slots=True)  # not frozen: frozen dataclasses pay a setattr call per field, per item
class ContextItem:
    memory_id: str
    zone: str
    position: int  # 1-based, in reading order
    tokens: int
    score: float
    normalised: float  # score / best score
    text: str
    created_at: datetime | None
    type: str
    reason: str  # why this zone: working | pinned | critical-score | recent | rest | overflow | neighbour
    truncated: bool = False
    merged: tuple[str, ...] = ()  # near-duplicates folded into this item
    neighbour_of: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {f: getattr(self, f) for f in self.__slots__}
        out["created_at"] = self.created_at.isoformat() if self.created_at else None
        out["merged"] = list(self.merged)
        return out


@dataclass(frozen=True)
class ZoneUsage:
    zone: str
    capacity: int  # its share of the budget
    available: int  # capacity + what earlier zones left unused
    used: int
    items: int

    @property
    def free(self) -> int:
        return self.available - self.used


@dataclass(frozen=True)
class Skipped:
    memory_id: str
    tokens: int
    reason: str  # duplicate-of:<id> | no-space | oversize
    zone: str = ""  # the zone it was last tried in


@dataclass
class Context:
    items: list[ContextItem]
    zones: dict[str, ZoneUsage]
    budget: int
    counter: str
    _skipped: Any = field(default_factory=list, repr=False)  # a list, or a function that builds it
    reference_time: datetime | None = None
    neighbour_tokens: int = 0  # spent after filling, from what the zones left unused
    # the search's abstention decision (lab.search.abstain.Abstention) when the context came from
    # one: an abstaining search assembles nothing
    abstention: Any = None

    @property
    def skipped(self) -> list[Skipped]:
        """Candidates left out, with why (duplicate-of:<id>, no-space, oversize) and the zone last tried."""
        if callable(self._skipped):
            self._skipped = self._skipped()
        return self._skipped

    @property
    def used(self) -> int:
        return sum(i.tokens for i in self.items)

    @property
    def ids(self) -> list[str]:
        return [i.memory_id for i in self.items]

    def render(self, fmt: str = "text") -> str:
        return render(self.items, fmt)

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget, "used": self.used, "counter": self.counter,
            "neighbour_tokens": self.neighbour_tokens,
            "reference_time": self.reference_time.isoformat() if self.reference_time else None,
            "zones": {z: {"capacity": u.capacity, "available": u.available, "used": u.used, "items": u.items,
                          "free": u.free} for z, u in self.zones.items()},
            "items": [i.to_dict() for i in self.items],
            "skipped": [s.__dict__ for s in self.skipped],
            **({"abstention": self.abstention.to_dict()} if self.abstention is not None else {}),
        }


def item_from_result(result: Any, pinned: bool = False, episode: str | None = None) -> Item:
    """A search `Result` as an assembly item (title and content as its text)."""
    return Item(result.memory_id, item_text(result.title, result.content), float(result.score), result.created_at, result.type,
                bool(getattr(result, "pinned", pinned)), getattr(result, "episode", episode))


@dataclass(slots=True)
class _Candidate:
    """An item on its way into a zone: shared by the fill, the truncation and the neighbour expansion."""
    item: Item
    line: str
    tokens: int
    normalised: float
    zone: str
    reason: str
    merged: list[str] = field(default_factory=list)
    sig: Signature | None = None
