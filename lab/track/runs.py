"""Runs: every `lab eval`, `lab sweep` and `lab gate` as an MLflow run, its params, metrics and folder.

A run that fails ends FAILED (KILLED on Ctrl-C), so no run is left RUNNING for a teammate to
wonder about; when the server is gone and cannot be told, the error says which run is left and
how to close it.
"""
from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any, Iterator

from lab.config import to_dict
from lab.errors import ValidationError
from lab.track.code import git_commit
from lab.track.connect import (TrackingError, Where, answers, client, failure, guarded, is_server, shown_uri, timeout_of,
                               tracking_uri)
from lab.version import __version__


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config dicts as dotted MLflow params (``fusion.weights.vector``)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


def base_tags(kind: str, **tags: Any) -> dict[str, str]:
    out = {"lab.kind": kind, "lab.version": __version__, "lab.git_commit": git_commit() or "unknown"}
    out.update({f"lab.{k}": str(v) for k, v in tags.items() if v is not None})
    return out


@contextlib.contextmanager
def run(name: str, kind: str, *, params: dict[str, Any] | None = None, tags: dict[str, Any] | None = None,
        uri: Where = None, parent: str | None = None) -> Iterator[Any]:
    """An MLflow run (a child of ``parent`` when given); yields (mlflow, client, run id). It ends
    FINISHED, FAILED when the body raises, KILLED on Ctrl-C; a tracking failure inside becomes one
    `TrackingError` line that names the run when it could not be ended."""
    mlflow, c, exp_id = client(uri)
    all_tags = base_tags(kind, **(tags or {}))
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    with guarded(uri, f"starting run {name!r}"):
        created = c.create_run(exp_id, run_name=name, tags=all_tags)
    run_id = created.info.run_id
    try:
        if params:
            log_params(c, run_id, params)
        yield mlflow, c, run_id
    except KeyboardInterrupt:
        end_run(c, run_id, "KILLED", uri)
        raise
    except BaseException as exc:
        left = end_run(c, run_id, "FAILED", uri)
        reason = None if isinstance(exc, TrackingError) else failure(exc, timeout_of(uri))
        if reason is not None:
            exc = TrackingError(tracking_uri(uri), f"logging run {run_id} ({name})", reason)
        if isinstance(exc, TrackingError):
            if left:
                exc.leave(left)
            raise exc from None
        if left:  # the body's own error goes on; what the tracking store could not be told is said beside it
            logging.getLogger(__name__).warning("%s", left)
        raise
    try:
        with guarded(uri, f"ending run {run_id} ({name})"):
            c.set_terminated(run_id, status="FINISHED")
    except TrackingError as exc:
        exc.leave(left_running(run_id, uri))
        raise


def end_run(c: Any, run_id: str, status: str, uri: Where = None) -> str | None:
    """End ``run_id`` with ``status``; None when done, else what to do about the run left RUNNING
    (a server that does not answer its health check is not asked, so this takes seconds)."""
    resolved = tracking_uri(uri)
    if not is_server(resolved) or answers(resolved, timeout=3) is None:
        try:
            c.set_terminated(run_id, status=status)
            return None
        except Exception:  # noqa: BLE001 - the store failing again: say what is left instead
            pass
    return left_running(run_id, uri)


def left_running(run_id: str, uri: Where = None) -> str:
    """What to do about a run the tracking store could not be told had ended."""
    return (f"run {run_id} is left RUNNING: when the server is back, "
            f"`MLFLOW_TRACKING_URI={shown_uri(tracking_uri(uri))} mlflow runs delete --run-id {run_id}`")


def log_params(c, run_id: str, params: dict[str, Any]) -> None:
    import re

    from mlflow.entities import Param

    # MLflow names allow no '@': a view's list ("fusion.weights.vector@plain") is logged with ':'.
    # Any other name MLflow refuses (a system's own setting) is logged under a spelling it takes,
    # said once on the log, so one odd name costs its spelling, not the run; two names that would
    # become one are refused, naming both.
    names: dict[str, str] = {}
    for key in sorted(params):
        name = re.sub(r"[^\w.\- :/]", "_", str(key).replace("@", ":"))[:250]
        name = "/".join(p if p not in ("", ".", "..") else "_" for p in name.split("/"))  # no path tricks
        if name != str(key).replace("@", ":")[:250]:
            logging.getLogger(__name__).warning("MLflow param %r is logged as %r (a param name holds letters, "
                                                "digits, _ - . : / and spaces)", key, name)
        if name in names.values():
            other = next(k for k, v in names.items() if v == name)
            raise ValidationError(f"params {other!r} and {key!r} would both be logged as {name!r} in MLflow: "
                                  "rename one (a param name holds letters, digits, _ - . : / and spaces)")
        names[key] = name
    items = [Param(names[k], str(v)[:6000]) for k, v in sorted(params.items())]
    for i in range(0, len(items), 100):
        c.log_batch(run_id, params=items[i:i + 100])


def log_metrics(c, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    import math
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k.replace("@", "_at_"), float(v), now, step) for k, v in sorted(metrics.items())
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
    for i in range(0, len(items), 500):
        c.log_batch(run_id, metrics=items[i:i + 500])


def log_eval(result: Any, folder: Path, *, dataset: Any, store_version: str, uri: Where = None,
             parent: str | None = None, kind: str = "eval", extra_tags: dict[str, str] | None = None) -> str:
    """One evaluation as a run: the flattened config, metrics with CI bounds, tags, the run folder."""
    m = result.metrics
    metrics = dict(m["metrics"])
    for name, (lo, hi) in m.get("ci95", {}).items():
        metrics[f"{name}.ci95_low"], metrics[f"{name}.ci95_high"] = lo, hi
    for name, value in (m.get("context") or {}).items():
        metrics[name] = value
    abstention = m.get("abstention") or {}
    if abstention:  # the fitted threshold and each part's figures (abstention.validation.auroc, ...)
        metrics["abstention.threshold"] = abstention["threshold"]
        for part in ("tune", "validation"):
            for name, value in abstention[part].items():
                if isinstance(value, (int, float)):
                    metrics[f"abstention.{part}.{name}"] = value
    errata = m.get("errata") or {}
    for name, value in (errata.get("corrected") or {}).items():  # an overlay's labels: beside, never instead
        metrics[f"corrected.{name}"] = value
    if errata:
        extra_tags = {**(extra_tags or {}), "errata": errata["file"], "errata_sha256": errata["sha256"]}
    tags = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(), "store_version": store_version,
            "preset": result.config.name, "run_folder": str(Path(folder).resolve()), **(extra_tags or {})}
    with run(f"{kind} {dataset.name} {result.config.name}", kind, params=flatten(to_dict(result.config)),
             tags=tags, uri=uri, parent=parent) as (_, c, run_id):
        log_metrics(c, run_id, metrics)
        log_dataset(run_id, dataset, uri)
        log_interval_table(c, run_id, m)
        c.log_artifacts(run_id, str(folder), "run")
    return run_id


def log_dataset(run_id: str, dataset: Any, uri: Where = None) -> None:
    """The evaluation's questions as the run's input dataset (MLflow's dataset API): its name,
    digest (lab's fingerprint of corpus and gold) and source show on the run and in the runs table."""
    import pandas as pd

    mlflow, _, _ = client(uri)
    frame = pd.DataFrame(dataset.questions.to_dicts())
    data = mlflow.data.from_pandas(frame, source=str(dataset.source or dataset.name), name=dataset.name,
                                   digest=f"{dataset.fingerprint()}-{dataset.gold_fingerprint()}")
    with mlflow.start_run(run_id=run_id):
        mlflow.log_input(data, context="evaluation")


def log_interval_table(c, run_id: str, metrics: dict[str, Any]) -> None:
    """Every metric with its 95% interval as one table (``metrics_ci.json``, shown by the UI's
    artifact view): each metric once with its bounds, not a one-bar chart per bound."""
    rows = [{"metric": name, "mean": float(value), "ci95_low": float(metrics["ci95"][name][0]),
             "ci95_high": float(metrics["ci95"][name][1])}
            for name, value in metrics["metrics"].items() if name in metrics.get("ci95", {})]
    if rows:
        c.log_table(run_id, data={k: [r[k] for r in rows] for k in rows[0]}, artifact_file="metrics_ci.json")


def log_system(result: Any, folder: Path, *, dataset: Any, uri: Where = None) -> str:
    """A memory system's evaluation (lab.adapters.harness) as a run: its settings, metrics with CI
    bounds, ingest and search speed, the round trip, tags naming the system, the run folder."""
    m = result.metrics
    metrics = dict(m["metrics"])
    for name, (lo, hi) in m.get("ci95", {}).items():
        metrics[f"{name}.ci95_low"], metrics[f"{name}.ci95_high"] = lo, hi
    speed = m.get("speed") or {}
    for key, value in {"ingest_memories_per_s": (speed.get("ingest") or {}).get("memories_per_s"),
                       "search_p50_ms": (speed.get("search") or {}).get("p50_ms"),
                       "search_p99_ms": (speed.get("search") or {}).get("p99_ms"),
                       "round_trip_delay_ms": (m.get("round_trip") or {}).get("delay_ms")}.items():
        if value is not None:
            metrics[key] = value
    system = result.system
    tags = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(), "system": system["system"],
            "adapter": system.get("adapter", ""), "approximates": system.get("approximates") or "",
            "run_folder": str(Path(folder).resolve())}
    with run(f"system {dataset.name} {system['system']}", "system", params=flatten(system.get("settings") or {}),
             tags=tags, uri=uri) as (_, c, run_id):
        log_metrics(c, run_id, metrics)
        log_dataset(run_id, dataset, uri)
        log_interval_table(c, run_id, m)
        c.log_artifacts(run_id, str(folder), "run")
    return run_id


def recent_runs(n: int = 20, uri: Where = None, kind: str | None = None) -> list[dict[str, Any]]:
    """The latest runs, newest first: id, name, kind, status, start, headline metrics, verdict."""
    _, c, exp_id = client(uri)
    flt = f"tags.`lab.kind` = '{kind}'" if kind else ""
    out = []
    with guarded(uri, "listing runs"):
        found = c.search_runs([exp_id], filter_string=flt, order_by=["attributes.start_time DESC"], max_results=n)
    for r in found:
        tags = r.data.tags
        out.append({"run_id": r.info.run_id, "name": r.info.run_name, "kind": tags.get("lab.kind"),
                    "status": r.info.status, "start_time": r.info.start_time,
                    "parent": tags.get("mlflow.parentRunId"), "verdict": tags.get("lab.verdict"),
                    "dataset": tags.get("lab.dataset"), "metrics": dict(r.data.metrics)})
    return out
