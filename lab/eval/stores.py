"""Evaluation stores: one store per (dataset, index-time configuration), built once and reused.

Building is a write (through the Pipeline); what evaluations read is a read-only ``Retriever``
over the finished store, with the shared evaluation embedding cache for question vectors.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from lab.config import ChunkConfig, SaveConfig, to_dict
from lab.embed import canonical, make_embedder
from lab.embed.base import assume_dim
from lab.embed.embedding_cache import EmbeddingCache, recorded_dim
from lab.engine import Engine
from lab.errors import ValidationError
from lab.eval.dataset import EvalDataset
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.store.settings import StoreSettings
from lab.workspace import Workspace

READY = "lab-eval-ready.json"


def eval_root(root: Path | None = None) -> Path:
    """Where evaluation stores, candidate tables and the shared embedding cache live: ``root`` as
    the caller's workspace names it, else the built-in one (no installed workspace is read)."""
    return root or Workspace().eval_root


def digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def save_config(context_turns: int | None = None, time_in_text: bool = False,
                views: tuple[str, ...] | list[str] | None = None) -> SaveConfig:
    """The save configuration of an evaluation store with these index-time levers (None: the defaults)."""
    default = ChunkConfig()
    if isinstance(views, str):
        raise ValidationError(f"views must be a list of view names, got the string {views!r}")
    turns = default.context_turns if context_turns is None else int(context_turns)
    return SaveConfig(chunk=ChunkConfig(context_turns=turns, time_in_text=bool(time_in_text),
                                        views=default.views if views is None else tuple(views)))


def index_suffix(chunk: ChunkConfig) -> str:
    """Run-folder suffix naming the index-time levers that differ from the default (none: no suffix)."""
    default = ChunkConfig()
    return ((f"+ctx{chunk.context_turns}" if chunk.context_turns != default.context_turns else "")
            + ("+time" if chunk.time_in_text != default.time_in_text else "")
            + (("".join(f"+{v}" for v in chunk.views) or "+noviews") if chunk.views != default.views else ""))


def embeddings_dir(root: Path, embeddings: Path | None = None) -> Path:
    """The embedding cache: ``embeddings`` when the caller names one (its workspace's, or a DVC
    stage's shared across its evaluation roots), else one for every store under ``root``."""
    return embeddings or root / "embeddings"


def eval_store_path(dataset: EvalDataset, config: SaveConfig | None = None, *, root: Path | None = None,
                    embedder=None) -> Path:
    """Where `eval_store` keeps the dataset's store for ``config`` (built or not): a digest of the
    data, the chunking and the embedding model, so the same inputs always name the same folder."""
    root = eval_root(root)
    config = config or SaveConfig()
    model = embedder.model_id if embedder is not None else canonical(config.embed.model)
    parts: list[Any] = [dataset.fingerprint(), to_dict(config.chunk), model]
    if config.chunk.views:
        parts.append("view chunks only for memories with context")  # stores of the older layout are rebuilt
    if dataset.saves:
        parts.append(sorted(dataset.saves.items()))
    return root / "stores" / f"{dataset.name}-{digest(*parts)}"


def is_built(path: Path) -> bool:
    """Whether `eval_store` finished building the store at ``path``."""
    return (path / READY).is_file()


def eval_store(dataset: EvalDataset, config: SaveConfig | None = None, *, root: Path | None = None,
               embedder=None, progress: bool = False, embeddings: Path | None = None,
               engine: Engine | None = None, settings: StoreSettings | None = None) -> Path:
    """The dataset's store under ``root/stores``, built on first use and reused while the data and
    the save configuration are unchanged. Save-then-search memories are saved after the indexes
    are built, through the normal save path, so they are found the way a fresh save is. Its texts
    are embedded on ``engine`` (None: in this process)."""
    root = eval_root(root)
    config = config or SaveConfig()
    path = eval_store_path(dataset, config, root=root, embedder=embedder)
    if is_built(path):
        return path
    # two processes asking for the same store (two evaluations, two test workers) build it once:
    # without the lock both saved every memory into it, and it held each twice
    with _building(path):
        if is_built(path):  # built by the other process while this one waited
            return path
        if path.exists():
            shutil.rmtree(path)  # a build that did not finish: start over
        with Pipeline.open(path, config, embedder=embedder, create=True,
                           cache_dir=embeddings_dir(root, embeddings), engine=engine,
                           settings=settings) as pipe:
            pipe.save_many(dataset.memories, progress=progress)
            if dataset.edges:
                pipe.add_edges(dataset.edges)
            pipe.build()
            if dataset.saves:
                pipe.save_many([dataset.saves[q] for q in sorted(dataset.saves)], progress=False)
        (path / READY).write_text(json.dumps({"dataset": dataset.summary()}, default=str, indent=2), encoding="utf-8")
    return path


@contextmanager
def _building(path: Path) -> Iterator[None]:
    """An exclusive lock on building the store at ``path`` (flock on a file under the evaluation
    root's ``locks``, so the stores folder holds stores only; a killed holder releases it, and the
    next build starts the unfinished one over)."""
    import fcntl

    locks = path.parent.parent / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{path.name}.building", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def eval_retriever(dataset: EvalDataset, config: SaveConfig | None = None, *, root: Path | None = None,
                   embedder=None, progress: bool = False, query_model: str | None = None,
                   embeddings: Path | None = None, engine: Engine | None = None,
                   settings: StoreSettings | None = None) -> Retriever:
    """A read-only retriever over the dataset's evaluation store (built first when needed);
    ``query_model`` encodes the questions instead of the store's model (same vector space);
    ``embeddings``: the embedding cache (None: `embeddings_dir`'s choice)."""
    root = eval_root(root)
    path = eval_store(dataset, config, root=root, embedder=embedder, progress=progress, embeddings=embeddings,
                      engine=engine, settings=settings)
    embed_config = SaveConfig().embed if config is None else config.embed
    embedder = embedder or make_embedder(embed_config)
    query = make_embedder(replace(embed_config, model=query_model)) if query_model else embedder
    cache_dir = embeddings_dir(root, embeddings)
    assume_dim(query, recorded_dim(cache_dir, query.model_id))  # a server model: no probe call
    cache = EmbeddingCache(cache_dir, query.model_id, query.dim)
    # the given index config, not only the recorded one: query-time settings (HNSW ef) take effect
    retriever = Retriever.open(path, embedder=embedder, cache=cache, index=None if config is None else config.index,
                               query_model=query, encoder_cache=cache_dir, settings=settings)
    retriever.encoder_progress = progress
    retriever.eval_root = root
    return retriever
