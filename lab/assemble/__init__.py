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
from operator import attrgetter
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from lab.assemble.dedupe import Deduper, Signature, signatures
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
    merged: list[str] = field(default_factory=list)
    sig: Signature | None = None


_NUMBER = (int, float, np.floating, np.integer)


def _capacities(config: AssembleConfig) -> dict[str, int]:
    critical = math.floor(config.budget * config.critical_ratio)
    middle = math.floor(config.budget * config.middle_ratio)
    return {"critical": critical, "middle": middle, "recency": config.budget - critical - middle}


def _zones(items: Sequence[Item], norm: np.ndarray, recent_from: datetime | None,
           config: AssembleConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zone code per item (0 critical, 1 middle, 2 recency), plus the working and pinned masks.

    Rules by precedence: working -> recency; pinned or anchor -> critical; normalised score at or
    above the critical threshold -> critical; recent and at or above the recency threshold ->
    recency; else middle. Assigned here from the weakest rule to the strongest.
    """
    n = len(items)
    types = list(map(_get_type, items))
    pins = list(map(_get_pinned, items))
    working = np.zeros(n, dtype=bool)
    pinned = np.zeros(n, dtype=bool)
    # most candidates are plain memories: find (by C-level list.index) only the special ones present
    kinds = set(types)
    if "working" in kinds:
        working[_positions(types, "working")] = True
    if "anchor" in kinds:
        pinned[_positions(types, "anchor")] = True
    pin_values = set(pins)
    if pin_values <= {False, True}:
        if True in pin_values:
            pinned[_positions(pins, True)] = True
    else:  # truthy values other than True
        pinned |= np.fromiter(map(bool, pins), dtype=bool, count=n)
    zone = np.ones(n, dtype=np.int64)
    if recent_from is not None:
        # only items at or above the recency threshold can be routed there: compare only their times
        able = np.flatnonzero(norm >= config.recency_threshold).tolist()
        recent = [k for k in able if items[k].created_at is not None and items[k].created_at >= recent_from]
        zone[recent] = 2
    zone[norm >= config.critical_threshold] = 0
    zone[pinned] = 0
    zone[working] = 2
    return zone, working, pinned


def _positions(seq: list, value: Any) -> list[int]:
    """Every index of ``value`` in ``seq``, each found by ``list.index`` (a C loop)."""
    out, at = [], -1
    try:
        while True:
            at = seq.index(value, at + 1)
            out.append(at)
    except ValueError:
        return out


def _reason(zone: int, working: bool, pinned: bool) -> str:
    if zone == 2:
        return "working" if working else "recent"
    if zone == 0:
        return "pinned" if pinned else "critical-score"
    return "rest"


_ALWAYS_INLINE = False  # tests set it to check the batch shortcut against checking inline


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
    items = list(results)
    if not set(map(type, items)) <= {Item}:
        items = [r if isinstance(r, Item) else item_from_result(r) for r in items]
    ids = list(map(_get_id, items))
    if len(set(ids)) != len(ids):
        items = _merge_chunks(items)
        ids = list(map(_get_id, items))
    scores = list(map(_get_score, items))
    n = len(items)
    score_arr = np.asarray(scores, dtype=np.float64) if set(map(type, scores)) <= {float, int} else None
    if score_arr is None or np.isnan(score_arr).any():
        for it, sc in zip(items, scores):
            if not isinstance(sc, _NUMBER) or sc != sc:
                raise ValidationError(f"item {it.memory_id!r}: score must be a number, got {sc!r}")
        score_arr = np.asarray(scores, dtype=np.float64)
    # Everything below is indexed by the item's input position k; ``order`` lists the positions in
    # the greedy order: score descending, then memory id. A stable argsort gives it unless scores
    # tie; then (rarely) a sort on (score, id) tuples, which compares in C.
    order = np.argsort(-score_arr, kind="stable")
    by_rank = score_arr[order]
    if n > 1 and not (by_rank[1:] < by_rank[:-1]).all():
        order = np.asarray([k for _, _, k in sorted(zip((-score_arr).tolist(), ids, range(n)))], dtype=np.int64)
    reference = _reference(reference_time, config, items)
    capacities = _capacities(config)
    best = float(score_arr[order[0]]) if n else 0.0
    norm = score_arr / best if best > 0 else np.zeros(n)
    recent_from = reference - timedelta(hours=config.recent_hours) if reference is not None else None
    zone_of, working, pinned = _zones(items, norm, recent_from, config)

    # Token counts. A line costs at least its lower bound (the estimator's chars / 4); exact counts
    # are taken only for items that get that far, so a full budget stops the scan early instead of
    # counting hundreds of candidates that cannot fit. Counters without bounds count everything.
    text_chars = np.fromiter(map(len, map(_get_text, items)), dtype=np.int64, count=n)
    bounds = getattr(counter, "bounds", None)
    tok: list[int | None]
    if bounds is not None:
        # a line is "[id] text": at least 4 characters besides the text, at most 3 + the longest id
        low, _ = bounds(text_chars + 4)
        _, high = bounds(text_chars + 3 + (max(map(len, ids)) if n else 0))
        tok = [None] * n
        over = low > config.budget
        # whether an item exceeds the whole budget (and so may be truncated) must be known exactly
        for k in np.flatnonzero(~over & (high > config.budget)).tolist():
            t = tok[k] = counter.count(line(ids[k], items[k].text))
            over[k] = t > config.budget
    else:
        tok = list(counter.count_many([line(i, it.text) for i, it in zip(ids, items)]))
        low = np.asarray(tok, dtype=np.int64)
        over = low > config.budget
    truncatable = over if config.oversize == "truncate" else np.zeros(n, dtype=bool)
    # plain lists for scalar access in the greedy loop (numpy scalar indexing is slow)
    low_list, trunc_list = low.tolist(), truncatable.tolist()
    norm_list, zone_list = norm.tolist(), zone_of.tolist()
    working_list, pinned_list = working.tolist(), pinned.tolist()
    min_trunc = config.min_truncated_tokens
    zone_by_rank = zone_of[order]

    threshold = config.dedupe_threshold

    def fill(inline: Deduper | None):
        """The greedy fill of the three zones; near-duplicates are checked as items are placed
        when ``inline`` is given, else not at all."""
        placed: dict[str, list[_Candidate]] = {z: [] for z in ZONES}
        placed_all: list[_Candidate] = []
        duplicates: dict[int, str] = {}  # item index -> the placed memory it duplicates
        last_zone = zone_of.copy()  # the zone each item was last tried in
        usage: dict[str, ZoneUsage] = {}
        carry = 0
        taken_list = [False] * n  # placed or found to be a duplicate
        for z, zone in enumerate(ZONES):
            available = capacities[zone] + carry
            free_by_rank = ~np.asarray(taken_list, dtype=bool)[order]
            if zone == "middle":
                # critical items that did not fit critical are offered to middle, in score order
                queue = order[(zone_by_rank <= 1) & free_by_rank]
                last_zone[queue] = 1
            else:
                queue = order[(zone_by_rank == z) & free_by_rank]
            # per queue position: the smallest lower bound still to come, and whether any is truncatable
            rest_low = np.minimum.accumulate(low[queue][::-1])[::-1].tolist()
            rest_trunc = np.logical_or.accumulate(truncatable[queue][::-1])[::-1].tolist()
            space = available
            for k, rest_l, rest_t in zip(queue.tolist(), rest_low, rest_trunc):
                if low_list[k] > space:  # cannot fit whole
                    if rest_l > space and not (rest_t and space >= min_trunc):
                        break  # nothing from here on can fit (or be truncated into) the space left
                    if not trunc_list[k] or space < min_trunc:
                        continue  # skip and continue: smaller items may still fit
                it = items[k]
                ln = f"[{ids[k]}] {it.text}"  # line(), inlined
                t = tok[k]
                if t is None:
                    t = tok[k] = counter.count(ln)
                if t > space and not (trunc_list[k] and space >= min_trunc):
                    continue
                c = _Candidate(it, ln, t, norm_list[k], zone, _reason(zone_list[k], working_list[k], pinned_list[k]))
                if t > space:
                    c = _truncate(c, counter, space)
                    if c.tokens > space:
                        continue
                taken_list[k] = True
                if inline is not None:
                    c.sig = signatures([c.item.text], threshold)[0]
                    dup = inline.find(c.sig)
                    if dup is not None:
                        dup.merged.append(it.memory_id)
                        duplicates[k] = dup.item.memory_id
                        continue
                    inline.add(c.sig, c)
                if zone == "middle" and zone_list[k] == 0:
                    c.reason = "overflow" + ("+truncated" if c.reason.endswith("+truncated") else "")
                placed[zone].append(c)
                placed_all.append(c)
                space -= c.tokens
            usage[zone] = ZoneUsage(zone, capacities[zone], available, available - space, len(placed[zone]))
            carry = space
        return placed, placed_all, usage, duplicates, last_zone, taken_list

    # Fill once without looking for near-duplicates, then shingle everything placed in one batch.
    # If no two placed items are near-duplicates, checking as they were placed would have changed
    # nothing (each would have fitted and found no earlier duplicate), so this is the answer; else
    # fill again, checking each item as it is placed. The batch is what makes a new query's texts cheap.
    placed, placed_all, usage, duplicates, last_zone, taken_list = fill(None)
    dedupe = Deduper(threshold)
    clean = not _ALWAYS_INLINE
    for c, sig in zip(placed_all, signatures([c.item.text for c in placed_all], threshold)):
        c.sig = sig
        if dedupe.find(sig) is not None:
            clean = False
            break
        dedupe.add(sig, c)
    if not clean:
        dedupe = Deduper(threshold)
        placed, placed_all, usage, duplicates, last_zone, taken_list = fill(dedupe)

    expansion = 0
    if config.neighbours and neighbours:
        expansion = _expand(placed, placed_all, dedupe, usage["recency"].free, neighbours, counter, config)

    ordered = (
        sorted(placed["critical"], key=_by_score)
        + sorted(placed["middle"], key=_by_score)
        + sorted(placed["recency"], key=_by_time)
    )
    out = [
        ContextItem(  # positional: this runs for every placed item
            c.item.memory_id, c.zone, i, c.tokens, c.item.score, c.normalised, c.item.text, c.item.created_at,
            c.item.type, c.reason, c.reason.endswith("+truncated"), tuple(c.merged),
            c.reason[len("neighbour-of:"):] if c.reason.startswith("neighbour-of:") else None,
        )
        for i, c in enumerate(ordered, start=1)
    ]

    def skipped() -> list[Skipped]:
        # built on demand: most callers want the items, not the hundreds of left-out candidates
        left = [k for k in order.tolist() if not taken_list[k] or k in duplicates]  # in greedy order
        todo = [k for k in left if tok[k] is None]
        for k, t in zip(todo, counter.count_many([line(ids[k], items[k].text) for k in todo])):
            tok[k] = t
        out_: list[Skipped] = []
        for k in left:
            zone = ZONES[int(last_zone[k])]
            if k in duplicates:
                out_.append(Skipped(ids[k], tok[k], f"duplicate-of:{duplicates[k]}", zone))
            else:
                out_.append(Skipped(ids[k], tok[k], "oversize" if tok[k] > config.budget else "no-space", zone))
        return out_

    return Context(out, usage, config.budget, counter.name, skipped, reference, expansion)


_get_score = attrgetter("score")
_get_id = attrgetter("memory_id")
_get_text = attrgetter("text")
_get_type = attrgetter("type")
_get_pinned = attrgetter("pinned")


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
    return _Candidate(truncated, ln, tokens, c.normalised, c.zone, c.reason + "+truncated", merged=c.merged)


def _expand(placed, placed_all, dedupe: Deduper, free: int, neighbours, counter: TokenCounter, config: AssembleConfig) -> int:
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
            cand.sig = signatures([nb.text], config.dedupe_threshold)[0]
            if dedupe.find(cand.sig) is not None:
                continue
            placed[parent.zone].append(cand)
            placed_all.append(cand)
            dedupe.add(cand.sig, cand)
            have.add(nb.memory_id)
            spent += tok
    return spent
