"""The candidate cache: every question's ranked lists, computed once per (store, candidate config).

Tables are kept as Parquet under ``root/candidates`` with their string encodings beside them, and
in this process by path, so presets that share candidate-time settings read and encode one table.
"""
from __future__ import annotations

import hashlib
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import polars as pl

from lab.config import SaveConfig, SearchConfig, to_dict
from lab.eval.dataset import EvalDataset
from lab.engine import Engine
from lab.eval.stores import digest, eval_retriever, eval_root
from lab.retriever import Retriever
from lab.search.candidates import Query
from lab.search.fusion import PreparedCandidates, prepare


def candidate_config(config: SearchConfig, depth: int) -> dict[str, Any]:
    """The parts of a search configuration that change the candidate lists (fusion and the
    abstention threshold do not)."""
    d = to_dict(config)
    d.pop("fusion")
    d.pop("abstain")
    d.pop("name")
    d.pop("description")
    d["depth"] = max(config.depth, depth)
    return d


@lru_cache(maxsize=1)
def search_code() -> str:
    """A digest of the code that produces candidate lists (search, index, the read side and the
    store: its record rules and the table classes reads go through): a cached
    table made by other code is never reused, so a change to a signal cannot hide behind the cache."""
    base = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    files = [*base.joinpath("search").rglob("*.py"), *base.joinpath("index").rglob("*.py"),
             base / "retriever.py", *base.joinpath("store").rglob("*.py")]
    for f in sorted(files):
        h.update(f.relative_to(base).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def candidate_table(retriever: Retriever, dataset: EvalDataset, config: SearchConfig, *, depth: int = 0,
                    root: Path | None = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every question's candidate lists, from the cache when this (store, config) was seen before;
    kept under ``root``'s candidates (None: the root the store was built under, else the workspace's)."""
    root = eval_root(root or retriever.eval_root)
    # a dataset whose own metrics rank its whole corpus (LongMemEval's official ones) asks that deep
    depth = max(depth, int(dataset.report.get("ranking_depth") or 0))
    if dataset.reference_time and not config.reference_time:
        config = replace(config, reference_time=dataset.reference_time)
    cconf = candidate_config(config, depth)
    questions = dataset.questions.sort("qid")
    # a store under the evaluation root by its path there, not its absolute path: the same tables
    # get the same file name in every checkout (DVC records the folder's hash)
    store = Path(retriever.store.root).resolve()
    where = store.relative_to(root.resolve()).as_posix() if store.is_relative_to(root.resolve()) else str(store)
    key = digest(str(retriever.version), where, cconf, to_dict(retriever.indexes.config),
                 questions.select("qid", "namespace", "question").rows(), retriever.embedder.model_id,
                 retriever.query_embedder.model_id, search_code(),
                 *([sorted(dataset.reference_times.items())] if dataset.reference_times else []))
    path = root / "candidates" / f"{dataset.name}-{key}.parquet"
    info: dict[str, Any] = {"cache": str(path), "hit": path.is_file()}
    if str(path) in _loaded:
        _loaded.move_to_end(str(path))
        return _loaded[str(path)].table, info
    if path.is_file():
        return _remember(str(path), pl.read_parquet(path)), info
    started = time.perf_counter()
    run_config = replace(config, depth=cconf["depth"])
    vectors = retriever.embed_queries(questions["question"].to_list())
    parts = []
    for ns in sorted(questions["namespace"].unique().to_list()):
        mask = (questions["namespace"] == ns).to_numpy()
        rows = questions.filter(pl.Series(mask))
        qs = [Query(q, t, ns) for q, t in rows.select("qid", "question").iter_rows()]
        own = dataset.reference_times.get(ns)  # the namespace's own "now" (a LongMemEval question's date)
        parts.append(retriever.candidates(qs, replace(run_config, reference_time=own) if own else run_config,
                                          query_vectors=vectors[mask]))
    table = pl.concat(parts) if parts else pl.DataFrame()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # another process may be writing the same table
    table.write_parquet(tmp)
    tmp.replace(path)
    if retriever.cache is not None:
        retriever.cache.flush()  # the evaluation's own cache folder: question vectors for next time
    info["seconds"] = round(time.perf_counter() - started, 2)
    return _remember(str(path), table), info


# Candidate tables read (or built) in this process, with their fusion-ready encoding, by cache
# path: presets that share candidate-time settings share one table, so evaluating several in a
# row (``lab eval --preset a b c``, a sweep) reads and encodes it once. The path names the store
# version and the candidate config, so an entry can never be stale.
@dataclass
class Loaded:
    table: pl.DataFrame
    path: Path | None = None  # None: a table the caller made, not kept
    prepared: PreparedCandidates | None = None
    health: dict[str, Any] | None = None  # per-signal health: depends on the lists only


_loaded: "OrderedDict[str, Loaded]" = OrderedDict()
_LOADED_MAX = 4


def forget_loaded() -> None:
    """Drop the tables kept in this process (as a new process would start)."""
    _loaded.clear()


def _remember(path: str, table: pl.DataFrame) -> pl.DataFrame:
    _loaded[path] = Loaded(table, Path(path))
    while len(_loaded) > _LOADED_MAX:
        _loaded.popitem(last=False)
    return table


def memo_entry(cands: pl.DataFrame) -> Loaded:
    """The in-process entry of a candidate table (a fresh one for a table the caller made)."""
    return next((e for e in _loaded.values() if e.table is cands), None) or Loaded(cands)


def prepared_for(cands: pl.DataFrame) -> PreparedCandidates:
    entry = memo_entry(cands)
    if entry.prepared is None:
        entry.prepared = _prepare_cached(cands, entry.path.with_suffix(".codes.npz") if entry.path else None)
    return entry.prepared


def _prepare_cached(cands: pl.DataFrame, codes_path: Path | None) -> PreparedCandidates:
    """``prepare``, with the table's string encodings kept beside the cached table: a warm
    evaluation then skips the million-string hashing and only does integer work."""
    encodings = None
    if codes_path is not None and codes_path.is_file():
        try:
            with np.load(codes_path, allow_pickle=False) as z:
                encodings = {name: (pl.Series(name, z[f"{name}.values"].tolist(), dtype=pl.String),
                                    z[f"{name}.codes"].astype(np.int64)) for name in ("qid", "memory_id", "signal")}
        except (OSError, KeyError, ValueError):
            encodings = None  # unreadable: recompute and rewrite
    prepared = prepare(cands, encodings)
    if codes_path is not None and encodings is None:
        arrays = {}
        for name, (values, codes) in prepared.encodings.items():
            arrays[f"{name}.values"] = np.asarray(values.to_list(), dtype=str)
            arrays[f"{name}.codes"] = codes.astype(np.int32 if len(values) < 2**31 else np.int64)
        tmp = codes_path.with_name(codes_path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(codes_path)
    return prepared


@dataclass(frozen=True)
class Opened:
    """An evaluation store opened for reading, and one candidate table per configuration asked for."""
    retriever: Retriever
    tables: tuple[pl.DataFrame, ...]


def open_candidates(dataset: EvalDataset, save: SaveConfig, configs: Sequence[SearchConfig], *, root: Path | None,
                    depth: int, embeddings: Path | None = None, embedder: Any = None, query_model: str | None = None,
                    progress: bool = False, engine: Engine | None = None) -> Opened:
    """The one way a unit of work opens its evaluation: the dataset's store for ``save`` under
    ``root`` (built first when needed, its texts embedded on ``engine``), and each of ``configs``'
    candidate lists at ``depth`` (from the cache when seen before)."""
    retriever = eval_retriever(dataset, save, root=root, embedder=embedder, progress=progress,
                               query_model=query_model, embeddings=embeddings, engine=engine)
    tables = tuple(candidate_table(retriever, dataset, c, depth=depth, root=root)[0] for c in configs)
    return Opened(retriever, tables)
