"""A query adapter: a linear map learnt from gold (`lab adapt`), applied to the query vectors of a
base model only; the stored vectors are the base model's, so nothing is embedded again.

A model named ``adapter:PATH`` is the folder PATH that `lab adapt` wrote:

- ``adapter.json``: the format, the base model's id, the kind (``linear`` or ``lowrank``), its rank,
  the dimension, what it was trained on, and the sha256 of the weights;
- ``adapter.npy``: the d x d matrix W (a low-rank adapter's I + U V^T, written whole).

A query is encoded by the base model, mapped by W and normalised again. The id carries the
weights' fingerprint (``adapter:/abs/path#1a2b3c4d5e6f``): a store or bundle records it, and an
adapter retrained under the same path is refused instead of used in its place. The folder is
written whole or not at all (a temporary folder renamed into place), so a run killed mid-way
leaves nothing the registry would load.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from lab.config import ADAPTER_KINDS
from lab.embed.base import Embedder, normalize_rows
from lab.errors import ConflictError, ValidationError

PREFIX = "adapter:"
FORMAT = 1
_META, _WEIGHTS = "adapter.json", "adapter.npy"


def is_adapter_model(name: str) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclass(frozen=True)
class AdapterFile:
    """A query adapter as read from its folder (weights checked against the recorded sha256)."""

    path: Path
    base: str  # the id of the model whose query vectors it maps
    kind: str
    rank: int | None
    matrix: np.ndarray  # (dim, dim) float32: a query vector q becomes W q
    sha256: str
    trained: dict[str, Any] = field(default_factory=dict)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def model_id(self) -> str:
        return f"{PREFIX}{self.path}#{self.sha256[:12]}"


def _split(name: str) -> tuple[Path, str | None]:
    """(folder, recorded fingerprint or None) of an ``adapter:PATH[#fp]`` name."""
    body = name[len(PREFIX):]
    fingerprint = None
    if "#" in body:
        body, fingerprint = body.rsplit("#", 1)
    if not body.strip():
        raise ValidationError(f"{name!r}: an adapter is named adapter:PATH (the folder `lab adapt --out` wrote)",
                              field="embed.model")
    return Path(body).expanduser().resolve(), fingerprint


def read_adapter(name: str) -> AdapterFile:
    """The adapter ``name`` (``adapter:PATH`` or its id with a fingerprint) names; a missing or
    damaged folder, or weights other than those its id records, is refused, naming the problem."""
    folder, recorded = _split(name)
    meta_path, weights_path = folder / _META, folder / _WEIGHTS
    if not meta_path.is_file() or not weights_path.is_file():
        raise ValidationError(f"{name!r}: {folder} is not an adapter folder (it needs {_META} and {_WEIGHTS}, "
                              "which `lab adapt --out` writes)", field="embed.model")
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValidationError(f"{meta_path}: not readable JSON ({exc})", field="embed.model") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValidationError(f"{meta_path}: format {meta.get('format') if isinstance(meta, dict) else meta!r} "
                              f"is not {FORMAT}, the one this lab reads", field="embed.model")
    sha = _sha256(weights_path)
    if sha != meta.get("sha256"):
        raise ConflictError(f"{weights_path}: its sha256 {sha[:12]} is not the {str(meta.get('sha256'))[:12]} "
                            f"{_META} records: the folder was changed after `lab adapt` wrote it", field="embed.model")
    if recorded and not sha.startswith(recorded):
        raise ConflictError(f"adapter {folder} has weights {sha[:12]}, not the {recorded} its id records: it was "
                            "trained again; evaluate or gate with the new one", field="embed.model")
    matrix = np.load(weights_path, allow_pickle=False)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] != meta.get("dim") \
            or not np.isfinite(matrix).all():
        raise ValidationError(f"{weights_path}: expected a finite {meta.get('dim')} x {meta.get('dim')} matrix, "
                              f"got shape {matrix.shape}", field="embed.model")
    if meta.get("kind") not in ADAPTER_KINDS or not isinstance(meta.get("base"), str):
        raise ValidationError(f"{meta_path}: kind must be one of {list(ADAPTER_KINDS)} and base a model id", field="embed.model")
    return AdapterFile(folder, meta["base"], meta["kind"], meta.get("rank"), matrix.astype(np.float32), sha,
                       meta.get("trained") or {})


def write_adapter(out: str | Path, base: str, matrix: np.ndarray, kind: str, rank: int | None,
                  trained: dict[str, Any]) -> AdapterFile:
    """Write the adapter folder ``out`` whole: into a temporary folder beside it, renamed into place
    (an older adapter there is replaced only once the new one is complete)."""
    out = Path(out).expanduser().resolve()
    if out.exists() and not (out / _META).is_file():
        raise ValidationError(f"--out {out} exists and is not an adapter folder: choose a new path", field="out")
    out.parent.mkdir(parents=True, exist_ok=True)
    matrix = np.ascontiguousarray(matrix, dtype=np.float32)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-", dir=out.parent))
    try:
        np.save(tmp / _WEIGHTS, matrix, allow_pickle=False)
        meta = {"format": FORMAT, "base": base, "kind": kind, "rank": rank, "dim": int(matrix.shape[0]),
                "sha256": _sha256(tmp / _WEIGHTS), "trained": trained}
        (tmp / _META).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str), encoding="utf-8")
        move_into_place(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return read_adapter(f"{PREFIX}{out}")


def move_into_place(tmp: Path, out: Path) -> None:
    """Make the complete folder ``tmp`` (beside ``out``) the folder ``out``: its files synced, an
    older ``out`` renamed aside first and removed only once the new one is in place, so a reader
    finds the old folder, the new one, or (on a first write) none, never half of one."""
    for f in tmp.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.replaced-{os.getpid()}"
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class AdaptedEmbedder:
    """The base model for passages; the base model's query vector mapped by the adapter for queries."""

    symmetric = False  # a query is not encoded as a passage is

    def __init__(self, base: Embedder, adapter: AdapterFile) -> None:
        if base.dim != adapter.dim:
            raise ConflictError(f"adapter {adapter.model_id!r} maps {adapter.dim}-dimensional vectors; its base "
                                f"{base.model_id!r} gives {base.dim}", field="embed.model")
        self.base, self.adapter = base, adapter
        self.model_id = adapter.model_id
        self.dim = base.dim
        self.tokenizer = base.tokenizer
        self.space = base.space  # the stored vectors are the base model's

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.base.embed(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return adapt_queries(self.base.embed_queries(texts), self.adapter.matrix)

    def __getattr__(self, name: str) -> Any:  # the base model's own controls (threads, close)
        base = self.__dict__.get("base")
        if base is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(base, name)


def adapt_queries(vectors: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Query vectors mapped by ``matrix`` (W q for each row q) and normalised again."""
    return normalize_rows(np.asarray(vectors, dtype=np.float32) @ np.asarray(matrix, dtype=np.float32).T)
