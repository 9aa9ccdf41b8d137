"""Where the heavy work runs: in this process (``local``, the default, which never imports Ray) or
on a Ray cluster (``ray``: the one given by its address, else a local one started for the command).

An engine embeds texts into an embedding cache (`Engine.fill_cache`): the cache stays with the
caller, so its keys, its files and the single writer that commits vectors to the store are the
same whichever engine embedded them; only the model calls move. Chosen once at an edge (the
workspace's ``engine`` and ``ray_address``, from ``--engine`` / ``--ray-address`` / $LAB_ENGINE /
$RAY_ADDRESS) and passed down.
"""
from __future__ import annotations

from typing import Callable, Iterator, Protocol, Sequence, TypeVar

import numpy as np

from lab.embed.base import Embedder
from lab.embed.embedding_cache import EmbeddingCache
from lab.engine.local import LocalEngine
from lab.engine.on_ray import RayEngine
from lab.errors import ValidationError
from lab.workspace import Workspace

ENGINES: tuple[str, ...] = ("local", "ray")
In = TypeVar("In")
Out = TypeVar("Out")


class Engine(Protocol):
    name: str
    embeds_ahead: bool  # a save hands all its texts to fill_cache before committing batch by batch
    # units of work run in this process, one after another: a caller runs them itself (shows their
    # progress, skips the shipping); false: they run elsewhere (Ray tasks), each with the driver's workspace
    in_process: bool

    def fill_cache(self, cache: EmbeddingCache, embedder: Embedder, texts: Sequence[str], *,
                   progress: bool = False) -> int:
        """Embed those of ``texts`` the cache lacks into it (pending until its ``flush``); returns how
        many texts were embedded anew."""
        ...

    def embed(self, embedder: Embedder, texts: Sequence[str], *, progress: bool = False) -> np.ndarray:
        """Vectors of ``texts`` in order, without a cache."""
        ...

    def map(self, fn: Callable[[In], Out], items: Sequence[In]) -> Iterator[Out]:
        """``fn`` of each item (independent units of work: a system's evaluation), yielded in the
        items' order; ``fn`` and the items must pickle (they may run on another machine)."""
        ...

    def describe(self) -> str:
        """One line for a command's output: which engine, where, how many workers."""
        ...

    def close(self) -> None:
        ...


def make_engine(name: str = "local", address: str | None = None, *, workers: int | None = None,
                auth: str | None = None, workspace: Workspace | None = None) -> Engine:
    """The engine ``name`` names; ``ray`` connects to ``address`` (None: starts a local Ray), its
    driver in Ray's token auth mode ``auth`` when given (else Ray's own $RAY_AUTH_MODE), and ships
    ``workspace`` (the caller's, frozen) with each unit of work it maps."""
    if name == "local":
        return LocalEngine()
    if name == "ray":  # Ray itself is imported only here, by the engine
        return RayEngine(address, workers=workers, auth=auth, workspace=workspace)
    raise ValidationError(f"engine must be {' or '.join(ENGINES)}, got {name!r}", field="engine")
