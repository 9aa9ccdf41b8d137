"""A deterministic, offline keyword embedder for unit tests (hashed bag of words)."""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

import numpy as np

from lab.config import FAKE_MODEL
from lab.embed.base import Symmetric, normalize_rows

WORD_RE = re.compile(r"\w+", re.UNICODE)


class WordTokenizer:
    """Tokens are runs of word characters; punctuation is dropped."""

    def spans(self, text: str) -> list[tuple[int, int]]:
        return [m.span() for m in WORD_RE.finditer(text)]

    def count(self, text: str) -> int:
        return sum(1 for _ in WORD_RE.finditer(text))


class FakeEmbedder(Symmetric):
    """Each lower-cased word switches on one of ``dim`` buckets (stable hash), then L2-normalise.

    Texts sharing words are similar and texts sharing none are orthogonal (barring bucket
    collisions), which makes retrieval tests exact and fast. Not for real evaluations.
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.model_id = FAKE_MODEL if dim == 256 else f"fake-hash-{dim}"
        self.tokenizer = WordTokenizer()
        self.calls = 0  # how many texts were embedded: lets tests prove the cache works

    def _bucket(self, word: str) -> int:
        return int.from_bytes(hashlib.blake2b(word.encode("utf-8"), digest_size=4).digest(), "little") % self.dim

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in WORD_RE.findall(text.lower()):
                out[i, self._bucket(word)] += 1.0
        self.calls += len(texts)
        return normalize_rows(out)
