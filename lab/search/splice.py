"""Polars frames and series of a namespace view changed by a few rows without copying the rest:
zero-copy slices around the changed positions, concatenated without a rechunk. A save or an update at a
million memories copied every row's text otherwise (the view's row frame, its lower-cased text, its
tags and episodes) each time."""
from __future__ import annotations

import numpy as np
import polars as pl

MAX_CHUNKS = 256  # polars chunks a spliced frame may reach before it is made contiguous again


def _pieces(old, at: np.ndarray, new, drop: bool) -> list:
    """Zero-copy slices of ``old`` around positions ``at`` (sorted), with ``new``'s rows (one per
    position, in order; none when ``new`` is None) before each; the rows at ``at`` left out when ``drop``."""
    pieces, prev = [], 0
    for j, p in enumerate(at.tolist()):
        if p > prev:
            pieces.append(old.slice(prev, p - prev))
        if new is not None:
            pieces.append(new.slice(j, 1))
        prev = p + 1 if drop else p
    if prev < len(old):
        pieces.append(old.slice(prev))
    return pieces


def spliced(old, ins: np.ndarray, new):
    """A frame or series with ``new``'s rows put before ``old``'s rows ``ins`` (zero-copy slices)."""
    pieces = _pieces(old, ins, new, drop=False)
    return pl.concat(pieces, rechunk=False) if pieces else old


def rechunked(spliced):
    """Splices leave a frame or series in pieces: past MAX_CHUNKS it is made one piece again."""
    return spliced.rechunk() if spliced.n_chunks() > MAX_CHUNKS else spliced


def without(old, gone: np.ndarray):
    """A frame or series without its rows at positions ``gone`` (sorted, unique), from zero-copy
    slices of the rest."""
    pieces = _pieces(old, gone, None, drop=True)
    return rechunked(pl.concat(pieces, rechunk=False)) if pieces else old.clear()


def replaced(old, at: np.ndarray, new):
    """A frame or series with its rows at positions ``at`` (sorted, unique) replaced by ``new``'s
    rows, in order, from zero-copy slices of the rest."""
    pieces = _pieces(old, at, new, drop=True)
    return pl.concat(pieces, rechunk=False) if pieces else old
