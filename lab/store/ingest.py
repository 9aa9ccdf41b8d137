"""Readers for the project's memory and edge files (JSONL or Parquet), with located errors."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from lab.errors import NotFoundError, ValidationError

Located = tuple[str, dict[str, Any]]  # ("path line 12: ", record)


def read_records(path: str | Path) -> list[Located]:
    """Every record of a .jsonl or .parquet file, each with where it came from for error messages."""
    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"file not found: {path}")
    if path.suffix == ".parquet":
        return list(_parquet(path))
    if path.suffix in (".jsonl", ".ndjson"):
        return list(_jsonl(path))
    raise ValidationError(f"{path}: unsupported file type {path.suffix!r}; use .jsonl or .parquet")


def _jsonl(path: Path) -> Iterator[Located]:
    with path.open("rb") as fh:  # bytes: a line that is not UTF-8 is named, not a traceback
        for n, raw in enumerate(fh, start=1):
            where = f"{path.name} line {n}: "
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValidationError(f"{where}not UTF-8 text: byte {exc.start + 1} of the line "
                                      f"(0x{raw[exc.start]:02x}) {exc.reason}") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"{where}invalid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise ValidationError(f"{where}expected a JSON object, got {type(record).__name__}")
            yield where, record


def _parquet(path: Path) -> Iterator[Located]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise ValidationError(f"{path}: not a readable Parquet file: {exc}") from None
    for n, record in enumerate(table.to_pylist(), start=1):
        # Parquet has no "absent": drop nulls so defaults apply as for a missing JSON key
        yield f"{path.name} row {n}: ", {k: v for k, v in record.items() if v is not None}


def find_dataset_files(path: str | Path) -> tuple[Path, Path | None]:
    """A memories file and an optional edges file: either the file itself, or a folder's
    memories.{jsonl,parquet} and edges.{jsonl,parquet}."""
    path = Path(path)
    if path.is_file():
        return path, None
    if not path.is_dir():
        raise ValidationError(f"no such file or folder: {path}")
    memories = [p for p in (path / "memories.jsonl", path / "memories.parquet") if p.is_file()]
    if not memories:
        raise ValidationError(f"{path} holds no memories.jsonl or memories.parquet")
    edges = [p for p in (path / "edges.jsonl", path / "edges.parquet") if p.is_file()]
    return memories[0], (edges[0] if edges else None)
