"""lab's own pipeline as a memory system, in process: the harness measures it exactly as it
measures any other system (the same saves, the same searches, the same id map)."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from lab.adapters.base import Memory, MemorySystem
from lab.config import SaveConfig, SearchConfig
from lab.embed.registry import make_embedder, query_model_name
from lab.pipeline import Pipeline
from lab.retriever import require_query_model
from lab.store.settings import StoreSettings


class LabSystem(MemorySystem):
    """A store of its own under ``folder``, saved to and searched with ``config`` (a preset or a
    candidate's search settings) and ``save`` (its index-time settings). Queries are encoded as
    `lab serve` encodes them (``query_model`` auto: MiniLM's int8 export for a MiniLM store), so
    this and lab over HTTP rank alike."""

    def __init__(self, folder: str | Path, config: SearchConfig, save: SaveConfig | None = None, *,
                 query_model: str = "auto", embedder: Any = None, name: str = "lab",
                 stores: StoreSettings | None = None) -> None:
        self.name, self.config = name, config
        self.settings = {"preset": config.name, "query_model": query_model}
        self.folder = Path(folder)
        if self.folder.exists():
            shutil.rmtree(self.folder)  # a run starts from an empty store: the harness saves everything
        self.pipe = Pipeline.open(self.folder, save or SaveConfig(), create=True, embedder=embedder, settings=stores)
        store_model = self.pipe.embedder.model_id
        wanted = embedder.model_id if embedder is not None else query_model_name(query_model, store_model)
        if wanted != store_model:
            query = make_embedder(replace(self.pipe.config.embed, model=wanted, cache=False))
            require_query_model(self.pipe.store, query)
            self.pipe.retriever.query_embedder = query
        self.settings["query_model"] = wanted

    def reset(self, namespace: str) -> None:
        if namespace in self.pipe.store.namespaces():
            self.pipe.delete_namespace(namespace)

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        records = [{k: v for k, v in {**m, "namespace": namespace}.items() if v is not None} for m in memories]
        report = self.pipe.save_many(records, namespace, progress=False)
        return {str(m["id"]): report.id_map.get(str(m["id"]), str(m["id"])) for m in memories}

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        return [(r.memory_id, float(r.score)) for r in self.pipe.search(query, namespace, k, config=self.config)]

    def context(self, namespace: str, query: str, budget: int) -> str | None:
        return self.pipe.context(query, namespace, budget, config=self.config).render("text")

    def close(self) -> None:
        self.pipe.close()
