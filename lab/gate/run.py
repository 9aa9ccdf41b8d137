"""`run_gate`: evaluate a candidate on every suite, decide GO / NO-GO, log it, and export only on GO.

Deterministic: evaluations read cached candidates, the bootstrap and the paired test are seeded, so
the same candidate, data and seed give the same verdict and the same numbers, bit for bit.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lab import track as tracking
from lab.bundle import bundle_digest, pack_store, write_bundle
from lab.config import AssembleConfig, Candidate, SaveConfig, SearchConfig, from_dict, to_dict, to_json
from lab.embed.registry import lookup, model_record
from lab.errors import ConflictError, ValidationError
from lab.eval.goldens import load_dataset
from lab.gate.checks import Check, GateConfig, candidate_config, suite_checks, verdict
from lab.tune.selection import describe
from lab.version import __version__


@dataclass
class GateReport:
    verdict: str
    candidate: str
    checks: list[Check]
    suites: dict[str, dict[str, Any]]  # per suite: headline metrics, dataset fingerprint, store
    champion: dict[str, Any] | None
    folder: Path
    run_id: str | None = None
    export: dict[str, Any] | None = None
    refused: list[str] = field(default_factory=list)
    # the sweep's honest-selection figures when the candidate is a sweep's best.yaml (selection.json beside it)
    selection: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "candidate": self.candidate, "checks": [c.as_dict() for c in self.checks],
                "suites": self.suites, "champion": {k: v for k, v in (self.champion or {}).items() if k != "config"}
                or None, "run_id": self.run_id, "export": self.export, "export_refused": self.refused or None,
                "selection": self.selection}


@dataclass
class _Champion:
    per_query: Any


def run_gate(gate: GateConfig, candidate: str | None, *, datasets: str | Path | None = None,
             out_root: str | Path = "runs/gate", track: bool = True, uri: str | None = None, export: bool = False,
             store: str | Path | None = None, progress: bool = False, embedder=None, root: Path | None = None,
             rebaseline: bool = False) -> GateReport:
    """Judge ``candidate`` (a preset name or a candidate file) against ``gate``: its search config on
    stores built with its index-time (save) settings; on export, its assembly settings go with it.

    A suite's data (corpus or gold) that changed since the champion was judged is refused, naming
    both fingerprints, unless ``rebaseline``: then the champion is re-evaluated on the new data and
    the check says so."""
    from lab.eval.report import write_run  # heavy: numba
    from lab.eval.runner import EvalOptions, evaluate  # heavy: numba
    from lab.eval.stores import eval_retriever  # heavy: numba

    chosen = candidate_config(candidate)
    config = chosen.search
    champ = tracking.champion(gate.model, uri) if track else None
    champ_config = from_dict(SearchConfig, champ["config"]) if champ and champ.get("config") else None
    champ_save = from_dict(SaveConfig, champ["save"], where="champion save") if champ and champ.get("save") else None
    name = Path(candidate).stem if candidate and Path(candidate).suffix else (candidate or "lab")
    folder = Path(out_root) / f"{gate.model}-{name}"
    checks: list[Check] = []
    suites: dict[str, dict[str, Any]] = {}
    first_retriever = None
    for suite in gate.suites:
        dataset = load_dataset(suite.dataset, datasets, observations=suite.observations)
        retriever = eval_retriever(dataset, chosen.save, root=root, embedder=embedder, progress=progress)
        first_retriever = first_retriever or retriever
        result = evaluate(retriever, dataset, config, EvalOptions())
        write_run(result, dataset.qrels, folder / suite.name)
        champion_result = None
        drift = data_drift(champ, suite.name, dataset) if champ_config is not None and suite.non_regression else None
        if drift and not rebaseline:
            raise ConflictError(f"suite {suite.name}: {drift}; a delta against the champion would compare over "
                                "different data: re-judge with `lab gate --rebaseline` (the champion re-evaluated on "
                                "the new data as the baseline) or restore the data it was judged on")
        if champ_config is not None and suite.non_regression:
            # the champion on its own index-time settings (the same store when they are the same)
            champ_retriever = (retriever if (champ_save or SaveConfig()) == (chosen.save or SaveConfig()) else
                               eval_retriever(dataset, champ_save, root=root, embedder=embedder, progress=progress))
            champion_result = _Champion(evaluate(champ_retriever, dataset, champ_config, EvalOptions()).per_query)
        suite_result = suite_checks(suite, result, dataset, champion_result, gate.alpha, gate.seed)
        if drift:
            for check in suite_result:
                if check.name.startswith("non-regression"):
                    check.note = (check.note + "; " if check.note else "") + f"rebaselined: {drift}"
        checks += suite_result
        m = result.metrics["metrics"]
        suites[suite.name] = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(),
                              "gold_fingerprint": dataset.gold_fingerprint(),
                              "questions": result.metrics["questions"], "store": str(retriever.store.root),
                              "store_version": str(retriever.version),
                              "metrics": {k: m[k] for k in ("recall@5", "recall@10", "ndcg@10", "mrr") if k in m},
                              # the exported model's input example: the suite's first question
                              "example": _first_question(dataset),
                              "ci95": {k: result.metrics["ci95"][k] for k in ("recall@10", "ndcg@10")
                                       if k in result.metrics["ci95"]}}
    report = GateReport(verdict(checks), name, checks, suites, champ, folder, selection=sweep_selection(candidate))
    folder.mkdir(parents=True, exist_ok=True)
    if track:
        tags = {"verdict": report.verdict, "preset": config.name, "candidate": name,
                "dataset": ",".join(s["dataset"] for s in suites.values()),
                "dataset_fingerprint": ",".join(s["dataset_fingerprint"] for s in suites.values()),
                "store_version": ",".join(s["store_version"] for s in suites.values())}
        params = tracking.flatten(to_dict(config))
        for section in ("save", "assemble"):  # what the candidate sets besides search
            if getattr(chosen, section) is not None:
                params.update(tracking.flatten(to_dict(getattr(chosen, section)), f"{section}."))
        with tracking.run(f"gate {name}: {report.verdict}", "gate", params=params,
                          tags=tags, uri=uri) as (_, c, run_id):
            report.run_id = run_id
            metrics: dict[str, float] = {}
            for sname, s in suites.items():
                metrics.update({f"{sname}.{k}": v for k, v in s["metrics"].items()})
                for k, (lo, hi) in s["ci95"].items():
                    metrics[f"{sname}.{k}.ci95_low"], metrics[f"{sname}.{k}.ci95_high"] = lo, hi
            metrics["checks_failed"] = float(sum(not ch.passed for ch in checks))
            tracking.log_metrics(c, run_id, metrics)
            _write_report(report, folder)
            c.log_artifacts(run_id, str(folder), "gate")
    if export:
        if report.verdict != "GO":
            report.refused = [f"{ch.suite}: {ch.name} = {ch.value} (needs {ch.threshold})"
                              for ch in checks if not ch.passed]
        elif not track:
            raise ValidationError("export needs tracking (the model is registered in MLflow): drop --no-track")
        else:
            report.export = _export(report, chosen, gate, store or first_retriever.store.root, uri)
    _write_report(report, folder)
    return report


def _write_report(report: GateReport, folder: Path) -> None:
    (folder / "gate.json").write_text(json.dumps(report.as_dict(), indent=2, default=str) + "\n", encoding="utf-8")
    (folder / "gate.md").write_text(report_table(report) + "\n", encoding="utf-8")


def report_table(report: GateReport) -> str:
    """The checks as a fixed-width table, then the verdict."""
    lines = [f"{'suite':<10} {'check':<42} {'value':>10}  {'threshold':<28} verdict"]
    for c in report.checks:
        value = "-" if c.value is None else f"{c.value:.4f}"
        lines.append(f"{c.suite:<10} {c.name:<42} {value:>10}  {c.threshold:<28} {'PASS' if c.passed else 'FAIL'}"
                     + (f"  ({c.note})" if c.note else ""))
    lines.append(f"verdict: {report.verdict}")
    sel = report.selection or {}
    if sel:
        lines += [f"selection: {line}" for line in describe(sel)]
        gain = sel.get("validation_gain")
        if gain and not gain["significant"]:
            lines.append(f"note: the candidate's gain over {sel['base']} is not significant once the "
                         f"{gain['configurations']} configurations its sweep compared are counted")
    return "\n".join(lines)


def data_drift(champ: dict[str, Any] | None, suite: str, dataset: Any) -> str | None:
    """What changed in a suite's data since the champion was judged on it (None: nothing, or the
    champion recorded no fingerprints)."""
    judged = ((champ or {}).get("data") or {}).get(suite)
    if not judged:
        return None
    now = {"corpus": dataset.fingerprint(), "gold": dataset.gold_fingerprint()}
    changed = [f"{what} {judged.get(what)} -> {now[what]}" for what in ("gold", "corpus")
               if judged.get(what) and judged[what] != now[what]]
    if not changed:
        return None
    return (f"the champion (version {champ['version']}) was judged on {judged.get('dataset')} data that has changed "
            f"since ({', '.join(changed)}; gold is the questions and their labels, corpus the memories and edges)")


def sweep_selection(candidate: str | None) -> dict[str, Any] | None:
    """selection.json beside a candidate file (a sweep's best.yaml), when there is one."""
    if not candidate or not Path(candidate).is_file():
        return None
    path = Path(candidate).with_name("selection.json")
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def load_report(folder: str | Path) -> GateReport:
    """The report a gate run wrote into ``folder`` (gate.json), e.g. for a later export step."""
    folder = Path(folder)
    path = folder / "gate.json"
    if not path.is_file():
        raise ValidationError(f"{folder} holds no gate report (gate.json): run the gate first")
    d = json.loads(path.read_text(encoding="utf-8"))
    checks = [Check(c["suite"], c["check"], c["value"], c["threshold"], c["verdict"] == "PASS", c.get("note") or "")
              for c in d["checks"]]
    return GateReport(d["verdict"], d["candidate"], checks, d["suites"], d.get("champion"), folder, d.get("run_id"),
                      selection=d.get("selection"))


def _first_question(dataset: Any) -> dict[str, str] | None:
    """The suite's first question as model input (the exported model's input example)."""
    if not dataset.questions.height:
        return None
    row = dataset.questions.sort("qid").row(0, named=True)
    return {"query": row["question"], "namespace": row["namespace"]}


def export_gated(report: GateReport, candidate: str, gate: GateConfig, store: str | Path, *, bundle: str | Path,
                 uri: str | None = None) -> dict[str, Any]:
    """Export a judged candidate: only on GO (else `ValidationError` naming each failed check),
    the bundle into ``bundle`` and the model registered as the new champion."""
    if report.verdict != "GO":
        failed = [f"{c.suite}: {c.name} = {c.value} (needs {c.threshold})" for c in report.checks if not c.passed]
        raise ValidationError(f"gate verdict {report.verdict}: not exported; failed: {'; '.join(failed)}")
    if not report.run_id:
        raise ValidationError("the gate report has no MLflow run (it ran with tracking off): cannot register a model")
    return _export(report, candidate_config(candidate), gate, store, uri, Path(bundle))


def _export(report: GateReport, chosen: Candidate, gate: GateConfig, store: str | Path, uri: str | None,
            bundle: Path | None = None) -> dict[str, Any]:
    """The bundle folder (search, save and assembly configs, manifest), then the pyfunc model
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
    digest = bundle_digest(config, assemble, chosen.save, packed, records)
    manifest = {
        "model": gate.model, "candidate": report.candidate, "verdict": report.verdict,
        "store": packed, "digest": digest,
        "embedding_models": records,
        "metrics": report.suites, "gate": [c.as_dict() for c in report.checks], "gate_config": gate.path,
        "dataset_fingerprints": {k: v["dataset_fingerprint"] for k, v in report.suites.items()},
        "lab_version": __version__, "git_commit": tracking.git_commit(), "run_id": report.run_id,
        "exported_at": datetime.now(timezone.utc).isoformat(),
    }
    write_bundle(bundle, config, assemble, chosen.save, manifest)
    got = tracking.export_model(report.run_id, bundle, gate.model, config_json=to_json(config),
                                assemble_json=to_json(assemble), verdict=report.verdict, uri=uri,
                                save_json=None if chosen.save is None else to_json(chosen.save),
                                data_json=json.dumps({k: {"dataset": v["dataset"], "corpus": v["dataset_fingerprint"],
                                                          "gold": v.get("gold_fingerprint")}
                                                      for k, v in report.suites.items()}, sort_keys=True),
                                digest=digest, example=next((v["example"] for v in report.suites.values()
                                                             if v.get("example")), None))
    return {**got, "bundle": str(bundle.resolve())}
