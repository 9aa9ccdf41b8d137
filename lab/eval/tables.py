"""A dataset as Parquet tables: what the DVC ``prepare`` stage writes and later stages read.

``questions.parquet``, ``qrels.parquet``, ``stale.parquet`` (and ``unanswerable.parquet`` for a
dataset with unanswerable questions) are the evaluation tables as they are; ``memories.parquet`` and ``edges.parquet`` hold one row per record with its id, namespace and
the whole record as JSON (records carry free-form metadata, which a fixed column set would lose);
``lab-dataset.json`` holds the rest (name, credit, saves, reference time, load report, source,
fingerprint). Reading the folder gives back an `EvalDataset` with the same fingerprint, so stores
and candidate tables built from it are the ones built from the original files.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from lab.errors import ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset, checked_reference_time

MARKER = "lab-dataset.json"
_RECORDS = {"id": pl.String, "namespace": pl.String, "record": pl.String}


def is_tables(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def write_tables(dataset: EvalDataset, folder: str | Path) -> Path:
    """Write ``dataset`` into ``folder`` (replacing its tables)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)

    def records(rows: list[dict]) -> pl.DataFrame:
        return pl.DataFrame([(str(r.get("id", "")), str(r.get("namespace", "")), json.dumps(r, sort_keys=True, default=str))
                             for r in rows], schema=_RECORDS, orient="row")

    records(dataset.memories).write_parquet(folder / "memories.parquet")
    records(dataset.edges).write_parquet(folder / "edges.parquet")
    dataset.questions.write_parquet(folder / "questions.parquet")
    dataset.qrels.write_parquet(folder / "qrels.parquet")
    dataset.stale.write_parquet(folder / "stale.parquet")
    if dataset.unanswerable.height:  # only a dataset that has them (the demo's prepared bytes stay as they were)
        dataset.unanswerable.write_parquet(folder / "unanswerable.parquet")
    meta = {"name": dataset.name, "credit": dataset.credit, "saves": dataset.saves,
            "reference_time": dataset.reference_time, "report": dataset.report, "source": dataset.source,
            "fingerprint": dataset.fingerprint(), "summary": dataset.summary(),
            # only a dataset with per-namespace times records them: the others' prepared bytes stay as they were
            **({"reference_times": dataset.reference_times} if dataset.reference_times else {})}
    (folder / MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")
    return folder


def read_tables(folder: str | Path) -> EvalDataset:
    """The `EvalDataset` written by `write_tables`; a missing or altered table is an error naming it."""
    folder = Path(folder)
    if not is_tables(folder):
        raise ValidationError(f"{folder} holds no prepared dataset ({MARKER} is missing): run `lab stage prepare`")
    meta = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    try:
        memories = [json.loads(r) for r in pl.read_parquet(folder / "memories.parquet")["record"].to_list()]
        edges = [json.loads(r) for r in pl.read_parquet(folder / "edges.parquet")["record"].to_list()]
        questions = pl.read_parquet(folder / "questions.parquet").cast(QUESTIONS_SCHEMA)
        qrels = pl.read_parquet(folder / "qrels.parquet").cast(QRELS_SCHEMA)
        stale = pl.read_parquet(folder / "stale.parquet")
        unanswerable = (pl.read_parquet(folder / "unanswerable.parquet").cast(QUESTIONS_SCHEMA)
                        if (folder / "unanswerable.parquet").is_file() else pl.DataFrame(schema=QUESTIONS_SCHEMA))
    except (OSError, pl.exceptions.PolarsError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{folder}: a prepared table cannot be read ({exc})") from None
    now = checked_reference_time(meta.get("reference_time"), str(folder / MARKER))
    dataset = EvalDataset(meta["name"], memories, questions, qrels, edges=edges, credit=meta.get("credit") or {},
                          saves=meta.get("saves") or {}, stale=stale, reference_time=now,
                          reference_times=meta.get("reference_times") or {}, report=meta.get("report") or {},
                          source=meta.get("source") or str(folder), unanswerable=unanswerable)
    if dataset.fingerprint() != meta.get("fingerprint"):
        raise ValidationError(f"{folder}: the memories or edges changed since they were prepared "
                              f"(fingerprint {dataset.fingerprint()} != {meta.get('fingerprint')})")
    return dataset
