"""A real `mlflow server` for the fault suite's tracking group: SQLite backend, --artifacts-destination,
in a folder of its own, stopped by the PIDs it started; and `lab` commands run beside it."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from servers import ENV, LAB

from serving import free_port


class Tracking:
    """A real `mlflow server` (SQLite backend, --artifacts-destination) in its own folder, stopped
    by the PIDs it started: its process group, and any process of its left in its folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.artifacts = folder / "artifacts"
        self.proc: subprocess.Popen | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, artifacts: Path | None = None) -> None:
        import httpx

        mlflow = str(Path(LAB[0]).with_name("mlflow"))
        log = open(self.folder / "server.log", "ab")
        self.proc = subprocess.Popen([mlflow, "server", "--backend-store-uri", f"sqlite:///{self.folder}/mlflow.db",
                                      "--artifacts-destination", str(artifacts or self.artifacts), "--host",
                                      "127.0.0.1", "--port", str(self.port), "--workers", "1"],
                                     cwd=self.folder, stdout=log, stderr=subprocess.STDOUT, env=ENV,
                                     start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(self.uri + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server at {self.uri} did not start (see {self.folder / 'server.log'})")

    def pids(self) -> set[int]:
        """Its process group, and processes it left in its folder (job consumers re-parented to init)."""
        found: set[int] = set()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                pgid = os.getpgid(int(entry.name))
                if (self.proc is not None and pgid == self.proc.pid) or os.readlink(entry / "cwd") == str(self.folder):
                    found.add(int(entry.name))
            except OSError:
                continue
        return found

    def signal(self, sig: int) -> None:
        for pid in sorted(self.pids(), reverse=True):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def stop(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        time.sleep(0.5)

    def files(self) -> set[str]:
        return {p.relative_to(self.artifacts).as_posix() for p in self.artifacts.rglob("*") if p.is_file()} \
            if self.artifacts.exists() else set()


def command(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([*LAB, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen, timeout: float) -> tuple[Any, str, str]:
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        return proc.returncode, stdout, stderr
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        return f"hung>{timeout:.0f}s", stdout, stderr
