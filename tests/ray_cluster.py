"""A real two-node Ray cluster on loopback for tests and the fault suite: a head and a second
node of one CPU each, `ray start --block` processes in sessions of their own, stopped by those
sessions' ids (never `ray stop`, which ends every Ray process on the machine)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    address: str
    env: dict[str, str]  # what the nodes run with (auth mode and token included)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def pids(self, marker: str = "") -> list[tuple[int, str]]:
        """Processes of the cluster's sessions (pid, command line) whose command contains ``marker``."""
        sessions = {str(p.pid) for p in self.procs}
        out = subprocess.run(["ps", "-eo", "pid=,sid=,args="], capture_output=True, text=True).stdout
        found = []
        for line in out.splitlines():
            pid, sid, args = (line.split(None, 2) + ["", ""])[:3]
            if sid in sessions and marker in args:
                found.append((int(pid), args))
        return found

    def kill_node(self, index: int) -> None:
        """SIGKILL every process of one node's session (index 0: the head)."""
        sid = str(self.procs[index].pid)
        _kill_session(sid)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _kill_session(str(proc.pid))
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass


def _kill_session(sid: str) -> None:
    out = subprocess.run(["ps", "-eo", "pid=,sid="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, s = line.split()
        if s == sid:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass


def _alive_nodes(address: str, env: dict[str, str], want: int, timeout: float) -> str:
    """How many nodes the cluster reports alive (waiting up to ``timeout`` for ``want``), or what the
    last check said instead. A check whose driver could not connect yet (a head still starting under
    a loaded machine) is tried again until the deadline, not taken as the answer."""
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 1.0)
        check = ("import ray, time; ray.init(address=%r, logging_level='ERROR');"
                 "t = time.time()\nwhile len([n for n in ray.nodes() if n['Alive']]) < %d and time.time() - t < %d: time.sleep(0.5)\n"
                 "print(len([n for n in ray.nodes() if n['Alive']]))" % (address, want, left))
        proc = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=left + 120, env=env)
        said = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
        if said.isdigit() and (int(said) >= want or time.monotonic() > deadline):
            return said
        if time.monotonic() > deadline:
            # Ray's log lines come first on stderr: the error is at its end
            return said or f"exit {proc.returncode}: {proc.stderr[-1500:]}"
        time.sleep(1.0)


@contextmanager
def two_node_cluster(token: str | None = None, *, cpus: int = 1, timeout: float = 120) -> Iterator[Cluster]:
    """Head and second node on 127.0.0.1, one CPU each; with ``token``, Ray's token authentication
    is on for both (RAY_AUTH_MODE=token and RAY_AUTH_TOKEN on each `ray start`, as docs/scale.md says)."""
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": "", "LAB_ENGINE": ""}
    env.pop("RAY_AUTH_TOKEN", None)
    env.pop("RAY_AUTH_TOKEN_PATH", None)
    env["RAY_AUTH_MODE"] = "token" if token else "disabled"
    if token:
        env["RAY_AUTH_TOKEN"] = token
    common = ["--num-cpus", str(cpus), "--block", "--disable-usage-stats", "--node-ip-address", "127.0.0.1",
              "--object-store-memory", str(100 * 1024**2)]
    cluster = Cluster(f"127.0.0.1:{port}", env)
    try:
        cluster.procs.append(subprocess.Popen(
            [RAY, "start", "--head", "--port", str(port), "--include-dashboard", "false",
             "--ray-client-server-port", str(free_port()), *common], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout
        while True:  # the head answers on its port before the second node may join
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or cluster.procs[0].poll() is not None:
                    raise RuntimeError("the Ray head did not start") from None
                time.sleep(0.5)
        cluster.procs.append(subprocess.Popen(
            [RAY, "start", "--address", cluster.address, *common], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        alive = _alive_nodes(cluster.address, env, 2, timeout)
        if alive != "2":
            raise RuntimeError(f"the second Ray node did not join: {alive}")
        yield cluster
    finally:
        cluster.stop()


@contextmanager
def not_ray() -> Iterator[dict[str, str]]:
    """Addresses where something other than Ray answers, on loopback: an HTTP server, a TCP listener
    that never says a word, one that closes every connection at once, a gRPC server without Ray's
    services, and a port nobody listens on. Yields {label: host:port}."""
    import http.server
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    stop = threading.Event()
    sockets: list[socket.socket] = []

    def listener(kind: str) -> int:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        s.settimeout(0.2)
        sockets.append(s)
        held: list[socket.socket] = []

        def loop() -> None:
            while not stop.is_set():
                try:
                    conn, _ = s.accept()
                except OSError:
                    continue
                if kind == "close":
                    conn.close()
                else:
                    held.append(conn)  # accepted, never answered
            for conn in held:
                conn.close()

        threading.Thread(target=loop, daemon=True).start()
        return s.getsockname()[1]

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # the suite's output is its table
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    rpc = grpc.server(ThreadPoolExecutor(max_workers=1))
    rpc_port = rpc.add_insecure_port("127.0.0.1:0")
    rpc.start()
    try:
        yield {"an HTTP server": f"127.0.0.1:{web.server_address[1]}",
               "a silent TCP listener": f"127.0.0.1:{listener('silent')}",
               "a listener that closes at once": f"127.0.0.1:{listener('close')}",
               "a gRPC server that is not Ray": f"127.0.0.1:{rpc_port}",
               "a closed port": f"127.0.0.1:{free_port()}"}
    finally:
        stop.set()
        web.shutdown()
        web.server_close()
        rpc.stop(None)
        for s in sockets:
            s.close()
