"""`record`: a judged gate report logged to MLflow as one `gate` run (the candidate's parameters,
the suites' metrics and CIs, the verdict as a tag, the report folder as artefacts)."""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from lab import track as tracking
from lab.config import Candidate, to_dict
from lab.gate.report import GateReport, write_report

if TYPE_CHECKING:
    from lab.track.connect import Where


def record(report: GateReport, chosen: Candidate, uri: Where = None) -> GateReport:
    """Log ``report`` as a gate run; returns it with its run id (the report folder, written with the
    run id, is the run's artefacts)."""
    suites = report.suites.values()
    tags = {"verdict": report.verdict, "preset": chosen.search.name, "candidate": report.candidate,
            "dataset": ",".join(s.dataset for s in suites),
            "dataset_fingerprint": ",".join(s.dataset_fingerprint for s in suites),
            "store_version": ",".join(s.store_version for s in suites)}
    params = tracking.flatten(to_dict(chosen.search))
    for section in ("save", "assemble"):  # what the candidate sets besides search
        if getattr(chosen, section) is not None:
            params.update(tracking.flatten(to_dict(getattr(chosen, section)), f"{section}."))
    if chosen.query_model is not None:
        params["query_model"] = tags["query_model"] = chosen.query_model
    with tracking.run(f"gate {report.candidate}: {report.verdict}", "gate", params=params,
                      tags=tags, uri=uri) as (_, c, run_id):
        report = replace(report, run_id=run_id)
        metrics: dict[str, float] = {}
        for sname, s in report.suites.items():
            metrics.update({f"{sname}.{k}": v for k, v in s.metrics.items()})
            for k, (lo, hi) in s.ci95.items():
                metrics[f"{sname}.{k}.ci95_low"], metrics[f"{sname}.{k}.ci95_high"] = lo, hi
        metrics["checks_failed"] = float(sum(not ch.passed for ch in report.checks))
        tracking.log_metrics(c, run_id, metrics)
        write_report(report)
        c.log_artifacts(run_id, str(report.folder), "gate")
    return report
