"""The Embedder and Tokenizer protocols every embedder implements."""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from lab.errors import ValidationError


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
    """Maps texts to L2-normalised float32 vectors of a fixed dimension, in two roles.

    ``embed`` encodes passages (what a store keeps), ``embed_queries`` encodes search queries; a
    symmetric model (MiniLM) gives the same vector for both, an asymmetric one (e5) prefixes each
    role differently. ``model_id`` names the model in caches, store records and bundles;
    ``space`` names the vector space: two embedders of one space (MiniLM in torch and its int8
    ONNX export) may query each other's vectors.
    """

    model_id: str
    dim: int
    tokenizer: Tokenizer
    space: str
    symmetric: bool

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors: an array of shape (len(texts), dim), float32, each row of unit length."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors, shaped as ``embed``'s."""
        ...


class Symmetric:
    """For a model that encodes queries as it encodes passages."""

    symmetric = True

    @property
    def space(self) -> str:
        return self.model_id  # type: ignore[attr-defined]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed(texts)  # type: ignore[attr-defined]


def set_model_threads(embedder: object, n: int) -> None:
    """Threads each call of ``embedder``'s model may use, where its backend has threads to set."""
    setter = getattr(embedder, "set_threads", None)
    if setter is not None:
        setter(n)


def assume_dim(embedder: object, dim: int | None) -> None:
    """Tell an embedder whose dimension is learnt by asking (a server model) the dimension a store or
    cache already holds for it: no probe call is then made, and answers are checked against it."""
    setter = getattr(embedder, "assume_dim", None)
    if setter is not None and dim:
        setter(dim)


def normalize_rows(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return vectors / norms


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean of each text's token states over its attention mask, L2-normalised (what
    sentence-transformers' MiniLM pooling and normalisation do)."""
    weights = mask[..., None].astype(np.float32)
    summed = (hidden * weights).sum(axis=1)
    counts = np.clip(weights.sum(axis=1), 1e-9, None)
    return normalize_rows(summed / counts)


class MissingExtra(ValidationError):
    """A model whose backend package is not installed: the message names the extra to install."""


_fingerprints: dict[tuple, str] = {}


def files_fingerprint(files: list[Path]) -> str:
    """sha256 over the files' names and contents (memoised per process by path, size and
    modification time: hashing 90 MB of weights costs a quarter second)."""
    stats = [(f, f.stat()) for f in sorted(files)]
    key = tuple((str(f), st.st_size, st.st_mtime_ns) for f, st in stats)
    if key not in _fingerprints:
        h = hashlib.sha256()
        for f in sorted(files):
            h.update(f.name.encode())
            with open(f, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    h.update(block)
        _fingerprints[key] = h.hexdigest()
    return _fingerprints[key]
