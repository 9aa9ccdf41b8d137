"""Zone routing: each zone's share of the budget, and which zone each item goes to (MAIA's rules).

Capacities are the budget times the ratios, critical and middle floored, recency taking the
remainder, so they sum to the budget. Routing, by precedence (`zone_of`):

* working memories -> recency;
* pinned memories and anchors -> critical;
* normalised score (score / best score) at or above ``critical_threshold`` -> critical;
* created within ``recent_hours`` of the reference time and at or above ``recency_threshold``
  -> recency;
* everything else -> middle.

`zone_of` is plain Python over numbers or numpy arrays: `assemble` routes all its items at once with
it, and the sweep's batch assembler compiles the same function (numba) and routes one item of one
configuration at a time (`lab.tune.zone_kernel`), so the rule is written once.
"""
from __future__ import annotations

import math
from datetime import datetime
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from lab.assemble.types import Item
from lab.config import AssembleConfig

_get_type = attrgetter("type")
_get_pinned = attrgetter("pinned")


CRITICAL, MIDDLE, RECENCY = 0, 1, 2


def select(cond, a, b):
    """``a`` where ``cond``, else ``b`` (np.where; compiled, a scalar choice: `lab.tune.zone_kernel`)."""
    return np.where(cond, a, b)


def zone_of(recent, norm, working, pinned, critical_threshold, recency_threshold):
    """The zone (0 critical, 1 middle, 2 recency) of an item, or of each of arrays of items:
    ``recent`` whether it was created within the recent hours, ``norm`` its normalised score.
    Assigned from the weakest rule to the strongest, so the strongest has the last word."""
    zone = select(recent & (norm >= recency_threshold), RECENCY, MIDDLE)
    zone = select(norm >= critical_threshold, CRITICAL, zone)
    zone = select(pinned, CRITICAL, zone)
    return select(working, RECENCY, zone)


def capacities(config: AssembleConfig) -> dict[str, int]:
    critical = math.floor(config.budget * config.critical_ratio)
    middle = math.floor(config.budget * config.middle_ratio)
    return {"critical": critical, "middle": middle, "recency": config.budget - critical - middle}


def _zones(items: Sequence[Item], norm: np.ndarray, recent_from: datetime | None,
           config: AssembleConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zone code per item (`zone_of`), plus the working and pinned masks."""
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
    recent = np.zeros(n, dtype=bool)
    if recent_from is not None:
        # only items at or above the recency threshold can be routed there: compare only their times
        able = np.flatnonzero(norm >= config.recency_threshold).tolist()
        recent[[k for k in able if items[k].created_at is not None and items[k].created_at >= recent_from]] = True
    zone = zone_of(recent, norm, working, pinned, config.critical_threshold, config.recency_threshold)
    return zone.astype(np.int64, copy=False), working, pinned


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
