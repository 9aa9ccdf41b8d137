"""Are two trees of run folders the same run? For a refactor that must change no behaviour: every
file byte-identical (`cmp`), except what records when and how fast (``made_by.json``; in
``metrics.json`` the timings and ``written_at``; in a system run's ``report.md`` its speed lines).

    python benchmarks/same_runs.py BEFORE AFTER     # e.g. two `lab eval ... --out DIR` trees

Prints one line per file (same | DIFF | MISSING) and exits 1 when any file differs or is missing.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

CLOCK_KEYS = ("written_at", "seconds")
CLOCK_SUFFIXES = ("_s", "_ms", "_per_s")  # durations and rates: how fast, not what was ranked
NOT_COMPARED = {"made_by.json"}  # who made the folder and when


def _without_clocks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_clocks(v) for k, v in value.items()
                if k not in CLOCK_KEYS and not k.endswith(CLOCK_SUFFIXES)}
    if isinstance(value, list):
        return [_without_clocks(v) for v in value]
    return value


def _report_without_speeds(text: str) -> list[str]:
    return [line for line in text.splitlines() if not any(w in line.lower() for w in ("ms", "/s", "speed", "seconds"))]


def same(before: Path, after: Path) -> tuple[bool, str]:
    """Whether two files of a run folder hold the same run, and how they were compared."""
    if before.name == "metrics.json":
        a, b = (_without_clocks(json.loads(p.read_text(encoding="utf-8"))) for p in (before, after))
        return a == b, "equal without clocks"
    if before.name == "report.md" and before.read_bytes() != after.read_bytes():
        a, b = (_report_without_speeds(p.read_text(encoding="utf-8")) for p in (before, after))
        return a == b, "equal without speed lines"
    return before.read_bytes() == after.read_bytes(), "byte-identical"


def compare(before: Path, after: Path) -> int:
    differ = 0
    files = sorted(p.relative_to(before) for p in before.rglob("*") if p.is_file() and p.name not in NOT_COMPARED)
    if not files:
        raise SystemExit(f"{before}: no run files to compare")
    for rel in files:
        if not (after / rel).is_file():
            print(f"MISSING  {rel}")
            differ += 1
            continue
        ok, how = same(before / rel, after / rel)
        print(f"{'same' if ok else 'DIFF':<8} {rel}  ({how})")
        differ += not ok
    print(f"{len(files) - differ} of {len(files)} files the same")
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python benchmarks/same_runs.py BEFORE AFTER")
    sys.exit(compare(Path(sys.argv[1]), Path(sys.argv[2])))
