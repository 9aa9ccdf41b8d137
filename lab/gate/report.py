"""What a gate run made, as small typed values: each suite's figures, the champion it was held
against, the export, and the report that gathers them (written as gate.json and gate.md)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lab.errors import ValidationError
from lab.gate.champion import Champion, judged_on
from lab.gate.checks import Check
from lab.tune.selection import describe


@dataclass(frozen=True)
class SuiteResult:
    """One suite's headline figures, the data it was judged on and the store it was judged over."""
    dataset: str
    dataset_fingerprint: str
    gold_fingerprint: str
    questions: int
    store: str
    store_version: str
    metrics: Mapping[str, float]
    example: Mapping[str, str] | None  # the exported model's input example: the suite's first question
    ci95: Mapping[str, Any]  # metric -> (low, high)
    warnings: tuple[str, ...] = ()  # what its lists said about fusing (lab.eval.health); serving repeats them

    def as_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "dataset_fingerprint": self.dataset_fingerprint,
                "gold_fingerprint": self.gold_fingerprint, "questions": self.questions, "store": self.store,
                "store_version": self.store_version, "metrics": dict(self.metrics), "example": self.example,
                "ci95": dict(self.ci95), "warnings": list(self.warnings)}

    def judged_on(self) -> dict[str, str]:
        """The data this suite judged on, as the champion's record keeps it."""
        return judged_on(self.as_dict())


@dataclass(frozen=True)
class Exported:
    """The champion registered on GO: the model version and the bundle folder written for it."""
    model: str
    version: str
    uri: str  # models:/NAME@champion
    model_uri: str
    reused: bool  # the same bundle as an earlier version: @champion moved back to it, nothing registered
    bundle: str

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "version": self.version, "uri": self.uri, "model_uri": self.model_uri,
                "reused": self.reused, "bundle": self.bundle}


@dataclass(frozen=True)
class GateReport:
    verdict: str
    candidate: str
    checks: tuple[Check, ...]
    suites: Mapping[str, SuiteResult]
    champion: Champion | None
    folder: Path
    run_id: str | None = None
    export: Exported | None = None
    refused: tuple[str, ...] = ()
    # the sweep's honest-selection figures when the candidate is a sweep's best.yaml (selection.json beside it)
    selection: Mapping[str, Any] | None = field(default=None)
    query_model: str | None = None  # the model encoding the candidate's queries, when it had its own

    @property
    def failed(self) -> list[str]:
        """Each failed check in one line: suite, check, value and what it needed."""
        return [f"{c.suite}: {c.name} = {c.value} (needs {c.threshold})" for c in self.checks if not c.passed]

    def as_dict(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "candidate": self.candidate, "checks": [c.as_dict() for c in self.checks],
                "suites": {k: s.as_dict() for k, s in self.suites.items()},
                "champion": dict(self.champion.record) if self.champion and self.champion.record else None,
                "run_id": self.run_id, "export": self.export.as_dict() if self.export else None,
                "export_refused": list(self.refused) or None, "selection": self.selection,
                "query_model": self.query_model}


def write_report(report: GateReport) -> None:
    """gate.json and gate.md in the report's folder."""
    folder = report.folder
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
    if report.query_model:
        lines.append(f"queries encoded by: {report.query_model}")
    sel = report.selection or {}
    if sel:
        lines += [f"selection: {line}" for line in describe(dict(sel))]
        gain = sel.get("validation_gain")
        if gain and not gain["significant"]:
            lines.append(f"note: the candidate's gain over {sel['base']} is not significant once the "
                         f"{gain['configurations']} configurations its sweep compared are counted")
    return "\n".join(lines)


def load_report(folder: str | Path) -> GateReport:
    """The report a gate run wrote into ``folder`` (gate.json), e.g. for a later export step."""
    folder = Path(folder)
    path = folder / "gate.json"
    if not path.is_file():
        raise ValidationError(f"{folder} holds no gate report (gate.json): run the gate first")
    d = json.loads(path.read_text(encoding="utf-8"))
    checks = tuple(Check(c["suite"], c["check"], c["value"], c["threshold"], c["verdict"] == "PASS", c.get("note") or "")
                   for c in d["checks"])
    suites = {k: SuiteResult(**{**v, "warnings": tuple(v.get("warnings") or ())}) for k, v in d["suites"].items()}
    return GateReport(d["verdict"], d["candidate"], checks, suites, Champion.from_record(d.get("champion")), folder,
                      d.get("run_id"), selection=d.get("selection"), query_model=d.get("query_model"))
