"""A namespace index on disk: save it whole (written aside, then swapped in), verify it (manifest,
file digests, counts) and load it back, or say it must be rebuilt."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from lab.config import IndexConfig, to_dict
from lab.index.chunk_vectors import FILE as VECTORS_FILE, ChunkVectors
from lab.index.lexical import LexicalIndex
from lab.index.namespace import NamespaceIndex, split_views
from lab.index.embeddings import write_vectors
from lab.index.view_index import ViewIndex
from lab.index.vector import VectorIndex
from lab.store.table import StoredRows
from lab.version import __version__

MANIFEST = "manifest.json"
# the lexical segment's format: postings of raw counts (an index saved with bm25s's precomputed
# scores, before it, is rebuilt, not read)
LEXICAL_FORMAT = "postings-v1"


class IndexDamaged(Exception):
    """A saved index fails verification: a file is missing, altered, or belongs to another namespace."""


def _file_digests(directory: Path) -> dict[str, dict[str, Any]]:
    """Size and SHA-256 of every file of a saved index but the manifest (paths relative to it)."""
    out = {}
    for path in sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST):
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        out[path.relative_to(directory).as_posix()] = {"bytes": path.stat().st_size, "sha256": digest.hexdigest()}
    return out


def verify(directory: Path, namespace: str) -> dict[str, Any]:
    """The manifest of the index saved in ``directory``, after checking it is ``namespace``'s and that
    every file is present and unaltered; raises IndexDamaged saying what is wrong."""
    try:
        manifest = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise IndexDamaged(f"manifest unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("namespace") != namespace:
        got = manifest.get("namespace") if isinstance(manifest, dict) else None
        raise IndexDamaged(f"manifest is for namespace {got!r}, not {namespace!r}")
    files = manifest.get("files")
    if files is None:
        return manifest  # saved before digests were recorded: namespace and counts are still checked
    if not isinstance(files, dict):
        raise IndexDamaged("manifest's file list is malformed")
    found = _file_digests(directory)
    for name, want in sorted(files.items()):
        if name not in found:
            raise IndexDamaged(f"file {name} is missing")
        if found[name] != want:
            raise IndexDamaged(f"file {name} does not match its manifest digest (altered or replaced)")
    extra = sorted(set(found) - set(files))
    if extra:
        raise IndexDamaged(f"file(s) {extra[:3]} are not part of the saved index")
    return manifest


def indexed_config(config: IndexConfig) -> dict[str, Any]:
    """What of an index config a snapshot is made with: the extra encoders (``models``) are not
    in it (they are read from the embedding cache), so adding one does not rebuild it."""
    out = to_dict(config)
    out.pop("models", None)
    # how a build splits the vectors over graphs is the build's, recorded in the manifest
    # (vector_shards): a snapshot of either split loads under any setting, nothing is rebuilt
    for name in ("shards", "shard_from"):
        out.get("vector", {}).pop(name, None)
    return out


def manifest(idx: ViewIndex, views: list[str]) -> dict[str, Any]:
    return {
        "namespace": idx.namespace,
        "lab_version": __version__,
        "embed_model": idx.embed_model,
        "dim": idx.dim,
        "config": indexed_config(idx.config),
        "store_version": idx.store_version,
        "built_at": idx.built_at,
        "n_labels": len(idx.chunk_ids),
        "n_live": idx.n_live,
        "n_lexical_main": int(len(idx.lexical_labels)),
        "n_delta": idx.delta_size,
        "lexical": LEXICAL_FORMAT,
        "vector_shards": idx.vector.shards,
        "views": views,
    }

def save_index(idx: NamespaceIndex, directory: Path) -> None:
    """Write to a temporary folder, then swap it in: a crash never leaves a half index.

    The temporary and old folders start with a dot, which no namespace can, and carry the
    process id: they never collide with another namespace's index or another process's save."""
    _save(idx, directory, idx.views)


def _save(idx: ViewIndex, directory: Path, views: dict[str, ViewIndex]) -> None:
    with idx.locked():
        tag = f".{directory.name}.{os.getpid()}"
        tmp = directory.with_name(tag + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        idx.vector.save(tmp / "vectors.hnsw")
        idx.vectors.save(tmp / VECTORS_FILE, len(idx.chunk_ids))
        idx.lexical.save(tmp / "lexical")
        pq.write_table(
            pa.table({
                "chunk_id": idx.chunk_ids,
                "memory_id": idx.memory_of,
                "live": idx.live,
            }),
            tmp / "labels.parquet",
        )
        np.save(tmp / "lexical_labels.npy", idx.lexical_labels)
        np.save(tmp / "delta_labels.npy", np.asarray(idx.delta_labels, dtype=np.int64))
        for view in sorted(views):
            # each view's index is saved whole (with its own manifest) inside this one's folder
            (tmp / "views").mkdir(exist_ok=True)
            _save(views[view], tmp / "views" / view, {})
        described = {**manifest(idx, sorted(views)), "files": _file_digests(tmp)}
        (tmp / MANIFEST).write_text(json.dumps(described, indent=2, sort_keys=True), encoding="utf-8")
        old = directory.with_name(tag + ".old")
        shutil.rmtree(old, ignore_errors=True)
        if directory.exists():
            directory.rename(old)
        tmp.rename(directory)
        shutil.rmtree(old, ignore_errors=True)
        # the vectors just written replace the ones held in memory (a built index's 1.5 GB at a
        # million chunks): from now on their pages are the file's, read on demand
        idx.restore_vectors(ChunkVectors.mapped(directory / VECTORS_FILE, idx.dim))


def load_index(directory: Path, chunks: pl.DataFrame, config: IndexConfig,
               namespace: str | None = None, stored: StoredRows | None = None) -> NamespaceIndex | None:
    """Load a saved index if it matches ``config``; None means it must be rebuilt (none saved,
    other parameters, or rows the store no longer has). A saved index that fails verification
    (``verify``: namespace, file digests, counts) raises IndexDamaged.

    Texts come from the store's chunk table (``chunks``, all chunk rows of the namespace), vectors
    too (from ``stored`` for a frame without them: ``write_vectors``).
    """
    if not directory.exists():
        return None
    if not (directory / MANIFEST).is_file():
        raise IndexDamaged(f"{MANIFEST} is missing")
    namespace = namespace or directory.name
    manifest = verify(directory, namespace)
    if manifest.get("config") != indexed_config(config) or manifest.get("lexical") != LEXICAL_FORMAT:
        return None
    parts = split_views(chunks)
    views = manifest.get("views") or []
    if set(parts) - {""} - set(views):
        return None  # the store holds a view this index was saved without: rebuild
    try:
        idx = _load_into(NamespaceIndex(manifest["namespace"], manifest["dim"], config, manifest["embed_model"]),
                         directory, parts[""], config, manifest, stored)
        for view in views:
            sub = directory / "views" / view
            if not (sub / MANIFEST).is_file():
                raise IndexDamaged(f"the index of view {view!r} is missing")
            described = verify(sub, namespace)
            child = _load_into(ViewIndex(described["namespace"], described["dim"], config, described["embed_model"], view),
                               sub, parts.get(view, chunks.clear()), config, described, stored)
            if idx is None or child is None:
                return None
            idx.views[view] = child
        return idx
    except IndexDamaged:
        raise
    except Exception as exc:  # hnswlib, bm25s, pyarrow and numpy raise many types on a bad file
        raise IndexDamaged(f"cannot be read: {type(exc).__name__}: {exc}") from None


def _load_into(idx: ViewIndex, directory: Path, chunks: pl.DataFrame, config: IndexConfig,
               manifest: dict[str, Any], stored: StoredRows | None = None) -> ViewIndex | None:
    """Fill the empty ``idx`` (made from ``manifest``) from the index saved in ``directory``."""
    labels = pq.read_table(directory / "labels.parquet")
    if labels.num_rows != manifest.get("n_labels"):
        raise IndexDamaged(f"labels.parquet has {labels.num_rows} rows, the manifest says {manifest.get('n_labels')}")
    idx.chunk_ids = labels["chunk_id"].to_pylist()
    idx.memory_of = labels["memory_id"].to_pylist()
    idx.live = labels["live"].to_numpy(zero_copy_only=False).astype(bool)
    idx.label_of = dict(zip(idx.chunk_ids, range(len(idx.chunk_ids))))  # a chunk id's last label
    # labels and stored rows matched by joins, not a Python loop per chunk (seconds at a million):
    # each label's text, and each stored row's label (-1: none; a chunk id's last label, its row's
    # text the last stored row's, as the dictionaries this replaces had them)
    by_label = pl.from_arrow(labels.select(["chunk_id"])).with_row_index("_label")
    rows = chunks.select("chunk_id", "text").with_row_index("_at")
    text = by_label.join(rows.unique("chunk_id", keep="last").drop("_at"), on="chunk_id", how="left") \
        .sort("_label")["text"]
    if (text.is_null().to_numpy() & idx.live).any():
        return None  # the store lost rows the index still needs (e.g. compaction): rebuild
    idx.texts = text.fill_null("").to_list()
    if (directory / VECTORS_FILE).is_file():  # verified against the manifest's digest
        vectors = ChunkVectors.mapped(directory / VECTORS_FILE, idx.dim)
        if len(vectors) != len(idx.chunk_ids):
            raise IndexDamaged(f"{VECTORS_FILE} holds {len(vectors)} vectors for {len(idx.chunk_ids)} labels")
    else:  # saved before snapshots held their vectors: read from the store's chunk table
        positions = rows.join(by_label.unique("chunk_id", keep="last"), on="chunk_id", how="left").sort("_at")[
            "_label"].fill_null(-1).cast(pl.Int64).to_numpy()
        vectors = ChunkVectors(idx.dim, np.zeros((len(idx.chunk_ids), idx.dim), dtype=np.float32))
        write_vectors(chunks, positions, vectors.base, stored)
    idx.restore_vectors(vectors)
    shards = manifest.get("vector_shards", 1)  # saved before graphs were split: one
    if not isinstance(shards, int) or shards < 1:
        raise IndexDamaged(f"the manifest's vector_shards is {shards!r}, not a count of graphs")
    idx.vector = VectorIndex.load(directory / "vectors.hnsw", idx.dim, config.vector, idx.live, shards)
    main_labels = np.load(directory / "lexical_labels.npy")
    delta_labels = np.load(directory / "delta_labels.npy").tolist()
    if (len(main_labels), len(delta_labels), idx.n_live) != (
            manifest.get("n_lexical_main"), manifest.get("n_delta"), manifest.get("n_live")):
        raise IndexDamaged("label counts differ from the manifest")
    main = LexicalIndex.load(directory / "lexical", config.lexical, idx.analyzer)
    if main.n_docs != len(main_labels):
        raise IndexDamaged(f"the lexical segment holds {main.n_docs} documents for {len(main_labels)} labels")
    idx.restore_lexical(main, main_labels, delta_labels)
    idx.store_version = manifest["store_version"]
    idx.built_at = manifest["built_at"]
    return idx
