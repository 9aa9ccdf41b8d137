"""What ``lab models`` shows: each known model, whether it is installed (or which extra installs
it), its size and licence, and, when asked, its speed measured here and now."""
from __future__ import annotations

import time
from typing import Any

from lab.config import EmbedConfig
from lab.embed.base import set_model_threads
from lab.embed.registry import MODELS, ModelSpec, make_embedder
from lab.embed.server import ServerEmbedder
from lab.errors import LabError

# a sample to time on: short texts of a conversation, and one of a model's full length
_SHORT = [f"Caroline said she went to the support group on day {i}, and it was powerful." for i in range(32)]
_QUERIES = [f"When did Caroline go to the support group, visit {i}?" for i in range(20)]


def _measure(spec: ModelSpec | str) -> dict[str, float]:
    model = make_embedder(EmbedConfig(model=spec if isinstance(spec, str) else spec.id, batch_size=32, cache=False))
    set_model_threads(model, 1)
    model.embed_queries(_QUERIES[:2])  # loads the model
    started = time.perf_counter()
    for q in _QUERIES:
        model.embed_queries([q])
    query_ms = (time.perf_counter() - started) / len(_QUERIES) * 1000
    started = time.perf_counter()
    model.embed(_SHORT)
    per_s = len(_SHORT) / (time.perf_counter() - started)
    return {"query_ms": round(query_ms, 1), "passages_per_s": round(per_s, 1)}


def survey(measure: bool = False, include_fake: bool = False) -> list[dict[str, Any]]:
    """One entry per known model (the test fake only when asked)."""
    out = []
    for spec in MODELS.values():
        if spec.backend == "fake" and not include_fake:
            continue
        missing = spec.missing()
        size = spec.size_bytes()
        entry: dict[str, Any] = {
            "id": spec.id, "alias": spec.alias, "backend": spec.backend, "dim": spec.dim,
            "max_tokens": spec.max_tokens, "space": spec.space, "license": spec.license,
            "symmetric": spec.symmetric, "about": spec.about,
            "installed": not missing, "install": None if not missing else f"pip install 'lab[{spec.extra}]'",
            "size_mb": None if size is None else round(size / 1e6, 1),
        }
        if measure and not missing:
            entry.update(_measure(spec))
        out.append(entry)
    return out


def server_entries(names: list[str], measure: bool = False) -> list[dict[str, Any]]:
    """One entry per server model named (``openai:MODEL@BASE_URL`` or a model file), after one probe
    call each: its dimension and the model name the server answered with; a server that cannot
    answer gives an entry whose ``error`` says why (one line, no key in it)."""
    out = []
    for name in names:
        entry: dict[str, Any] = {"id": name, "alias": "-", "backend": "openai-server", "dim": None,
                                 "max_tokens": None, "license": None, "size_mb": None, "installed": True,
                                 "install": None, "error": None}
        try:
            model = make_embedder(EmbedConfig(model=name, cache=False))
            assert isinstance(model, ServerEmbedder)
            entry.update(id=model.model_id, max_tokens=model.spec.max_tokens, space=model.space,
                         symmetric=model.symmetric)
            entry["dim"] = model.dim  # the probe call (or the file's declared dimension, checked by it)
            if model.served_model is None:
                model.embed(["dimension probe"])
            entry["about"] = (f"served by {model.spec.shown_url} as {model.served_model!r}; batch "
                              f"{model.spec.batch_size}, concurrency {model.spec.concurrency}")
            if measure:
                entry.update(_measure(name))
            model.close()
        except LabError as exc:
            entry.update(installed=False, error=str(exc), about=f"unusable: {exc}", install=f"unusable: {exc}")
        out.append(entry)
    return out
