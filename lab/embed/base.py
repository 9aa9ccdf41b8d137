"""The Embedder and Tokenizer protocols every embedder implements."""
from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

import numpy as np


@runtime_checkable
class Tokenizer(Protocol):
    """Splits text into tokens and reports their character spans (used for chunking)."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        """(start, end) character offsets of each token of ``text``, without special tokens."""
        ...

    def count(self, text: str) -> int:
        ...


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors of a fixed dimension."""

    model_id: str
    dim: int
    tokenizer: Tokenizer

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An array of shape (len(texts), dim), float32, each row of unit length."""
        ...


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms
