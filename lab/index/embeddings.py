"""Chunk embeddings from a chunks frame into a vector matrix, a slice of rows at a time: at a million
chunks the embedding column is 1.5 GB, and whole-column copies (one to numpy, one reordered) were
two of the four copies a load or a build held at once."""
from __future__ import annotations

import numpy as np
import polars as pl

from lab.store.table import StoredRows

ROWS_PER_SLICE = 65_536  # 96 MB of 384-dimensional float32 vectors: the most a copy holds at once


def embedding_matrix(frame: pl.DataFrame, dim: int) -> np.ndarray:
    """The frame's embeddings as one (rows, dim) float32 matrix (a copy; for small frames)."""
    if frame.height == 0:
        return np.zeros((0, dim), dtype=np.float32)
    return np.asarray(frame["embedding"].to_numpy(), dtype=np.float32).reshape(-1, dim)


def scatter_embeddings(frame: pl.DataFrame, rows_to: np.ndarray, out: np.ndarray) -> None:
    """Write the embedding of the frame's row i into ``out[rows_to[i]]``; rows with ``rows_to[i] < 0``
    are skipped. Reads the column a slice at a time, so no copy of the whole column is made."""
    if len(rows_to) != frame.height:
        raise ValueError(f"rows_to has {len(rows_to)} entries for a frame of {frame.height} rows")
    dim = out.shape[1]
    for start in range(0, frame.height, ROWS_PER_SLICE):
        targets = rows_to[start:start + ROWS_PER_SLICE]
        keep = targets >= 0
        if not keep.any():
            continue
        block = embedding_matrix(frame.slice(start, ROWS_PER_SLICE), dim)
        out[targets[keep]] = block[keep] if not keep.all() else block


def write_vectors(chunks: pl.DataFrame, rows_to: np.ndarray, out: np.ndarray, stored: StoredRows | None = None) -> None:
    """``scatter_embeddings`` for a chunks frame with its embeddings, or for one without them whose
    ``_row`` column says where in ``stored`` each row is (``ChunksTable.visible_rows``): read from the
    table's files a file at a time, so a load or build never holds a second copy of every vector."""
    if "embedding" in chunks.columns:
        scatter_embeddings(chunks, rows_to, out)
    elif stored is None:
        raise ValueError("a chunks frame without embeddings needs the StoredRows its _row column points into")
    else:
        stored.scatter("embedding", chunks["_row"].to_numpy(), np.asarray(rows_to, dtype=np.int64), out)
