"""Position-aware context assembly: fused results -> the context an LLM reads, within a token budget.

MAIA's zone scheme, done fully (README, Context assembly):

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

Layout: ``types`` (items, the context, the rendered line), ``routing`` (capacities and zone
rules), ``merge`` (chunks of one memory), ``truncate`` (the oversize rule), ``neighbours``
(expansion after the fill), ``fill`` (``assemble`` itself), ``dedupe``, ``tokens`` and ``render``.
Everything public is re-exported here.
"""
from __future__ import annotations

from lab.assemble.fill import assemble
from lab.assemble.render import line
from lab.assemble.tokens import EstimateCounter, ExactCounter, TokenCounter, make_counter
from lab.assemble.types import Context, ContextItem, Item, Skipped, ZoneUsage, item_from_result
from lab.config import AssembleConfig

__all__ = [
    "AssembleConfig", "Context", "ContextItem", "Item", "ZoneUsage", "Skipped", "assemble", "item_from_result",
    "line", "EstimateCounter", "ExactCounter", "TokenCounter", "make_counter",
]
