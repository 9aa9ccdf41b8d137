"""An index's stored chunk vectors by label, for exact cosines: those of its saved snapshot mapped
from the snapshot's file, those added since in memory.

At a million 384-dimensional chunks the vectors are 1.5 GB, beside hnswlib's own copy of them. A
search reads the vectors of a few dozen labels, so a mapped file costs the process only the pages
it touches, and those pages are the OS's page cache: reclaimable, shared by every process that
loads the same snapshot, and not read from the store's tables at load.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

FILE = "vectors.npy"


class ChunkVectors:
    """Rows ``0..len(base)-1`` are ``base`` (read-only, usually mapped); rows from ``len(base)`` on
    are ``tail`` (in memory, grown by a quarter when full: not doubled, so the first save into a
    loaded index of a million chunks does not hold 1.5 GB more for rows never filled)."""

    def __init__(self, dim: int, base: np.ndarray | None = None) -> None:
        self.dim = dim
        self.base = np.zeros((0, dim), dtype=np.float32) if base is None else base
        self.tail = np.zeros((0, dim), dtype=np.float32)

    def __len__(self) -> int:
        """Rows held, filled or not (labels beyond the last filled one are zero)."""
        return len(self.base) + len(self.tail)

    def reserve(self, needed: int) -> None:
        """Room for ``needed`` rows."""
        if needed > len(self):
            total = max(needed, len(self) + len(self) // 4)
            grown = np.zeros((total - len(self.base), self.dim), dtype=np.float32)
            grown[: len(self.tail)] = self.tail
            self.tail = grown

    def writable_from(self, start: int) -> tuple[np.ndarray, int]:
        """The in-memory array new labels from ``start`` are written into, and the label of its
        row 0 (labels only grow, so a new label is never in the read-only base)."""
        if start < len(self.base):
            raise ValueError(f"label {start} is in the saved (read-only) vectors, which end at {len(self.base)}")
        return self.tail, len(self.base)

    def take(self, labels) -> np.ndarray:
        """The vectors at ``labels`` (a copy), in that order."""
        labels = np.asarray(labels, dtype=np.int64)
        nb = len(self.base)
        if labels.size and labels.max() < nb:
            return np.asarray(self.base[labels])
        if not nb:
            return self.tail[labels]
        out = np.empty((len(labels), self.dim), dtype=np.float32)
        old = labels < nb
        out[old] = self.base[labels[old]]
        out[~old] = self.tail[labels[~old] - nb]
        return out

    def __getitem__(self, key) -> np.ndarray:
        if isinstance(key, slice):
            return self.take(np.arange(len(self))[key])
        if np.ndim(key) == 0:
            return self.take([int(key)])[0]
        return self.take(key)

    def save(self, path: Path, n: int) -> None:
        """Write the first ``n`` rows as a .npy file, a block at a time (no second copy in memory)."""
        out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, self.dim))
        block = 65_536
        for start in range(0, n, block):
            stop = min(n, start + block)
            out[start:stop] = self.take(np.arange(start, stop))
        out.flush()
        del out

    @classmethod
    def mapped(cls, path: Path, dim: int) -> "ChunkVectors":
        """The vectors of a saved .npy file, mapped read-only."""
        base = np.load(path, mmap_mode="r")
        if base.ndim != 2 or base.shape[1] != dim or base.dtype != np.float32:
            raise ValueError(f"{path.name} holds {base.dtype} {base.shape}, not float32 (n, {dim})")
        return cls(dim, base)
