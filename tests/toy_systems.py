"""Small memory systems for the adapter tests: a user's own system in a few lines (word overlap),
one that answers ids it was never given, and one that fails on save."""
from __future__ import annotations

import re
from collections import defaultdict

from lab.adapters.base import MemorySystem


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class WordOverlap(MemorySystem):
    """Ranks memories by the number of query words they share (ties: the earlier saved)."""
    name = "word-overlap"
    approximates = "a toy: shared words, no model"

    def __init__(self, folder=None) -> None:
        self.store: dict[str, list[tuple[str, set[str]]]] = defaultdict(list)

    def reset(self, namespace):
        self.store.pop(namespace, None)

    def save(self, namespace, memories):
        out = {}
        for m in memories:
            sid = f"w{len(self.store[namespace])}"
            self.store[namespace].append((sid, words(m["content"])))
            out[m["id"]] = sid
        return out

    def search(self, namespace, query, k):
        q = words(query)
        scored = [(len(q & ws), -i, sid) for i, (sid, ws) in enumerate(self.store.get(namespace, []))]
        scored.sort(reverse=True)
        return [(sid, float(s)) for s, _, sid in scored[:k] if s > 0]


class Liar(WordOverlap):
    """Answers with an id no memory was given."""
    name = "liar"

    def search(self, namespace, query, k):
        return [("made-up-id", 1.0)]


class Broken(WordOverlap):
    name = "broken"

    def save(self, namespace, memories):
        from lab.adapters.base import AdapterError

        raise AdapterError(self.name, "save", "the disk is full")


class Noisy(WordOverlap):
    """Talks as some third-party systems do: a line per memory filed, a warning, a log record."""
    name = "noisy"

    def save(self, namespace, memories):
        import logging
        import warnings

        for m in memories:
            print(f"Filed drawer {m['id']}")
        warnings.warn("a deprecated option", UserWarning)
        logging.getLogger("thirdparty").warning("index rebuilt")
        return super().save(namespace, memories)
