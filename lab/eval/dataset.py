"""An evaluation dataset: memories to store, questions, gold (qrels), and a load report."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from typing import Any

import polars as pl

from lab.config import parse_time
from lab.errors import ValidationError


def checked_reference_time(value: Any, where: str) -> str | None:
    """A dataset's ``reference_time`` (its "now"), checked by the one parser search reads it with
    (lab.config.parse_time), at load, so `lab goldens check` refuses what `lab eval` would: None,
    the text as given when it parses, or a YAML date-time as ISO 8601 UTC text."""
    if value is None:
        return None
    try:
        moment = parse_time(value, "reference_time")
    except ValidationError as exc:
        raise ValidationError(f"{where}: {exc}", field="reference_time") from None
    return value if isinstance(value, str) else moment.isoformat().replace("+00:00", "Z")


def file_sha256(path) -> str:
    """The SHA-256 of a dataset file, read a megabyte at a time (files of gigabytes stay out of memory)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


QUESTIONS_SCHEMA = {"qid": pl.String, "namespace": pl.String, "question": pl.String, "category": pl.String}
QRELS_SCHEMA = {"qid": pl.String, "memory_id": pl.String, "relevance": pl.Int64}


@dataclass
class EvalDataset:
    """Everything an evaluation needs, read from files; no store involved yet.

    ``credit`` maps a derived memory (e.g. a LoCoMo observation) to the memory it came from, so a
    metric may count a hit on the derived one as a hit on its source (off unless asked).
    ``saves`` holds memories to save right before a question is asked (save-then-search goldens).
    ``stale`` lists, per question, memories that must not win (superseded facts).
    """

    name: str
    memories: list[dict[str, Any]]
    questions: pl.DataFrame
    qrels: pl.DataFrame
    edges: list[dict[str, Any]] = field(default_factory=list)
    credit: dict[str, str] = field(default_factory=dict)
    saves: dict[str, dict[str, Any]] = field(default_factory=dict)
    stale: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema={"qid": pl.String, "memory_id": pl.String}))
    # questions whose answer is stored nowhere (LongMemEval's _abs): not scored for recall, asked
    # only to measure abstention (lab.eval.abstention)
    unanswerable: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=QUESTIONS_SCHEMA))
    reference_time: str | None = None
    # a namespace's own "now" (LongMemEval: each question's date for its own haystack), over reference_time
    reference_times: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the file or folder it was read from (run folders record it)

    def fingerprint(self) -> str:
        """Hash of the memories and edges: the eval store is rebuilt only when they change."""
        h = hashlib.sha256()
        for m in sorted(self.memories, key=lambda m: m["id"]):
            h.update(json.dumps(m, sort_keys=True, default=str).encode())
        for e in self.edges:
            h.update(json.dumps(e, sort_keys=True, default=str).encode())
        return h.hexdigest()[:16]

    def questions_only(self, questions: pl.DataFrame) -> "EvalDataset":
        """This dataset scored on ``questions`` alone (a held-out fold): a shallow copy with its
        questions and qrels narrowed; the memories are shared, not copied."""
        return replace(self, questions=questions,
                       qrels=self.qrels.filter(pl.col("qid").is_in(questions["qid"].to_list())))

    def gold_fingerprint(self) -> str:
        """Hash of the questions and their gold (qrels): changes when a question or a label does."""
        h = hashlib.sha256()
        for frame in (self.questions, self.qrels):
            cols = sorted(frame.columns)
            h.update(json.dumps(cols).encode())
            for row in frame.select(cols).sort(cols).iter_rows():
                h.update(json.dumps(row, default=str).encode())
        return h.hexdigest()[:16]

    def summary(self) -> dict[str, Any]:
        return {
            "dataset": self.name, "memories": len(self.memories), "edges": len(self.edges),
            "questions": self.questions.height, "qrels": self.qrels.height,
            "namespaces": sorted(self.questions["namespace"].unique().to_list()),
            "categories": dict(sorted(self.questions.group_by("category").len().iter_rows())),
            **self.report,
        }
