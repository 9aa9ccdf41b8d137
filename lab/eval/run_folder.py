"""A run folder is written whole or not at all, and says what made it.

Every file goes into a hidden temporary folder beside the target, which is renamed into place when
complete: a failure or a kill mid-write leaves the earlier folder as it was (and a hidden
``.NAME.writing-PID`` folder, removed by the next write). ``made_by.json`` records what made the
run (a search configuration or a memory system, the dataset and its source file, the index-time
settings); a folder made by something else is refused, never mixed with, so one folder can never
hold one evaluation's report beside another's metrics.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any, Callable

from lab.errors import ConflictError

MADE_BY = "made_by.json"
# what run folders written before made_by.json held: such a folder is replaced whole
_RUN_FILES = {"config.yaml", "metrics.json", "per_question.parquet", "run.parquet", "run.trec", "qrels.trec",
              "recall_at_k.png", "categories.png", "report.md", "dataset.json", "context.parquet",
              "system.log"}


def maker(kind: str, name: str, dataset: str, source: str | None = None, index: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """What made a run: ``kind`` is ``search configuration`` or ``memory system``."""
    return {"kind": kind, "name": name, "dataset": dataset, "source": source, "index": index}


def _describe(made: dict[str, Any]) -> str:
    where = f" ({made['source']})" if made.get("source") else ""
    return f"the {made.get('kind')} {made.get('name')!r} on {made.get('dataset')}{where}"


def _check_replaceable(out: Path, made: dict[str, Any]) -> None:
    marker = out / MADE_BY
    if marker.is_file():
        before = json.loads(marker.read_text(encoding="utf-8"))
        same = {k: before.get(k) for k in ("kind", "name", "dataset", "source")} == \
               {k: made.get(k) for k in ("kind", "name", "dataset", "source")}
        if not same:
            raise ConflictError(f"run folder {out} holds a run of {_describe(before)}, not of {_describe(made)}: "
                                "nothing was written; give another --out, or remove that folder")
        return
    legacy = out / "dataset.json"  # what an earlier version recorded: the dataset's source file
    if legacy.is_file():
        before = json.loads(legacy.read_text(encoding="utf-8")).get("source")
        if before and before != made.get("source"):
            raise ConflictError(f"run folder {out} holds a run of {before}, not of {_describe(made)}: "
                                "nothing was written; give another --out, or remove that folder")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in _RUN_FILES)
    if foreign:
        raise ConflictError(f"{out} exists and is not a run folder (it holds {', '.join(foreign[:3])}): "
                            "nothing was written; give another --out, or remove that folder")


def _clear_leftovers(out: Path) -> None:
    """Remove what a killed write of ``out`` left (its process is gone)."""
    for left in out.parent.glob(f".{out.name}.*-*"):
        kind, _, pid = left.name.rpartition("-")
        if kind.endswith((".writing", ".replaced")) and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process is not writing it now: a leftover of an earlier call
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def publish(out: Path, made: dict[str, Any], write: Callable[[Path], Any]) -> Path:
    """Run ``write(folder)`` into a temporary folder, then put it at ``out`` whole (replacing the
    earlier run of the same maker); returns ``out``."""
    out = Path(out)
    if out.exists():
        _check_replaceable(out, made)
    out.parent.mkdir(parents=True, exist_ok=True)
    _clear_leftovers(out)
    tmp = out.parent / f".{out.name}.writing-{os.getpid()}"
    tmp.mkdir()
    try:
        write(tmp)
        (tmp / MADE_BY).write_text(json.dumps(made, indent=2, default=str) + "\n", encoding="utf-8")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = out.parent / f".{out.name}.replaced-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)  # two renames: between them a reader sees no folder, never a mixed one
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)
    return out
