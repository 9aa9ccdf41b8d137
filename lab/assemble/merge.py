"""Merging the chunks of one memory into a single item."""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from lab.assemble.types import Item


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
