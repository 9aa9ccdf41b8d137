"""lab: a workbench for evaluating and tuning memory retrieval for AI agents."""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "open_pipeline"]


def open_pipeline(path, config=None, *, embedder=None, create=False):
    """Open (or create) a store at ``path`` with its save/search pipeline; see lab.pipeline."""
    from lab.pipeline import Pipeline

    return Pipeline.open(path, config, embedder=embedder, create=create)
