"""lab: a workbench for evaluating and tuning memory retrieval for AI agents.

The public API, imported lazily so that ``import lab`` (and ``lab --help``) stays instant:

- ``open_pipeline(path, create=True)`` -> ``Pipeline``: save into a store, search it, assemble context.
- ``open_retriever(path, pin=None, search="lab")`` -> ``Retriever``: the read-only side (a store at one
  version, its indexes, the embedder, a configuration): ``search``, ``context``, ``candidates``.
  Both have ``search(query, namespace, k)`` -> list of ``Result`` and ``context(query, namespace,
  budget)`` -> ``Context`` (zoned items within the token budget).
- ``evaluate(retriever, dataset, config, options)`` -> ``EvalResult``; ``load_dataset(name)`` -> ``EvalDataset``.
- ``fuse(candidates, fusion_config)`` -> ranked results table; ``prepare(candidates)`` for repeated fusion.
- ``preset(name)`` / ``PRESETS``: named ``SearchConfig``s; ``SearchConfig``, ``FusionConfig``,
  ``AssembleConfig``, ``SaveConfig``: configurations that round-trip through YAML.
- ``LabError`` and its subclasses ``ValidationError``, ``NotFoundError``, ``ConflictError``, ``StoreError``.
"""
from __future__ import annotations

from importlib import import_module
from pkgutil import iter_modules
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.errors import ConflictError, LabError, NotFoundError, StoreError, ValidationError
from lab.version import __version__

if TYPE_CHECKING:
    from lab.pipeline import Pipeline
    from lab.retriever import Retriever

# public name -> module it lives in (imported on first use). Names of subpackages (search,
# assemble, eval...) are not used for functions: importing the subpackage would rebind them.
_LAZY = {
    "Pipeline": "lab.pipeline",
    "Retriever": "lab.retriever",
    "Result": "lab.search.searcher",
    "Query": "lab.search.candidates",
    "Context": "lab.assemble",
    "Item": "lab.assemble",
    "fuse": "lab.search.fusion",
    "prepare": "lab.search.fusion",
    "PRESETS": "lab.search.presets",
    "preset": "lab.search.presets",
    "evaluate": "lab.eval.runner",
    "EvalOptions": "lab.eval.runner",
    "load_dataset": "lab.eval.goldens",
    "SearchConfig": "lab.config",
    "FusionConfig": "lab.config",
    "AssembleConfig": "lab.config",
    "SaveConfig": "lab.config",
}

# every module and subpackage of lab, read from the package folder so that none can be left out
_SUBPACKAGES = frozenset(m.name for m in iter_modules(__path__) if not m.name.startswith("_"))

__all__ = [
    "__version__", "open_pipeline", "open_retriever",
    "LabError", "ValidationError", "NotFoundError", "ConflictError", "StoreError", *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBPACKAGES:  # not imported yet: import it on first use, as `import lab.search` would
        return import_module(f"lab.{name}")
    raise AttributeError(f"module 'lab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def open_pipeline(path: str | Path, config: Any = None, *, embedder: Any = None, create: bool = False,
                  pin: str | None = None, cache_dir: str | Path | None = None, settings: Any = None) -> "Pipeline":
    """Open (or, with ``create``, create) the store at ``path`` with its save and search pipeline;
    ``settings``: a ``lab.store.settings.StoreSettings`` (``StoreSettings.of(workspace)``: a workspace's;
    None: the built-in defaults)."""
    from lab.pipeline import Pipeline  # heavy: numba (import lab stays light)

    return Pipeline.open(path, config, embedder=embedder, create=create, pin=pin, cache_dir=cache_dir, settings=settings)


def open_retriever(path: str | Path, *, pin: str | None = None, search: Any = None, embedder: Any = None,
                   settings: Any = None) -> "Retriever":
    """Open the store at ``path`` read-only, at its latest version or pinned at ``pin`` ("M.C.E.A").

    ``search`` is a SearchConfig, a preset name or a config file (default: the `lab` preset);
    ``settings``: as `open_pipeline`'s."""
    from lab.retriever import Retriever  # heavy: numba (import lab stays light)

    return Retriever.open(path, pin=pin, search=search, embedder=embedder, settings=settings)
