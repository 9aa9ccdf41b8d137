"""`run_gate`: judge a candidate on every suite, record the verdict in MLflow, and export only on GO.

Deterministic: evaluations read cached candidates, the bootstrap and the paired test are seeded, so
the same candidate, data and seed give the same verdict and the same numbers, bit for bit. The
parts: `champion` (the registered champion, read as its bundle), `judge` (suites and checks),
`record` (MLflow), `export` (the bundle and the new champion).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from lab.errors import ValidationError
from lab.gate.champion import Champion, registered_champion
from lab.gate.checks import GateConfig, candidate_config
from lab.gate.export import export as export_bundle
from lab.gate.export import export_gated
from lab.gate.judge import JudgeOptions, data_drift, judge, sweep_selection
from lab.gate.record import record
from lab.gate.report import Exported, GateReport, SuiteResult, load_report, report_table, write_report

if TYPE_CHECKING:
    from lab.track.connect import Where

__all__ = ["run_gate", "GateReport", "SuiteResult", "Champion", "Exported", "JudgeOptions", "report_table",
           "load_report", "export_gated", "data_drift", "sweep_selection"]


def run_gate(gate: GateConfig, candidate: str | None, *, judging: JudgeOptions = JudgeOptions(),
             out_root: str | Path = "runs/gate", track: bool = True, uri: Where = None, export: bool = False,
             store: str | Path | None = None, query_model: str | None = None) -> GateReport:
    """Judge ``candidate`` (a preset name or a candidate file) against ``gate``: its search config on
    stores built with its index-time (save) settings (where and how: ``judging``), held against the
    registered champion's bundle; on export, its assembly settings go with it. ``query_model``
    encodes its queries instead of the candidate file's own (a query adapter: `lab adapt`), and the
    bundle carries it. Export without
    tracking is refused first, before any suite is judged (the model is registered in MLflow)."""
    if export and not track:
        raise ValidationError("export needs tracking (the model is registered in MLflow): drop --no-track")
    chosen = candidate_config(candidate)
    if query_model is not None:
        chosen = replace(chosen, query_model=query_model)
    champion = registered_champion(gate.model, uri) if track else None
    name = Path(candidate).stem if candidate and Path(candidate).suffix else (candidate or "lab")
    folder = Path(out_root) / f"{gate.model}-{name}"
    report = judge(gate, chosen, name, champion, folder, judging, sweep_selection(candidate))
    folder.mkdir(parents=True, exist_ok=True)
    if track:
        report = record(report, chosen, uri)
    if export and report.verdict != "GO":
        report = replace(report, refused=tuple(report.failed))
    elif export:
        first_store = next(iter(report.suites.values())).store
        report = replace(report, export=export_bundle(report, chosen, gate, store or first_store, uri))
    write_report(report)
    return report
