"""The local engine: the model runs in this process, a slice of texts at a time."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from lab.embed.base import Embedder
from lab.embed.embedding_cache import EmbeddingCache
from lab.progress import progress as progress_bar

SLICE = 64  # texts per model call and per progress step


class LocalEngine:
    name = "local"
    embeds_ahead = False  # a save embeds batch by batch (ahead only to show progress on a big one)
    in_process = True

    def fill_cache(self, cache: EmbeddingCache, embedder: Embedder, texts: Sequence[str], *,
                   progress: bool = False) -> int:
        bar = progress_bar(total=len(texts), desc="embedding", unit="text", enabled=progress)
        misses = cache.misses
        for start in range(0, len(texts), SLICE):
            part = texts[start:start + SLICE]
            cache.embed(embedder, part)
            bar.update(len(part))
        bar.close()
        return cache.misses - misses

    def embed(self, embedder: Embedder, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        return embedder.embed(texts)  # one call, as a batch of a save always embedded

    def map(self, fn, items):
        return (fn(item) for item in items)  # one after another, each as soon as it is asked for

    def describe(self) -> str:
        return "local (this process)"

    def close(self) -> None:
        pass
