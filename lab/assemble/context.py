"""`context(query, ...)`: search, then assemble — the whole read path of the memory system."""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from lab.assemble import Context, Item, assemble, item_from_result, make_counter
from lab.config import AssembleConfig, SearchConfig
from lab.errors import ValidationError
from lab.search.candidates import reference_time, view
from lab.search.engine import episode_key, search

if TYPE_CHECKING:
    from lab.pipeline import Pipeline


def episode_neighbours(pipe: "Pipeline", namespace: str, items: list[Item], window: int) -> dict[str, list[Item]]:
    """For each item with an episode: up to ``window`` turns before and after it in that episode."""
    episodes = {i.episode for i in items if i.episode}
    if not episodes or window <= 0:
        return {}
    mem = pipe.store.memories(namespace).with_columns(episode_key().alias("_episode")).filter(
        pl.col("_episode").is_in(list(episodes)) & pl.col("valid"))
    out: dict[str, list[Item]] = {}
    by_episode = {
        ep: group.sort("created_at", "id") for (ep,), group in mem.group_by("_episode", maintain_order=True)
    }
    for it in items:
        group = by_episode.get(it.episode)
        if group is None:
            continue
        ids = group["id"].to_list()
        if it.memory_id not in ids:
            continue
        at = ids.index(it.memory_id)
        rows = group.slice(max(0, at - window), min(len(ids), at + window + 1) - max(0, at - window))
        out[it.memory_id] = [
            Item(r["id"], r["content"] if not r["title"] else f"{r['title']}: {r['content']}", 0.0, r["created_at"],
                 r["type"], bool(r["pinned"]), it.episode)
            for r in rows.iter_rows(named=True) if r["id"] != it.memory_id
        ]
    return out


def context(
    pipe: "Pipeline",
    query: str,
    namespace: str,
    search_config: SearchConfig,
    assemble_config: AssembleConfig = AssembleConfig(),
    *,
    candidates: int = 50,
    record_access: bool = False,
) -> Context:
    """Search ``namespace`` for ``query`` (``candidates`` fused results), then assemble them.

    The reference time for "recent" is the assemble config's, else the search's, else the
    namespace's latest memory; the exact counter uses the pipeline's embedding tokenizer.
    """
    if candidates < 1:
        raise ValidationError(f"candidates must be >= 1, got {candidates}")
    response = search(pipe, query, namespace, search_config, k=candidates, record_access=record_access)
    items = [item_from_result(r) for r in response.results]
    counter = make_counter(assemble_config.counter, getattr(pipe.embedder, "tokenizer", None)
                           if assemble_config.counter == "exact" else None)
    ref = assemble_config.reference_time or reference_time(search_config, view(pipe, namespace))
    neighbours = episode_neighbours(pipe, namespace, items, assemble_config.neighbours)
    return assemble(items, assemble_config, counter=counter, reference_time=ref, neighbours=neighbours)
