"""Neighbour expansion: after the fill, adjacent turns of placed items spend what the zones left unused."""
from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

from lab.assemble.dedupe import Deduper, signatures
from lab.assemble.render import line
from lab.assemble.tokens import TokenCounter
from lab.assemble.types import Item, _Candidate
from lab.config import AssembleConfig


def _expand(placed: dict[str, list[_Candidate]], placed_all: list[_Candidate], dedupe: Deduper, free: int,
            neighbours: Mapping[str, Sequence[Item]], counter: TokenCounter, config: AssembleConfig) -> int:
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
