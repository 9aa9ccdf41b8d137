"""A real OpenAI-compatible embedding server for tests and benchmarks: infinity-emb, from the virtual
environment of its own that `.ci/setup` makes (it pins numpy < 2 and an older sentence-transformers),
serving the bundled all-MiniLM-L6-v2 folder offline. Started as a process, stopped by its PID."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVED_NAME = "all-MiniLM-L6-v2"


def infinity_python() -> Path | None:
    """The infinity venv's python: $LAB_INFINITY_PYTHON, else the project's .venv-infinity (None: absent)."""
    given = os.environ.get("LAB_INFINITY_PYTHON")
    path = Path(given) if given else ROOT / ".venv-infinity" / "bin" / "python"
    return path if path.is_file() else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class InfinityServer:
    """``with InfinityServer(model_dir) as srv:`` serves the folder at ``srv.base_url`` (routes at the root)."""

    def __init__(self, model_dir: Path, *, python: Path, log: Path, batch_size: int = 32) -> None:
        self.model_dir, self.python, self.log, self.batch_size = model_dir, python, log, batch_size
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 300) -> "InfinityServer":
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0",
               "DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
        cmd = [str(self.python), "-m", "infinity_emb.cli", "v2", "--model-id", str(self.model_dir),
               "--served-model-name", SERVED_NAME, "--engine", "torch", "--device", "cpu",
               "--batch-size", str(self.batch_size), "--port", str(self.port), "--host", "127.0.0.1",
               "--no-model-warmup"]
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"infinity exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"infinity not ready within {timeout} s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """SIGTERM to the server's process group by its PID, SIGKILL if it lingers."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=20)

    def __enter__(self) -> "InfinityServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
