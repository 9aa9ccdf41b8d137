"""Regression conditions in the pyserini "2cr" style: each an evaluation with expected metrics.

Every condition is evaluated as ``lab eval`` would and reported OK (within ``tolerance`` of the
expected value, or better), OKISH (within ``okish``) or FAIL.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from lab.errors import NotFoundError, ValidationError
from lab.eval.goldens import load_dataset
from lab.eval.report import config_from
from lab.eval.runner import EvalOptions
from lab.eval.dataset_ref import DatasetOptions
from lab.eval.runs import evaluate_to_folder
from lab.eval.stores import eval_retriever, save_config

CONDITION_KEYS = {"name", "dataset", "preset", "config", "expected", "tolerance", "okish", "ks", "split",
                  "observations", "summaries", "credit_derived", "context_turns", "time_in_text"}


@dataclass(frozen=True)
class Outcome:
    name: str
    status: str  # OK | OKISH | FAIL
    notes: list[str]
    run: Path
    measured: dict[str, float]  # every metric the condition's evaluation produced
    result: Any = None  # the EvalResult, for tracking
    dataset: Any = None
    store_version: str | None = None


def load_regressions(path: str | Path) -> list[dict[str, Any]]:
    import yaml

    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"regressions file not found: {p}")
    doc = yaml.safe_load(p.read_text(encoding="utf-8"))
    conditions = doc.get("conditions") if isinstance(doc, dict) else None
    if not isinstance(conditions, list) or not conditions:
        raise ValidationError(f"{p}: expected a mapping with a non-empty 'conditions' list")
    for i, c in enumerate(conditions, start=1):
        if not isinstance(c, dict):
            raise ValidationError(f"{p} condition {i}: expected a mapping")
        for key in ("name", "dataset", "preset", "expected"):
            if key not in c:
                raise ValidationError(f"{p} condition {i}: '{key}' is required")
        unknown = sorted(set(c) - CONDITION_KEYS)
        if unknown:
            raise ValidationError(f"{p} condition {i}: unknown key(s) {unknown}; known: {sorted(CONDITION_KEYS)}")
    return conditions


def check(measured: dict[str, float], expected: dict[str, float], tolerance: float, okish: float) -> tuple[str, list[str]]:
    """OK within ``tolerance`` of the expected value (or better); OKISH within ``okish``; else FAIL."""
    status, notes = "OK", []
    for name, want in sorted(expected.items()):
        got = measured.get(name)
        if got is None:
            return "FAIL", [f"{name}: not measured"]
        diff = got - float(want)
        notes.append(f"{name} {got:.4f} (expected {float(want):.4f}, {diff:+.4f})")
        if diff < -okish:
            status = "FAIL"
        elif diff < -tolerance and status == "OK":
            status = "OKISH"
    return status, notes


def run_regressions(path: str | Path, *, base: EvalOptions = EvalOptions(), datasets: str | Path | None = None,
                    out_root: str | Path = "runs", progress: bool = False, embedder=None, root: Path | None = None,
                    embeddings: Path | None = None, project: str | Path | None = None) -> Iterator[Outcome]:
    """Evaluate every condition of a regressions file, one after the other.

    ``base`` holds the options a condition does not set itself; each condition starts from it
    afresh, so one condition's cutoffs never leak into the next. ``embedder`` defaults to each
    store's own model (tests pass the fake one).
    """
    for c in load_regressions(path):
        loaded = DatasetOptions(bool(c.get("observations", False)), bool(c.get("summaries", False)))
        dataset = load_dataset(c["dataset"], datasets, split=c.get("split", "train"),
                               observations=loaded.observations, summaries=loaded.summaries, project=project)
        options = replace(base, ks=tuple(c.get("ks", base.ks)),
                          credit_derived=bool(c.get("credit_derived", base.credit_derived)))
        retriever = eval_retriever(dataset, save_config(c.get("context_turns"), bool(c.get("time_in_text", False))),
                                   progress=progress, embedder=embedder, root=root, embeddings=embeddings)
        result, out = evaluate_to_folder(retriever, dataset, config_from(c["preset"], c.get("config")), options,
                                         out_root, loaded, root=root)
        status, notes = check(result.metrics["metrics"], c["expected"], float(c.get("tolerance", 0.005)),
                              float(c.get("okish", 0.02)))
        yield Outcome(str(c["name"]), status, notes, out, dict(result.metrics["metrics"]), result, dataset,
                      str(retriever.version))
