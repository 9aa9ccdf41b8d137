"""The exported serving module as an MLflow pyfunc model: a bundle folder (config + pinned store) in,
ranked memory ids and assembled contexts out."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow.pyfunc
import pandas as pd

from lab.bundle import read_bundle
from lab.embed.registry import require_recorded
from lab.errors import ValidationError


def _optional_int(value: Any) -> int | None:
    """A frame cell that may be absent, None or NaN (a column only some rows fill)."""
    return None if value is None or pd.isna(value) else int(value)


class LabModel(mlflow.pyfunc.PythonModel):
    """Answers search and context requests with the gated configuration over the pinned store.

    Input frame: ``query``, ``namespace``, optional ``k`` and ``budget``. Output frame, one row per
    query: ``memory_ids`` and ``scores`` (ranked), ``context`` (the assembled text), ``tokens``."""
    def load_context(self, context: Any) -> None:
        from lab.retriever import Retriever  # heavy: numba

        bundle = read_bundle(Path(context.artifacts["bundle"]))
        require_recorded(bundle.manifest.get("embedding_models") or [], "the registered model's bundle")
        self.manifest = bundle.manifest
        index = bundle.save.index if bundle.save is not None else None  # the candidate's own, when it had them
        self.retriever = Retriever.open(bundle.store["path"], pin=bundle.store["version"], search=bundle.search,
                                        assemble=bundle.assemble, index=index, query_model="auto")
        self.assemble = bundle.assemble

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        missing = {"query", "namespace"} - set(model_input.columns)
        if missing:
            raise ValidationError(f"model input lacks column(s) {sorted(missing)}; needs query and namespace")
        rows = []
        for rec in model_input.to_dict("records"):
            k, budget = _optional_int(rec.get("k")), _optional_int(rec.get("budget"))
            ctx, results = self.retriever.search_and_assemble(str(rec["query"]), str(rec["namespace"]), budget)
            top = results[:k] if k else results[: self.retriever.search_config.fusion.top_k]
            rows.append({"query": rec["query"], "namespace": rec["namespace"],
                         "memory_ids": [r.memory_id for r in top], "scores": [float(r.score) for r in top],
                         "context": ctx.render(), "tokens": int(ctx.used)})
        return pd.DataFrame(rows)
