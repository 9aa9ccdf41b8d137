"""What the object-store fault cases share: the group's name and secret, the one-line refusal check,
and what a killed snapshot upload must leave (a fresh reader finds everything, the next write verifies)."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Callable

from outcome import Outcome
from servers import lab

G = "objectstore"
SECRET = "sekrit-objectstore-5151"


def one_line(got: subprocess.CompletedProcess, names: str, code: int = 5) -> tuple[bool, str]:
    """(an error of one line naming ``names``, exit ``code``, no secret, no traceback; what was seen)."""
    said = (got.stdout + got.stderr).strip().splitlines()
    text = got.stdout + got.stderr
    ok = got.returncode == code and len(said) == 1 and names in said[0] and SECRET not in text and "Traceback" not in text
    return ok, f"exit {got.returncode}, {len(said)} line(s): {said[-1][:170] if said else ''}"


def upload_started(folder: Path) -> Callable[[], bool]:
    """The snapshot upload into ``folder`` (at the URI) has begun: files there, the manifest not yet
    (uploaded last), or the manifest of the upload before removed."""
    had = (folder / "manifest.json").exists()

    def fired() -> bool:
        try:
            names = os.listdir(folder)
        except OSError:
            return False
        return "manifest.json" not in names and (had or bool(names))
    return fired


def wait_for(fired: Callable[[], bool], proc: subprocess.Popen, timeout: float = 120) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if fired():
            return True
        time.sleep(0.0005)
    return fired()


def after_kill(uri: str, work: Path, label: str, texts: list[str], want: int, cache_env: dict[str, str]) -> list[Outcome]:
    """A fresh reader finds the texts and counts ``want`` memories; a writer run then shares a verified snapshot."""
    from lab.index.snapshot import IndexDamaged, verify

    stats = lab("stats", "--store", uri, "--namespace", "ing", "--json", env={"LAB_STORE_CACHE": str(work / f"{label}-r")})
    try:
        n = json.loads(stats.stdout[stats.stdout.index("{"):])["memories"]
    except ValueError:
        n = f"exit {stats.returncode}: {(stats.stdout + stats.stderr)[-160:]}"
    out = [Outcome(G, f"{label}: memories at the URI from a fresh working folder", f"{want} (none lost)", str(n), n == want)]
    missed = [t for t in texts if t not in lab("search", t, "--store", uri, "--namespace", "ing", "-k", "3",
                                                   env={"LAB_STORE_CACHE": str(work / f"{label}-r")}).stdout]
    out.append(Outcome(G, f"{label}: a fresh reader finds {len(texts)} texts", "all found", f"missed {missed}", not missed))
    (work / "next.jsonl").write_text(json.dumps({"content": f"the next write after {label}"}) + "\n")
    again = lab("ingest", str(work / "next.jsonl"), "--store", uri, "--namespace", "ing", "--quiet", env=cache_env)
    try:
        state = f"verified, {verify(Path(uri.removeprefix('file://')) / 'indexes' / 'ing', 'ing')['n_labels']} labels"
    except IndexDamaged as exc:
        state = f"DAMAGED: {exc}"
    out.append(Outcome(G, f"{label}: the next write (same working folder); the snapshot at the URI", "exit 0, verified",
                       f"exit {again.returncode}; {state}", again.returncode == 0 and state.startswith("verified")))
    return out
