"""A run folder is written whole or not at all, and says what made it.

Every file goes into a hidden temporary folder beside the target (``.NAME.writing-PID``), whose
``made_by.json`` is put in last, in one rename: a folder that has it is complete. The earlier run is
then renamed aside (``.NAME.replaced-PID``) and the new one renamed in, under a lock on the parent
folder, so two writers never interleave their renames. A kill at any point leaves at least one
complete copy: between the two renames both copies are complete and hidden, and the next write of
that folder (under the same lock, before it writes anything) puts the newest complete copy back
in place and removes the rest. ``made_by.json`` records what made the run (a search configuration
or a memory system, the dataset and its source file, the index-time settings); a folder made by
something else is refused, never mixed with, so one folder can never hold one evaluation's report
beside another's metrics. A run folder that is a symlink is written through: the folder it points
to is replaced whole, beside itself, and the link is kept.
"""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from lab.errors import ConflictError, LabError, ValidationError

MADE_BY = "made_by.json"
MAX_MADE_BY_BYTES = 1 << 20  # what lab writes is a few hundred bytes: a bigger file is no maker record
MAKER_KEYS = ("kind", "name", "dataset")
# what run folders written before made_by.json held: such a folder is replaced whole
_RUN_FILES = {"config.yaml", "metrics.json", "per_question.parquet", "run.parquet", "run.trec", "qrels.trec",
              "recall_at_k.png", "categories.png", "report.md", "dataset.json", "context.parquet",
              "system.log"}
_KINDS = (".writing", ".replaced")
NOTHING = "nothing was written; give another --out, or remove that folder"


def maker(kind: str, name: str, dataset: str, source: str | None = None, index: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """What made a run: ``kind`` is ``search configuration`` or ``memory system``."""
    return {"kind": kind, "name": name, "dataset": dataset, "source": source, "index": index}


def read_json_file(path: Path, what: str, limit: int = MAX_MADE_BY_BYTES) -> Any:
    """A small JSON file of a run folder, or a ValidationError naming the file and what is wrong
    (not a regular file, too big, not UTF-8, not JSON, nested too deep)."""
    if not path.is_file():  # a fifo, a device (/dev/zero) or a folder: never read
        raise ValidationError(f"{path}: {what} is not a regular file")
    try:
        size = path.stat().st_size
        if size > limit:
            raise ValidationError(f"{path}: {what} has {size} bytes, more than the {limit} such a file may have")
        return json.loads(path.read_bytes().decode("utf-8"), parse_constant=_no_constant, parse_float=_finite)
    except OSError as exc:
        raise ValidationError(f"{path}: {what} cannot be read ({exc.strerror or exc})") from None
    except _NotFinite as exc:
        raise ValidationError(f"{path}: {what} holds the number {exc}, which lab never writes (a damaged or "
                              "edited file)") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path}: {what} is not valid JSON ({exc.msg} at line {exc.lineno} "
                              f"column {exc.colno})") from None
    except RecursionError:
        raise ValidationError(f"{path}: {what} nests deeper than a JSON reader follows") from None


class _NotFinite(ValueError):
    """A NaN or infinite number in a file lab wrote with finite numbers only."""


def _no_constant(name: str) -> float:
    raise _NotFinite(name)


def _finite(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise _NotFinite(text)
    return value


def read_made_by(folder: Path) -> dict[str, Any] | None:
    """The folder's ``made_by.json`` (None when it has none); a damaged one is refused naming it."""
    marker = Path(folder) / MADE_BY
    if not marker.exists() and not marker.is_symlink():
        return None
    made = read_json_file(marker, "the run's maker record")
    if not isinstance(made, dict):
        raise ValidationError(f"{marker}: the run's maker record is a JSON {type(made).__name__}, not an object "
                              f"with {', '.join(MAKER_KEYS)}")
    bad = [k for k in MAKER_KEYS if not isinstance(made.get(k), str)]
    if bad:
        raise ValidationError(f"{marker}: the run's maker record has no text {', '.join(bad)}")
    return made


def _describe(made: dict[str, Any]) -> str:
    where = f" ({made['source']})" if made.get("source") else ""
    return f"the {made.get('kind')} {made.get('name')!r} on {made.get('dataset')}{where}"


def _check_replaceable(out: Path, made: dict[str, Any]) -> None:
    if not out.is_dir():
        raise ConflictError(f"{out} exists and is not a folder: {NOTHING}")
    try:
        before = read_made_by(out)
    except ValidationError as exc:
        raise ValidationError(f"run folder {out} cannot be replaced: {exc}; {NOTHING}") from None
    if before is not None:
        same = {k: before.get(k) for k in ("kind", "name", "dataset", "source")} == \
               {k: made.get(k) for k in ("kind", "name", "dataset", "source")}
        if not same:
            raise ConflictError(f"run folder {out} holds a run of {_describe(before)}, not of {_describe(made)}: "
                                f"{NOTHING}")
        return
    legacy = out / "dataset.json"  # what an earlier version recorded: the dataset's source file
    if legacy.is_file():
        try:
            recorded = read_json_file(legacy, "the run's dataset record")
        except ValidationError as exc:
            raise ValidationError(f"run folder {out} cannot be replaced: {exc}; {NOTHING}") from None
        before_source = recorded.get("source") if isinstance(recorded, dict) else None
        if before_source and before_source != made.get("source"):
            raise ConflictError(f"run folder {out} holds a run of {before_source}, not of {_describe(made)}: "
                                f"{NOTHING}")
    foreign = sorted(p.name for p in out.iterdir() if p.name not in _RUN_FILES)
    if foreign:
        raise ConflictError(f"{out} exists and is not a run folder (it holds {', '.join(foreign[:3])}): {NOTHING}")


def _target(out: Path) -> Path:
    """Where the run folder is written: ``out``, or the folder a symlink ``out`` points to (written
    through: replacing the link would leave it behind as garbage and cut the user's redirection)."""
    if not out.is_symlink():
        return out
    try:
        target = out.resolve(strict=True)
    except (OSError, RuntimeError):
        raise ValidationError(f"run folder {out} is a symlink to {os.readlink(out)!r}, which does not resolve to a "
                              f"folder: {NOTHING}") from None
    if not target.is_dir():
        raise ValidationError(f"run folder {out} is a symlink to {target}, which is not a folder: {NOTHING}")
    return target


@contextmanager
def _parent_locked(parent: Path) -> Iterator[None]:
    """An exclusive lock on the folder that holds run folders (flock on the folder itself: no lock
    file is left behind, and a killed holder releases it)."""
    import fcntl

    fd = os.open(parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


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


def _leftovers(out: Path) -> list[tuple[str, Path]]:
    """(kind, path) of what killed writes of ``out`` left: their processes are gone."""
    found, head = [], f".{out.name}."
    for left in sorted(out.parent.iterdir()):
        kind, _, pid = left.name[len(head) - 1:].rpartition("-")
        if left.name.startswith(head) and kind in _KINDS and pid.isdigit() and not _alive(int(pid)):
            found.append((kind, left))
    return found


def _complete(folder: Path) -> float | None:
    """When a leftover folder was completed (its made_by.json's time), or None when it was not."""
    try:
        return (folder / MADE_BY).stat().st_mtime if read_made_by(folder) is not None else None
    except (OSError, ValidationError):
        return None


def _remove(path: Path) -> None:
    if path.is_symlink():
        path.unlink(missing_ok=True)  # a link left by an earlier version: the link only, never its target
    else:
        shutil.rmtree(path, ignore_errors=True)


def recover(out: Path, keep: Path | None = None) -> Path | None:
    """Mend what killed writes of ``out`` left (call under the parent's lock): when ``out`` is gone
    (a kill between the two renames), put the newest complete leftover back in its place, a new
    run before an earlier one; then remove every other leftover (``keep``: this process's own
    folder being written). Returns the folder put back."""
    left = [(kind, p) for kind, p in _leftovers(out) if p != keep]
    restored = None
    if not out.exists() and not out.is_symlink():
        ranked = sorted(((t, kind == ".writing", str(p), p) for kind, p in left if (t := _complete(p)) is not None),
                        reverse=True)
        if ranked:
            restored = ranked[0][3]
            os.rename(restored, out)
    for _, path in left:
        if path != restored:
            _remove(path)
    return restored


def _finish(tmp: Path, made: dict[str, Any]) -> None:
    """Put ``made_by.json`` in last, in one rename: from then on the folder is complete."""
    part = tmp / f".{MADE_BY}.part"
    part.write_text(json.dumps(made, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(part, tmp / MADE_BY)


def _unwritable(given: Path, exc: OSError) -> str:
    blocking = next((p for p in given.parents if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        return f"run folder {given} cannot be written: {blocking} is a file, not a folder"
    where = f" ({exc.filename})" if exc.filename and str(exc.filename) != str(given) else ""
    return f"run folder {given} cannot be written: {exc.strerror or exc}{where}"


def publish(out: Path, made: dict[str, Any], write: Callable[[Path], Any]) -> Path:
    """Run ``write(folder)`` into a temporary folder, then put it at ``out`` whole (replacing the
    earlier run of the same maker); returns ``out``. A place that cannot be written (a file on the
    way, no permission, a full disk) is one error naming the folder, never a traceback."""
    given = Path(out)
    try:
        if given.exists() and not given.is_symlink() and not given.is_dir():
            raise ConflictError(f"{given} exists and is not a folder: {NOTHING}")
        out = _target(given)
        out.parent.mkdir(parents=True, exist_ok=True)
        with _parent_locked(out.parent):
            recover(out)
            if out.exists():
                _check_replaceable(out, made)  # refused before any work is written
        tmp = out.parent / f".{out.name}.writing-{os.getpid()}"
        tmp.mkdir()
    except OSError as exc:  # before anything was written: the place given is at fault
        raise ValidationError(f"{_unwritable(given, exc)}: {NOTHING}") from None
    try:
        return _publish(given, out, tmp, made, write)
    except OSError as exc:
        raise LabError(f"{_unwritable(given, exc)}; the earlier run, if any, is as it was") from None


def _publish(given: Path, out: Path, tmp: Path, made: dict[str, Any], write: Callable[[Path], Any]) -> Path:
    try:
        write(tmp)
        _finish(tmp, made)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = out.parent / f".{out.name}.replaced-{os.getpid()}"
    try:
        with _parent_locked(out.parent):
            recover(out, keep=tmp)  # a writer killed while this one wrote
            if out.exists():
                _check_replaceable(out, made)  # another maker may have written it meanwhile
                os.rename(out, old)  # a kill from here to the next rename leaves both copies whole
                os.rename(tmp, out)
                (old / MADE_BY).unlink(missing_ok=True)  # incomplete from now on: never put back
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.rename(tmp, out)
    except BaseException:
        if old.is_dir() and not out.exists():
            os.rename(old, out)  # interrupted between the renames: the earlier run goes back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return given if given.is_symlink() else out
