"""What the flow's steps make, as small typed values the shells word: the DVC stages' results,
which `lab demo`'s sweep, gate and export steps make too (`lab.flow.demo`)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lab.gate.report import Exported, GateReport
    from lab.tune.sweep import SweepResult


@dataclass(frozen=True)
class Prepared:
    dataset: str
    memories: int
    questions: int
    folder: Path


@dataclass(frozen=True)
class Indexed:
    store: Path


@dataclass(frozen=True)
class CandidatesMade:
    rows: int
    preset: str
    recall_at_10: float


@dataclass(frozen=True)
class Swept:
    """A sweep's outcome: its best configuration's objective on the tune and validation questions
    (and on all of them), how many configurations it scored, its folder and its candidate file."""
    objective: str
    tune: float
    validation: float
    best: Path  # the candidate file (best.yaml): what the gate judges
    all: float | None = None
    configurations: int | None = None
    folder: Path | None = None

    @classmethod
    def of(cls, result: SweepResult, best: Path | None = None) -> Swept:
        """``result`` in brief; ``best``: where its candidate file was copied (default: in its folder)."""
        obj, row = result.spec.objective, result.best
        return cls(obj, row.get(f"tune/{obj}"), row.get(f"validation/{obj}"), best or result.folder / "best.yaml",
                   row.get(f"all/{obj}"), result.info.get("scored"), result.folder)


@dataclass(frozen=True)
class Gated:
    report: GateReport


@dataclass(frozen=True)
class ExportedModel:
    model: str
    export: Exported
    bundle: Path


StageResult = Prepared | Indexed | CandidatesMade | Swept | Gated | ExportedModel
