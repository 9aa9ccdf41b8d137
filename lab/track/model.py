"""The exported serving module as an MLflow pyfunc model: a bundle folder (config + pinned store) in,
ranked memory ids and assembled contexts out.

Load it from anywhere with the tracking store named (`lab runs` prints the line)::

    MLFLOW_TRACKING_URI=sqlite:////abs/.lab/mlflow/mlflow.db python -c \
      'import mlflow; print(mlflow.pyfunc.load_model("models:/lab-memory-demo@champion").predict(
       {"query": ["why did billing fail?"], "namespace": ["atlas"]}))'
"""
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


def _records(model_input: pd.DataFrame) -> list[dict[str, Any]]:
    """One record per query. A dict of lists given to ``predict`` reaches here as one row whose
    cells are lists: it is spread back into one row per query."""
    records = model_input.to_dict("records")
    out: list[dict[str, Any]] = []
    for rec in records:
        if isinstance(rec.get("query"), (list, tuple)) or hasattr(rec.get("query"), "tolist"):
            columns = {k: list(v) if isinstance(v, (list, tuple)) or hasattr(v, "tolist") else [v] * len(rec["query"])
                       for k, v in rec.items()}
            out += [dict(zip(columns, values)) for values in zip(*columns.values())]
        else:
            out.append(rec)
    return out


class LabModel(mlflow.pyfunc.PythonModel):
    """Answers search and context requests with the gated configuration over the pinned store.

    Input frame: ``query``, ``namespace``, optional ``k`` and ``budget``. Output frame, one row per
    query: ``memory_ids`` and ``scores`` (ranked), ``context`` (the assembled text), ``tokens``."""
    def load_context(self, context: Any) -> None:
        from lab.retriever import Retriever  # heavy: numba

        bundle = read_bundle(Path(context.artifacts["bundle"]))
        require_recorded(bundle.manifest.get("embedding_models") or [], "the registered model's bundle",
                         bundle.packed_models)
        self.manifest = bundle.manifest
        index = bundle.save.index if bundle.save is not None else None  # the candidate's own, when it had them
        # the store packed into the bundle (a small one travels with the model), else the path it
        # was exported from; a store that is not there is refused by name
        self.retriever = Retriever.open(bundle.store_path(), pin=bundle.store["version"], search=bundle.search,
                                        assemble=bundle.assemble, index=index,
                                        query_model=bundle.query_model or "auto")
        self.assemble = bundle.assemble

    def predict(self, context: Any, model_input: pd.DataFrame, params: dict[str, Any] | None = None) -> pd.DataFrame:
        missing = {"query", "namespace"} - set(model_input.columns)
        if missing:
            raise ValidationError(f"model input lacks column(s) {sorted(missing)}; needs query and namespace")
        rows = []
        for rec in _records(model_input):
            k, budget = _optional_int(rec.get("k")), _optional_int(rec.get("budget"))
            ctx, results = self.retriever.search_and_assemble(str(rec["query"]), str(rec["namespace"]), budget)
            top = results[:k] if k else results[: self.retriever.search_config.fusion.top_k]
            rows.append({"query": rec["query"], "namespace": rec["namespace"],
                         "memory_ids": [r.memory_id for r in top], "scores": [float(r.score) for r in top],
                         "context": ctx.render(), "tokens": int(ctx.used)})
        return pd.DataFrame(rows)
