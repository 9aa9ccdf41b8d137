"""`run_gate`: judge a candidate on every suite, record the verdict in MLflow, and export only on GO.

Deterministic: evaluations read cached candidates, the bootstrap and the paired test are seeded, so
the same candidate, data and seed give the same verdict and the same numbers, bit for bit. The
parts: `judge` (suites and checks), `record` (MLflow), `export` (the bundle and the champion).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from lab import track as tracking
from lab.errors import ValidationError
from lab.gate.checks import GateConfig, candidate_config
from lab.gate.export import export as export_bundle
from lab.gate.export import export_gated
from lab.gate.judge import JudgeOptions, data_drift, judge, sweep_selection
from lab.gate.record import record
from lab.gate.report import Champion, Exported, GateReport, SuiteResult, load_report, report_table, write_report

__all__ = ["run_gate", "GateReport", "SuiteResult", "Champion", "Exported", "report_table", "load_report",
           "export_gated", "data_drift", "sweep_selection"]


def run_gate(gate: GateConfig, candidate: str | None, *, datasets: str | Path | None = None,
             out_root: str | Path = "runs/gate", track: bool = True, uri: str | None = None, export: bool = False,
             store: str | Path | None = None, progress: bool = False, embedder=None, root: Path | None = None,
             rebaseline: bool = False) -> GateReport:
    """Judge ``candidate`` (a preset name or a candidate file) against ``gate``: its search config on
    stores built with its index-time (save) settings; on export, its assembly settings go with it."""
    chosen = candidate_config(candidate)
    champion = Champion.from_record(tracking.champion(gate.model, uri)) if track else None
    name = Path(candidate).stem if candidate and Path(candidate).suffix else (candidate or "lab")
    folder = Path(out_root) / f"{gate.model}-{name}"
    opts = JudgeOptions(datasets, root, embedder, progress, rebaseline)
    report = judge(gate, chosen, name, champion, folder, opts, sweep_selection(candidate))
    folder.mkdir(parents=True, exist_ok=True)
    if track:
        report = record(report, chosen, uri)
    if export and report.verdict != "GO":
        report = replace(report, refused=tuple(report.failed))
    elif export and not track:
        raise ValidationError("export needs tracking (the model is registered in MLflow): drop --no-track")
    elif export:
        first_store = next(iter(report.suites.values())).store
        report = replace(report, export=export_bundle(report, chosen, gate, store or first_store, uri))
    write_report(report)
    return report

