"""Position-aware context assembly: fused results -> the context an LLM reads, within a token budget.

MAIA's zone scheme, done fully (GUIDE section 3):

* Routing. Working memories always go to recency. Pinned memories and anchors, and items whose
  normalised score (score / best score) is at or above ``critical_threshold``, go to critical.
  Items created within ``recent_hours`` of the reference time and at or above
  ``recency_threshold`` go to recency. The rest go to middle.
* Filling. Zone capacities are the budget times the ratios (critical and middle floored, recency
  takes the remainder, so they sum to the budget). Zones fill in the order critical, middle,
  recency, each greedily by score (ties by memory id). An item that does not fit is skipped and
  smaller ones are still tried; a critical item that does not fit critical is offered to middle.
  What a zone leaves unused flows on to the next zone. The total never exceeds the budget.
* Oversize rule. An item longer than the whole budget is, with ``oversize="truncate"``, cut at a
  token boundary to the space left in its zone when it is considered, provided that leaves at
  least ``min_truncated_tokens``; otherwise, and always with ``oversize="skip"``, it is skipped.
  Items that fit the budget but not the space left are never truncated, only skipped.
* Merging. Items of the same memory (chunks) become one item: the best score, their distinct
  texts in chunk order. Near-duplicates (word-trigram Jaccard >= ``dedupe_threshold``, or equal
  text after normalisation) keep only the higher-scored item, so no text appears twice.
* Neighbours (``neighbours`` > 0). When budget remains after filling, the adjacent turns of a
  placed item's episode (supplied by the caller) are added next to it, best parent first, in the
  parent's zone and with its score, while they fit.
* Order. Critical first, then middle by decreasing score, then recency from oldest to newest
  (the newest item is last).
* Cost. An item costs the tokens of its rendered line: ``[memory_id] text``, so citations are
  paid for; zone headers added by a renderer are not counted.

``assemble`` is pure: same inputs, same context.
"""
from __future__ import annotations

import math
import re
from functools import lru_cache
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from lab.assemble.tokens import EstimateCounter, ExactCounter, TokenCounter, make_counter
from lab.config import ZONES, AssembleConfig
from lab.errors import ValidationError
from lab.store.records import parse_time

__all__ = [
    "AssembleConfig", "Context", "ContextItem", "Item", "ZoneUsage", "assemble", "item_from_result",
    "EstimateCounter", "ExactCounter", "make_counter",
]


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
        from lab.assemble.render import render

        return render(self, fmt)

    def to_dict(self) -> dict[str, Any]:
        return {
            "budget": self.budget, "used": self.used, "counter": self.counter,
            "neighbour_tokens": self.neighbour_tokens,
            "reference_time": self.reference_time.isoformat() if self.reference_time else None,
            "zones": {z: {"capacity": u.capacity, "available": u.available, "used": u.used, "items": u.items,
                          "free": u.free} for z, u in self.zones.items()},
            "items": [i.to_dict() for i in self.items],
            "skipped": [s.__dict__ for s in self.skipped],
        }


def item_from_result(result: Any, pinned: bool = False, episode: str | None = None) -> Item:
    """A search `Result` as an assembly item (title and content as its text)."""
    text = result.content if not result.title else f"{result.title}: {result.content}"
    return Item(result.memory_id, text, float(result.score), result.created_at, result.type,
                bool(getattr(result, "pinned", pinned)), getattr(result, "episode", episode))


def line(memory_id: str, text: str) -> str:
    """An item as rendered (and as paid for): the citation, then the text."""
    return f"[{memory_id}] {text}"


_WORDS = re.compile(r"[^\W_]+")


@lru_cache(maxsize=65536)
def _shingles(text: str) -> frozenset:
    """Hashed word trigrams of the lower-cased text, punctuation ignored (short texts: one shingle).

    Memoised: sweeps and sliders re-assemble the same candidates many times.
    """
    words = _WORDS.findall(text.lower())
    if len(words) < 3:
        return frozenset([hash(tuple(words))])
    return frozenset(map(hash, zip(words, words[1:], words[2:])))


def _merge_chunks(items: Sequence[Item]) -> list[Item]:
    """One item per memory: best score, distinct chunk texts in chunk order."""
    if len({it.memory_id for it in items}) == len(items):
        return list(items)
    by_memory: dict[str, list[Item]] = {}
    for it in items:
        by_memory.setdefault(it.memory_id, []).append(it)
    out = []
    for mid in sorted(by_memory):
        group = by_memory[mid]
        if len(group) == 1:
            out.append(group[0])
            continue
        # sorted on every field that differs, so the merge does not depend on input order
        group.sort(key=lambda i: (i.chunk, i.text, -i.score, i.type, i.pinned, str(i.created_at), i.episode or ""))
        best = max(group, key=lambda i: (i.score, -i.chunk))
        texts: list[str] = []
        for it in group:
            if it.text and not any(it.text in t for t in texts):
                texts = [t for t in texts if t not in it.text] + [it.text]
        out.append(replace(best, text=" … ".join(texts), chunk=0))
    return out


@dataclass(slots=True)
class _Candidate:
    item: Item
    line: str
    tokens: int
    normalised: float
    zone: str
    reason: str
    shingles: frozenset | None = None
    merged: list[str] = field(default_factory=list)
    prefix: list[int] | None = None


def _route(item: Item, normalised: float, recent_from: datetime | None, config: AssembleConfig) -> tuple[str, str]:
    kind = item.type
    if kind == "working":
        return "recency", "working"
    if item.pinned or kind == "anchor":
        return "critical", "pinned"
    if normalised >= config.critical_threshold:
        return "critical", "critical-score"
    if (recent_from is not None and item.created_at is not None and item.created_at >= recent_from
            and normalised >= config.recency_threshold):
        return "recency", "recent"
    return "middle", "rest"


_ZONE_CODE = {z: i for i, z in enumerate(ZONES)}


def _capacities(config: AssembleConfig) -> dict[str, int]:
    critical = math.floor(config.budget * config.critical_ratio)
    middle = math.floor(config.budget * config.middle_ratio)
    return {"critical": critical, "middle": middle, "recency": config.budget - critical - middle}


def assemble(
    results: Iterable[Item | Any],
    config: AssembleConfig = AssembleConfig(),
    *,
    counter: TokenCounter | None = None,
    reference_time: datetime | str | None = None,
    neighbours: Mapping[str, Sequence[Item]] | None = None,
) -> Context:
    """Fill the zones from ``results`` (Items or search Results) without exceeding ``config.budget``.

    ``reference_time`` (or ``config.reference_time``) anchors "recent"; without either, the newest
    item's time is used. ``counter`` defaults to the one ``config.counter`` names. ``neighbours``
    maps a memory id to its adjacent turns (Items), used when ``config.neighbours`` > 0.
    """
    counter = counter or make_counter(config.counter)
    items = [r if isinstance(r, Item) else item_from_result(r) for r in results]
    for it in items:
        if not isinstance(it.score, (int, float)) or math.isnan(it.score):
            raise ValidationError(f"item {it.memory_id!r}: score must be a number, got {it.score!r}")
    items = _merge_chunks(items)
    items.sort(key=lambda i: (-i.score, i.memory_id))  # the greedy order: score, then id
    reference = _reference(reference_time, config, items)
    capacities = _capacities(config)
    best = items[0].score if items else 0.0
    lines = [line(i.memory_id, i.text) for i in items]
    tokens = np.asarray(counter.count_many(lines), dtype=np.int64)
    recent_from = reference - timedelta(hours=config.recent_hours) if reference is not None else None
    inv = 1.0 / best if best > 0 else 0.0
    routes = [_route(it, it.score * inv, recent_from, config) for it in items]
    zone_of = np.fromiter((_ZONE_CODE[z] for z, _ in routes), dtype=np.int64, count=len(routes))
    # an item longer than the whole budget may be truncated to fit the space left (oversize rule)
    truncatable = (tokens > config.budget) if config.oversize == "truncate" else np.zeros(len(items), dtype=bool)
    tok_list, trunc_list = tokens.tolist(), truncatable.tolist()  # scalar access in the greedy loop

    placed: dict[str, list[_Candidate]] = {z: [] for z in ZONES}
    placed_all: list[_Candidate] = []
    dedupe = _Deduper(config.dedupe_threshold)
    duplicates: dict[int, str] = {}  # item index -> the placed memory it duplicates
    last_zone = zone_of.copy()  # the zone each item was last tried in
    usage: dict[str, ZoneUsage] = {}
    carry = 0
    taken = np.zeros(len(items), dtype=bool)  # placed or found to be a duplicate
    for z, zone in enumerate(ZONES):
        available = capacities[zone] + carry
        used = 0
        if zone == "middle":
            # critical items that did not fit critical are offered to middle, in score order
            queue = np.flatnonzero(((zone_of == 1) | (zone_of == 0)) & ~taken)
            last_zone[queue] = 1
        else:
            queue = np.flatnonzero((zone_of == z) & ~taken)
        min_trunc = config.min_truncated_tokens
        for k in queue.tolist():
            space = available - used
            if tok_list[k] > space and not (trunc_list[k] and space >= min_trunc):
                continue  # skip and continue: smaller items may still fit
            it = items[k]
            norm = it.score / best if best > 0 else 0.0
            c = _Candidate(it, lines[k], tok_list[k], norm, zone, routes[k][1])
            if c.tokens > space:
                c = _truncate(c, counter, space)
                if c.tokens > space:
                    continue
            dup = dedupe.find(c)
            taken[k] = True
            if dup is not None:
                dup.merged.append(it.memory_id)
                duplicates[k] = dup.item.memory_id
                continue
            if zone == "middle" and zone_of[k] == 0:
                c.reason = "overflow" + ("+truncated" if c.reason.endswith("+truncated") else "")
            placed[zone].append(c)
            placed_all.append(c)
            dedupe.add(c)
            used += c.tokens
        usage[zone] = ZoneUsage(zone, capacities[zone], available, used, len(placed[zone]))
        carry = available - used

    expansion = 0
    if config.neighbours and neighbours:
        expansion = _expand(placed, placed_all, dedupe, usage["recency"].free, neighbours, counter, config)

    ordered = (
        sorted(placed["critical"], key=_by_score)
        + sorted(placed["middle"], key=_by_score)
        + sorted(placed["recency"], key=_by_time)
    )
    out = [
        ContextItem(
            memory_id=c.item.memory_id, zone=c.zone, position=i, tokens=c.tokens, score=c.item.score,
            normalised=c.normalised, text=c.item.text, created_at=c.item.created_at, type=c.item.type,
            reason=c.reason, truncated=c.reason.endswith("+truncated"), merged=tuple(c.merged),
            neighbour_of=c.reason[len("neighbour-of:"):] if c.reason.startswith("neighbour-of:") else None,
        )
        for i, c in enumerate(ordered, start=1)
    ]

    def skipped() -> list[Skipped]:
        # built on demand: most callers want the items, not the hundreds of left-out candidates
        out_: list[Skipped] = []
        for k in np.flatnonzero(~taken | np.isin(np.arange(len(items)), list(duplicates))).tolist():
            tok, zone = int(tokens[k]), ZONES[int(last_zone[k])]
            if k in duplicates:
                out_.append(Skipped(items[k].memory_id, tok, f"duplicate-of:{duplicates[k]}", zone))
            else:
                out_.append(Skipped(items[k].memory_id, tok, "oversize" if tok > config.budget else "no-space", zone))
        return out_

    return Context(out, usage, config.budget, counter.name, skipped, reference, expansion)


def _by_score(c: _Candidate):
    # neighbours share their parent's score; inside a tie, time order reads as a conversation
    t = c.item.created_at.timestamp() if c.item.created_at else 0.0
    return (-c.item.score, t, c.item.memory_id)


def _by_time(c: _Candidate):
    t = c.item.created_at.timestamp() if c.item.created_at else float("-inf")
    return (t, c.item.memory_id)


def _reference(given: datetime | str | None, config: AssembleConfig, items: Sequence[Item]) -> datetime | None:
    if given is not None:
        return parse_time(given, "reference_time") if isinstance(given, str) else given
    if config.reference_time:
        return parse_time(config.reference_time, "assemble.reference_time")
    times = [i.created_at for i in items if i.created_at is not None]
    return max(times) if times else None


def _truncate(c: _Candidate, counter: TokenCounter, space: int) -> _Candidate:
    prefix = line(c.item.memory_id, "")
    body = counter.truncate(c.line, space)
    text = body[len(prefix):] if body.startswith(prefix) else ""
    truncated = replace(c.item, text=text.rstrip() + " …")
    ln = line(c.item.memory_id, truncated.text)
    tokens = counter.count(ln)
    while tokens > space and text:  # the ellipsis can cost a token: shave words until it fits
        text = text.rsplit(" ", 1)[0] if " " in text.strip() else ""
        truncated = replace(c.item, text=text.rstrip() + " …")
        ln = line(c.item.memory_id, truncated.text)
        tokens = counter.count(ln)
    return _Candidate(truncated, ln, tokens, c.normalised, c.zone, c.reason + "+truncated", None, c.merged)


class _Deduper:
    """Near-duplicate lookup against the placed items, by prefix filtering (a similarity-join
    technique): with the shingles of every set in one global order, two sets with Jaccard >= t
    share at least one of each set's first ``len - ceil(t * len) + 1`` shingles. Only those prefixes
    are indexed and probed; candidates found that way are then checked exactly."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.postings: dict[int, list[int]] = {}
        self.placed: list[_Candidate] = []

    def _prefix(self, c: _Candidate) -> list[int]:
        if c.prefix is None:
            if c.shingles is None:
                c.shingles = _shingles(c.item.text)
            n = len(c.shingles)
            keep = n - math.ceil(self.threshold * n - 1e-9) + 1
            c.prefix = sorted(c.shingles)[: max(1, keep)]
        return c.prefix

    def find(self, c: _Candidate) -> _Candidate | None:
        seen: set[int] = set()
        for sh in self._prefix(c):
            seen.update(self.postings.get(sh, ()))
        a = c.shingles
        for j in sorted(seen):
            b = self.placed[j].shingles
            inter = len(a & b)
            if inter / (len(a) + len(b) - inter) >= self.threshold:
                return self.placed[j]
        return None

    def add(self, c: _Candidate) -> None:
        j = len(self.placed)
        self.placed.append(c)
        for sh in self._prefix(c):
            self.postings.setdefault(sh, []).append(j)


def _expand(placed, placed_all, dedupe: _Deduper, free: int, neighbours, counter: TokenCounter, config: AssembleConfig) -> int:
    """Adjacent turns of placed items, best parent first, within ``free`` tokens; returns tokens spent.

    They join their parent's zone (for order) but are booked apart from the zones' fill, since
    they spend only what every zone left unused.
    """
    have = {c.item.memory_id for c in placed_all}
    spent = 0
    for parent in sorted(placed_all, key=lambda c: (-c.item.score, c.item.memory_id)):
        if parent.reason.startswith("neighbour"):
            continue
        adjacent = sorted(neighbours.get(parent.item.memory_id, ()), key=lambda i: (
            abs((i.created_at - parent.item.created_at).total_seconds()) if i.created_at and parent.item.created_at else 0,
            i.memory_id))[: 2 * config.neighbours]
        for nb in adjacent:
            if nb.memory_id in have:
                continue
            ln = line(nb.memory_id, nb.text)
            tok = counter.count(ln)
            if tok > free - spent:
                continue
            cand = _Candidate(replace(nb, score=parent.item.score), ln, tok, parent.normalised, parent.zone,
                              f"neighbour-of:{parent.item.memory_id}")
            if dedupe.find(cand) is not None:
                continue
            placed[parent.zone].append(cand)
            placed_all.append(cand)
            dedupe.add(cand)
            have.add(nb.memory_id)
            spent += tok
    return spent
