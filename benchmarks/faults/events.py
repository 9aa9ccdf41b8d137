"""Kills placed by what a process was seen to do: a commit file landing in one of the store's
Delta logs, an index folder appearing, or a line the process printed. Each kill says where it
landed (the event, the commits landed per table, the time) and whether the process was still
running when the signal went (a process that had finished is not a kill, and its case fails)."""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

TABLES = ("namespaces", "chunks", "memories", "edges", "access_log")


class CommitWatch:
    """Counts the commit files of each table of the store at ``root`` (``NNN.json`` in
    ``tables/<table>/_delta_log``), relative to when the watch began."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.base = self.counts(absolute=True)

    def counts(self, absolute: bool = False) -> dict[str, int]:
        out = {}
        for table in TABLES:
            log = self.root / "tables" / table / "_delta_log"
            try:
                n = sum(1 for name in os.listdir(log) if name.endswith(".json") and name[:-5].isdigit())
            except OSError:
                n = 0
            out[table] = n if absolute else n - self.base.get(table, 0)
        return out

    def landed(self) -> str:
        got = {t: n for t, n in self.counts().items() if n}
        return ", ".join(f"{t} +{n}" for t, n in got.items()) or "no commit"


@dataclass
class Kill:
    """Where one SIGKILL landed."""
    event: str  # what the kill waited for
    seen: bool  # the event was observed (else the wait timed out or the process ended first)
    alive: bool  # the process was running when the signal went (its exit status is SIGKILL's)
    at_ms: float  # after the process started (or the watch began)
    landed_at_event: str  # commits landed when the event was seen
    landed_after: str  # commits landed once the process was gone
    exit_code: int | None

    def describe(self) -> str:
        where = f"at {self.event}" if self.seen else f"event {self.event} NOT seen"
        return (f"killed {where} ({self.at_ms:.0f} ms; commits then: {self.landed_at_event}; after: "
                f"{self.landed_after}; {'running at the kill' if self.alive else f'ALREADY EXITED ({self.exit_code})'})")


def sigkill(proc: subprocess.Popen) -> bool:
    """SIGKILL ``proc`` and reap it; True when the signal is what ended it (it was still running)."""
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(30)
    return proc.returncode == -signal.SIGKILL


def kill_when(proc: subprocess.Popen, watch: CommitWatch, event: str, fired: Callable[[], bool],
              timeout: float = 120, poll_s: float = 0.0005) -> Kill:
    """Poll ``fired`` until it holds (or ``proc`` ends, or ``timeout``), then SIGKILL ``proc``."""
    started = time.monotonic()
    seen = False
    while time.monotonic() - started < timeout:
        if fired():
            seen = True
            break
        if proc.poll() is not None:
            break
        time.sleep(poll_s)
    at_event = watch.landed()
    at_ms = (time.monotonic() - started) * 1000
    alive = sigkill(proc)
    return Kill(event, seen, alive, at_ms, at_event, watch.landed(), proc.returncode)


def commit_event(watch: CommitWatch, table: str, n: int) -> Callable[[], bool]:
    """The ``n``-th new commit of ``table`` has landed."""
    return lambda: watch.counts()[table] >= n


def folder_event(parent: Path, prefix: str = "") -> Callable[[], bool]:
    """A new entry of ``parent`` whose name starts with ``prefix`` (an index save has begun)."""
    before = set(os.listdir(parent)) if parent.is_dir() else set()

    def fired() -> bool:
        try:
            return any(n.startswith(prefix) for n in set(os.listdir(parent)) - before)
        except OSError:
            return False
    return fired


class Lines:
    """The lines a process writes to a pipe, read in a thread; ``event(text)`` fires once a line
    containing ``text`` has been read."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def event(self, text: str) -> Callable[[], bool]:
        return lambda: any(text in line for line in list(self.lines))
