"""What the fault groups share: the two bundles (the fake embedder, and MiniLM for the real query
encoder), servers started on them, the query-embedding worker of a server, `lab` run as a
command, and `lab store check` read whole (errors and warnings)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from outcome import Outcome

from serving import ROOT, Server, write_bundle

LAB = [sys.executable, "-m", "lab"]
# nothing may download weights; a Rust backtrace in a log would read as a crash
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
ENV.pop("RUST_BACKTRACE", None)
REAL_QUERY_MODEL = "all-MiniLM-L6-v2-int8"  # what --query-model auto picks for a MiniLM store


@dataclass
class Bundles:
    """The fake-embedder bundle (fast servers) and the MiniLM one (a MiniLM store whose queries
    the int8 ONNX MiniLM encodes in the server's worker process: `--query-model auto`)."""
    fake: Path
    real: Path
    real_model: str

    @classmethod
    def write(cls, tmp: Path, real_model: str) -> "Bundles":
        return cls(write_bundle(tmp / "bundle"), write_bundle(tmp / "bundle-minilm", model=real_model), real_model)


class FaultServer(Server):
    """A `lab serve` process that is stopped when it fails to become ready (none is left running)."""

    def start(self, timeout: float = 240) -> "FaultServer":
        try:
            super().start(timeout)
        except BaseException:
            self.stop()
            raise
        return self


def server(bundle: Path, store: Path, *args: str, env: dict[str, str] | None = None) -> FaultServer:
    return FaultServer(bundle, store, *args, env={**ENV, **(env or {})})


def real_server(bundles: Bundles, store: Path, *args: str, env: dict[str, str] | None = None) -> FaultServer:
    """A server on a MiniLM store with the real query encoder (`--query-model auto`)."""
    return server(bundles.real, store, "--query-model", "auto", *args, env=env)


def children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of each child process of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            if ppid == pid:
                found.append((int(entry.name), (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()))
        except (OSError, ValueError, IndexError):
            continue
    return sorted(found)


def worker_pids(srv: Server) -> list[tuple[int, str]]:
    """The server's query-embedding processes (`python -m lab.embed.worker MODEL ...`)."""
    assert srv.proc is not None
    return [(pid, cmd) for pid, cmd in children(srv.proc.pid) if "lab.embed.worker" in cmd]


def real_encoder_case(group: str, srv: Server, key: str | None = None) -> Outcome:
    """The server encodes queries with the int8 ONNX MiniLM, in a worker process of its own."""
    import httpx

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    ready = httpx.get(srv.url + "/ready", headers=headers, timeout=30).json()
    embedding = (ready.get("served") or {}).get("embedding", {})
    workers = worker_pids(srv)
    ok = embedding.get("query") == REAL_QUERY_MODEL and any(REAL_QUERY_MODEL in cmd for _, cmd in workers)
    return Outcome(group, "server runs the real query encoder", f"queries by {REAL_QUERY_MODEL} in a worker",
                   f"store {embedding.get('store')}, queries {embedding.get('query')}, "
                   f"workers {[cmd.split('lab.embed.worker')[-1].strip() for _, cmd in workers]}", ok)


def lab(*args: Any, timeout: float = 600, env: dict[str, str] | None = None, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *map(str, args)], capture_output=True, text=True, cwd=ROOT,
                          env={**ENV, **(env or {})}, timeout=timeout, **kw)


@dataclass
class Check:
    """`lab store check --json`, read whole: exit code, errors and warnings."""
    code: int
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    crash: str = ""

    def unexpected(self, allowed: tuple[str, ...] = ()) -> list[str]:
        """Every error, and each warning that contains none of ``allowed``."""
        return self.errors + [w for w in self.warnings if not any(a in w for a in allowed)]

    def said(self) -> str:
        if self.crash:
            return f"check exit {self.code}: {self.crash}"
        items = [f"error {e}" for e in self.errors] + [f"warning {w}" for w in self.warnings]
        return f"check exit {self.code}, {len(self.errors)} error(s), {len(self.warnings)} warning(s)" + \
            (": " + "; ".join(i[:140] for i in items[:3]) if items else "")


def store_check(store: Path) -> Check:
    """What `lab store check --json` reports (its function, run here: a process start per check
    would cost more than the check)."""
    from lab.write.check import check_store

    try:
        report = check_store(store).to_dict()
    except Exception as exc:  # the check itself failed: a crash, not a report
        return Check(-1, crash=f"CRASH {type(exc).__name__}: {str(exc)[:160]}")
    problems = report.get("problems", [])
    errors = [f"{p['where']}: {p['what']}" for p in problems if p["severity"] == "error"]
    warnings = [f"{p['where']}: {p['what']}" for p in problems if p["severity"] != "error"]
    return Check(5 if errors else 0, errors, warnings)


def check_case(group: str, case: str, store: Path, allowed: tuple[str, ...] = (), why: str = "") -> Outcome:
    """A store check with no error and no warning but the ``allowed`` ones (``why`` says why they are)."""
    got = store_check(store)
    bad = got.unexpected(allowed)
    expected = "no error, no warning" + (f" but {', '.join(repr(a) for a in allowed)} ({why})" if allowed else "")
    return Outcome(group, case, expected, got.said(), got.code == 0 and not bad and not got.crash)


def wait_until(predicate, timeout: float, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()


def raw_http(url: str, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"",
             host: str | None = None) -> Any:
    """One request written to a socket as given: the path is not normalised (httpx turns
    ``/a/../b`` into ``/b`` before sending), the Host header is whatever ``host`` says. Returns an
    object with status_code, headers, text and json() like an httpx response."""
    import socket
    from types import SimpleNamespace
    from urllib.parse import urlsplit

    where = urlsplit(url)
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host if host is not None else where.netloc}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection((where.hostname, where.port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    head_lines = head.decode("latin-1").split("\r\n")
    code = int(head_lines[0].split()[1]) if head_lines and len(head_lines[0].split()) > 1 else 599
    resp_headers = {}
    for line in head_lines[1:]:
        k, _, v = line.partition(":")
        resp_headers[k.strip().lower()] = v.strip()
    if resp_headers.get("transfer-encoding") == "chunked":
        out, rest = b"", payload
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        payload = out
    text = payload.decode("utf-8", "replace")
    return SimpleNamespace(status_code=code, headers=resp_headers, text=text, json=lambda: json.loads(text))
