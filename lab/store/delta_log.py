"""Damage to a Delta table's log: commit files that are torn (cut off while written, or damaged since).

A torn newest commit is moved aside by repair and the table reads at the version before it: a
commit cut off while written was never acknowledged (a commit is acknowledged once its log file is
whole), but one damaged on disk afterwards may have been, and nothing left can tell the two apart. A torn commit with later
commits after it is different: they were acknowledged and build on it (their removes name files
its adds brought), so it can neither be dropped nor rebuilt from what is left; the store is
readable only at the versions before it, and the way back is a backup.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TORN_FOLDER = "_torn_commits"  # beside _delta_log: where repair keeps a torn commit file
COMMIT_GLOB = "[0-9]" * 20 + ".json"


@dataclass(frozen=True)
class LogDamage:
    """The oldest torn commit file that reading a table's latest version needs."""

    table: str
    file: str
    version: int
    newest: int  # the table's newest version (its newest commit file)

    @property
    def repairable(self) -> bool:
        """Only a torn newest commit can be taken out: no later commit builds on it."""
        return self.version == self.newest

    def describe(self, opener: str | None = None) -> str:
        """One line: what is wrong, and what the user can do about it; ``opener`` is how to open the
        store at the versions that still read, when there is one (a pinned ``open_retriever``)."""
        if self.repairable:
            return (f"the newest Delta log file {self.file} is torn (a commit cut off while it was written; "
                    "no client was told it landed); `lab store repair` takes it out and recovers the version before it")
        later = self.newest - self.version
        readable = (f"versions 0 to {self.version - 1} of this table still read" if self.version
                    else "no version of this table reads")
        if opener and self.version:
            readable += f": {opener} opens the store at them, read-only"
        return (f"Delta log file {self.file} (version {self.version}) is torn or damaged and the {later} later "
                f"commit(s) build on it, so the table cannot be read and `lab store repair` cannot take it out "
                f"without losing them: restore that file, or the whole store, from a backup ({readable})")


def commit_files(path: Path) -> list[Path]:
    """The commit files of the Delta table at ``path``, oldest first."""
    log = path / "_delta_log"
    return sorted(log.glob(COMMIT_GLOB)) if log.is_dir() else []


def is_torn(commit: Path) -> bool:
    """Empty, not UTF-8, or a line that is not whole JSON (a process killed or a disk filled while
    the file was written, or the file damaged since)."""
    try:
        # split on newlines only: a JSON line may hold U+2028 and other characters splitlines() breaks on
        lines = [line for line in commit.read_text(encoding="utf-8").split("\n") if line.strip()]
        return not lines or not all(isinstance(json.loads(line), dict) for line in lines)
    except (UnicodeDecodeError, ValueError):
        return True


def torn_commit(path: Path) -> Path | None:
    """The newest commit file of the Delta table at ``path`` when it is torn (one file read: every
    open checks it)."""
    commits = commit_files(path)
    return commits[-1] if commits and is_torn(commits[-1]) else None


def _last_checkpoint(path: Path) -> int:
    """The version of the table's last checkpoint, or -1 (readers start from it: older commit files
    are not read for the latest version)."""
    try:
        return int(json.loads((path / "_delta_log" / "_last_checkpoint").read_text(encoding="utf-8"))["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1


def log_damage(path: Path) -> LogDamage | None:
    """The oldest torn commit file that reading the latest version of the table at ``path`` needs
    (those after its last checkpoint), or None. Reads every such file: for checking and repair,
    and to name the file when the table cannot be opened."""
    commits = commit_files(path)
    if not commits:
        return None
    after = _last_checkpoint(path)
    for commit in commits:
        version = int(commit.name.split(".")[0])
        if version > after and is_torn(commit):
            return LogDamage(path.name, commit.name, version, int(commits[-1].name.split(".")[0]))
    return None


def recover_torn_commit(path: Path) -> str | None:
    """Move a torn newest commit file of the table at ``path`` aside (to ``_torn_commits/``), so the
    table reads at the version before it; returns the file's name, or None when none is torn.
    Only the torn commit's changes are lost; if the file was damaged after it was whole, its writer
    may have been acknowledged (this cannot tell a write cut off from later disk damage)."""
    torn = torn_commit(path)
    if torn is None:
        return None
    aside = path / TORN_FOLDER
    aside.mkdir(exist_ok=True)
    torn.replace(aside / torn.name)
    return torn.name
