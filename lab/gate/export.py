"""`export`: a judged candidate's bundle (search, save and assembly configs, manifest, a small store
packed with it) and its pyfunc model registered as the new champion. Only on GO."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from lab import track as tracking
from lab.bundle import bundle_digest, pack_models, pack_query_model, pack_store, write_bundle
from lab.config import AssembleConfig, Candidate, to_json
from lab.embed.adapter import is_adapter_model, read_adapter
from lab.embed.local import local_model_folder, looks_local
from lab.embed.registry import lookup, model_record
from lab.errors import ValidationError
from lab.gate.checks import GateConfig, candidate_config
from lab.gate.report import Exported, GateReport
from lab.version import __version__

if TYPE_CHECKING:
    from lab.track.connect import Where


def export_gated(report: GateReport, candidate: str, gate: GateConfig, store: str | Path, *, bundle: str | Path,
                 uri: Where = None) -> Exported:
    """Export a judged candidate: only on GO (else `ValidationError` naming each failed check),
    the bundle into ``bundle`` and the model registered as the new champion."""
    if report.verdict != "GO":
        raise ValidationError(f"gate verdict {report.verdict}: not exported; failed: {'; '.join(report.failed)}")
    if not report.run_id:
        raise ValidationError("the gate report has no MLflow run (it ran with tracking off): cannot register a model")
    chosen = candidate_config(candidate)
    if report.query_model:  # the query model it was judged with, given to the gate or in the file
        chosen = replace(chosen, query_model=report.query_model)
    return export(report, chosen, gate, store, uri, Path(bundle))


def export(report: GateReport, chosen: Candidate, gate: GateConfig, store: str | Path, uri: Where,
           bundle: Path | None = None) -> Exported:
    """The bundle folder (default: ``bundle`` in the report's folder), then the pyfunc model
    registered as the new champion."""
    from lab.retriever import Retriever  # heavy: numba

    with Retriever.open(store) as retriever:
        version = str(retriever.version)
        embed_model = retriever.embedder.model_id
    # the store's model, and each extra encoder the candidate's store carries (index.models)
    encoders = chosen.save.index.models if chosen.save is not None else ()
    models = [embed_model, *(lookup(alias).id for alias in encoders)]  # type: ignore[union-attr]
    bundle = bundle or report.folder / "bundle"
    config, assemble = chosen.search, chosen.assemble or AssembleConfig()
    records = [model_record(m) for m in models]
    packed = pack_store(bundle, store, version)  # a small store travels with the model
    query = _query_model(bundle, chosen.query_model)
    # a local model folder (a fine-tuned st:PATH) travels with the bundle, so it loads elsewhere too
    packed_models = pack_models(bundle, {m: local_model_folder(m) for m in models if looks_local(m)})
    digest = bundle_digest(config, assemble, chosen.save, packed, records, query)
    suites = {k: s.as_dict() for k, s in report.suites.items()}
    manifest = {
        "model": gate.model, "candidate": report.candidate, "verdict": report.verdict,
        "store": packed, "digest": digest,
        "embedding_models": records, "query_model": query, "packed_models": packed_models,
        "metrics": suites, "gate": [c.as_dict() for c in report.checks], "gate_config": gate.path,
        "dataset_fingerprints": {k: s.dataset_fingerprint for k, s in report.suites.items()},
        "lab_version": __version__, "git_commit": tracking.git_commit(), "run_id": report.run_id,
        "exported_at": datetime.now(timezone.utc).isoformat(),
    }
    write_bundle(bundle, config, assemble, chosen.save, manifest)
    data = {k: s.judged_on() for k, s in report.suites.items()}
    got = tracking.export_model(report.run_id, bundle, gate.model, config_json=to_json(config),
                                assemble_json=to_json(assemble), verdict=report.verdict, uri=uri,
                                save_json=None if chosen.save is None else to_json(chosen.save),
                                data_json=json.dumps(data, sort_keys=True), digest=digest,
                                example=next((s.example for s in report.suites.values() if s.example), None))
    return Exported(got["model"], got["version"], got["uri"], got["model_uri"], bool(got["reused"]),
                    str(bundle.resolve()))


def _query_model(bundle: Path, name: str | None) -> dict | None:
    """The candidate's query model as the bundle records it: a query adapter's folder is packed
    into the bundle (its id, fingerprint included, is what was gated); another model is named."""
    if name is None:
        return pack_query_model(bundle, None, None)
    if is_adapter_model(name):
        adapter = read_adapter(name)
        return pack_query_model(bundle, adapter.model_id, adapter.path)
    return pack_query_model(bundle, lookup(name).id if lookup(name) is not None else name, None)
