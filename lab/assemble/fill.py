"""``assemble()``: the greedy fill of the zones, with the batch near-duplicate check and its inline fallback."""
from __future__ import annotations

from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from lab.assemble.dedupe import Deduper, signatures
from lab.assemble.merge import _merge_chunks
from lab.assemble.neighbours import _expand
from lab.assemble.render import line
from lab.assemble.routing import _reason, _zones, capacities as zone_capacities
from lab.assemble.tokens import TokenCounter, make_counter
from lab.assemble.truncate import _truncate
from lab.assemble.types import Context, ContextItem, Item, Skipped, ZoneUsage, _Candidate, item_from_result
from lab.config import ZONES, AssembleConfig
from lab.errors import ValidationError
from lab.store.records import parse_time

_NUMBER = (int, float, np.floating, np.integer)

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
    items, ids, score_arr = _scored_items(results)
    order = _greedy_order(score_arr, ids)
    reference = _reference(reference_time, config, items)
    n = len(items)
    best = float(score_arr[order[0]]) if n else 0.0
    norm = score_arr / best if best > 0 else np.zeros(n)
    recent_from = reference - timedelta(hours=config.recent_hours) if reference is not None else None
    zone_of, working, pinned = _zones(items, norm, recent_from, config)
    tok, low, over = _token_bounds(items, ids, counter, config.budget)
    zones = _ZoneFill(items, ids, order, norm, zone_of, working, pinned, tok, low,
                      over if config.oversize == "truncate" else np.zeros(n, dtype=bool), counter, config)

    # Fill once without looking for near-duplicates, then shingle everything placed in one batch.
    # If no two placed items are near-duplicates, checking as they were placed would have changed
    # nothing (each would have fitted and found no earlier duplicate), so this is the answer; else
    # fill again, checking each item as it is placed. The batch is what makes a new query's texts cheap.
    filled = zones.fill(None)
    dedupe = Deduper(config.dedupe_threshold)
    clean = not _ALWAYS_INLINE
    for c, sig in zip(filled.placed_all, signatures([c.item.text for c in filled.placed_all], config.dedupe_threshold)):
        c.sig = sig
        if dedupe.find(sig) is not None:
            clean = False
            break
        dedupe.add(sig, c)
    if not clean:
        dedupe = Deduper(config.dedupe_threshold)
        filled = zones.fill(dedupe)

    expansion = 0
    if config.neighbours and neighbours:
        expansion = _expand(filled.placed, filled.placed_all, dedupe, filled.usage["recency"].free, neighbours,
                            counter, config)
    return Context(_context_items(filled.placed), filled.usage, config.budget, counter.name,
                   lambda: zones.skipped(filled), reference, expansion)


def _scored_items(results: Iterable[Item | Any]) -> tuple[list[Item], list[str], np.ndarray]:
    """The results as Items (chunks of one memory merged), their ids and their scores, each a number."""
    items = list(results)
    if not set(map(type, items)) <= {Item}:
        items = [r if isinstance(r, Item) else item_from_result(r) for r in items]
    ids = list(map(_get_id, items))
    if len(set(ids)) != len(ids):
        items = _merge_chunks(items)
        ids = list(map(_get_id, items))
    scores = list(map(_get_score, items))
    score_arr = np.asarray(scores, dtype=np.float64) if set(map(type, scores)) <= {float, int} else None
    if score_arr is None or np.isnan(score_arr).any():
        for it, sc in zip(items, scores):
            if not isinstance(sc, _NUMBER) or sc != sc:
                raise ValidationError(f"item {it.memory_id!r}: score must be a number, got {sc!r}")
        score_arr = np.asarray(scores, dtype=np.float64)
    return items, ids, score_arr


def _greedy_order(score_arr: np.ndarray, ids: list[str]) -> np.ndarray:
    """Input positions in the greedy order: score descending, then memory id. A stable argsort gives
    it unless scores tie; then (rarely) a sort on (score, id) tuples, which compares in C."""
    n = len(ids)
    order = np.argsort(-score_arr, kind="stable")
    by_rank = score_arr[order]
    if n > 1 and not (by_rank[1:] < by_rank[:-1]).all():
        order = np.asarray([k for _, _, k in sorted(zip((-score_arr).tolist(), ids, range(n)))], dtype=np.int64)
    return order


def _token_bounds(items: list[Item], ids: list[str], counter: TokenCounter,
                  budget: int) -> tuple[list[int | None], np.ndarray, np.ndarray]:
    """(exact token counts where known, a lower bound per item, whether each exceeds the budget).

    A line costs at least its lower bound (the estimator's chars / 4); exact counts are taken only
    for items that get that far, so a full budget stops the scan early instead of counting hundreds
    of candidates that cannot fit. Counters without bounds count everything."""
    n = len(items)
    text_chars = np.fromiter(map(len, map(_get_text, items)), dtype=np.int64, count=n)
    bounds = getattr(counter, "bounds", None)
    tok: list[int | None]
    if bounds is not None:
        # a line is "[id] text": at least 4 characters besides the text, at most 3 + the longest id
        low, _ = bounds(text_chars + 4)
        _, high = bounds(text_chars + 3 + (max(map(len, ids)) if n else 0))
        tok = [None] * n
        over = low > budget
        # whether an item exceeds the whole budget (and so may be truncated) must be known exactly
        for k in np.flatnonzero(~over & (high > budget)).tolist():
            t = tok[k] = counter.count(line(ids[k], items[k].text))
            over[k] = t > budget
    else:
        tok = list(counter.count_many([line(i, it.text) for i, it in zip(ids, items)]))
        low = np.asarray(tok, dtype=np.int64)
        over = low > budget
    return tok, low, over


class _Filled:
    """One greedy fill: what each zone holds, and what was left out and why."""

    __slots__ = ("placed", "placed_all", "usage", "duplicates", "last_zone", "taken")

    def __init__(self, placed: dict[str, list[_Candidate]], placed_all: list[_Candidate], usage: dict[str, ZoneUsage],
                 duplicates: dict[int, str], last_zone: np.ndarray, taken: list[bool]) -> None:
        self.placed, self.placed_all, self.usage = placed, placed_all, usage
        self.duplicates, self.last_zone, self.taken = duplicates, last_zone, taken  # by input position


class _ZoneFill:
    """The items of one assembly, indexed by input position, with what the greedy fill reads:
    zones, normalised scores, token counts and bounds, which may be truncated."""

    def __init__(self, items: list[Item], ids: list[str], order: np.ndarray, norm: np.ndarray, zone_of: np.ndarray,
                 working: np.ndarray, pinned: np.ndarray, tok: list[int | None], low: np.ndarray,
                 truncatable: np.ndarray, counter: TokenCounter, config: AssembleConfig) -> None:
        self.items, self.ids, self.order, self.zone_of = items, ids, order, zone_of
        self.tok, self.low, self.truncatable, self.counter, self.config = tok, low, truncatable, counter, config
        self.capacities = zone_capacities(config)
        # plain lists for scalar access in the greedy loop (numpy scalar indexing is slow)
        self.low_list, self.trunc_list = low.tolist(), truncatable.tolist()
        self.norm_list, self.zone_list = norm.tolist(), zone_of.tolist()
        self.working_list, self.pinned_list = working.tolist(), pinned.tolist()
        self.zone_by_rank = zone_of[order]

    def fill(self, inline: Deduper | None) -> _Filled:
        """The greedy fill of the three zones; near-duplicates are checked as items are placed
        when ``inline`` is given, else not at all."""
        items, ids, order, tok, counter, low, truncatable = (self.items, self.ids, self.order, self.tok, self.counter,
                                                             self.low, self.truncatable)
        low_list, trunc_list, norm_list, zone_list = self.low_list, self.trunc_list, self.norm_list, self.zone_list
        working_list, pinned_list, zone_by_rank = self.working_list, self.pinned_list, self.zone_by_rank
        min_trunc, threshold, capacities = self.config.min_truncated_tokens, self.config.dedupe_threshold, self.capacities
        placed: dict[str, list[_Candidate]] = {z: [] for z in ZONES}
        placed_all: list[_Candidate] = []
        duplicates: dict[int, str] = {}  # item index -> the placed memory it duplicates
        last_zone = self.zone_of.copy()  # the zone each item was last tried in
        usage: dict[str, ZoneUsage] = {}
        carry = 0
        taken_list = [False] * len(items)  # placed or found to be a duplicate
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
                    # the minimum is of the memory's own text: an id and a title with "…" after them
                    # spend tokens and say nothing
                    if c.tokens > space or counter.count(c.item.text.removesuffix(" …")) < min_trunc:
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
        return _Filled(placed, placed_all, usage, duplicates, last_zone, taken_list)

    def skipped(self, filled: _Filled) -> list[Skipped]:
        """What was left out, in greedy order, and why (built on demand: most callers want the
        items, not the hundreds of left-out candidates)."""
        ids, tok, taken, duplicates = self.ids, self.tok, filled.taken, filled.duplicates
        left = [k for k in self.order.tolist() if not taken[k] or k in duplicates]
        todo = [k for k in left if tok[k] is None]
        for k, t in zip(todo, self.counter.count_many([line(ids[k], self.items[k].text) for k in todo])):
            tok[k] = t
        out: list[Skipped] = []
        for k in left:
            zone = ZONES[int(filled.last_zone[k])]
            if k in duplicates:
                out.append(Skipped(ids[k], tok[k], f"duplicate-of:{duplicates[k]}", zone))
            else:
                out.append(Skipped(ids[k], tok[k], "oversize" if tok[k] > self.config.budget else "no-space", zone))
        return out


def _context_items(placed: dict[str, list[_Candidate]]) -> list[ContextItem]:
    """The placed candidates in reading order (critical and middle by score, recency by time)."""
    ordered = (
        sorted(placed["critical"], key=_by_score)
        + sorted(placed["middle"], key=_by_score)
        + sorted(placed["recency"], key=_by_time)
    )
    return [
        ContextItem(  # positional: this runs for every placed item
            c.item.memory_id, c.zone, i, c.tokens, c.item.score, c.normalised, c.item.text, c.item.created_at,
            c.item.type, c.reason, c.reason.endswith("+truncated"), tuple(c.merged),
            c.reason[len("neighbour-of:"):] if c.reason.startswith("neighbour-of:") else None,
        )
        for i, c in enumerate(ordered, start=1)
    ]


_get_score = attrgetter("score")
_get_id = attrgetter("memory_id")
_get_text = attrgetter("text")


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
