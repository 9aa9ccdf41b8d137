"""An S3 API on loopback for tests and the fault suite: moto's server as a process (stopped by its
PID), reached through a gate (a TCP forwarder) that can be shut and opened again on the same
port, so "the object store went away" and "it came back" are real refused and accepted
connections while moto keeps its objects in memory."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from serving import free_port

SECRET = "sekrit-moto-key-4471"  # the secret access key every client uses: never in an error or log


def aws_env(endpoint: str) -> dict[str, str]:
    """The provider's variables for an S3-compatible store at ``endpoint``."""
    return {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_ENDPOINT_URL": endpoint,
            "AWS_ALLOW_HTTP": "true", "AWS_REGION": "us-east-1"}


class Moto:
    """``moto_server`` on a free loopback port."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60) -> "Moto":
        exe = Path(sys.executable).with_name("moto_server")
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"moto_server exited with {self.proc.returncode}")
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not listen on {self.port} within {timeout} s")

    def bucket(self, name: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=self.url, aws_access_key_id="test", aws_secret_access_key=SECRET,
                     region_name="us-east-1").create_bucket(Bucket=name)

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.url, aws_access_key_id="test", aws_secret_access_key=SECRET,
                            region_name="us-east-1")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)

    def __enter__(self) -> "Moto":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Gate:
    """A loopback TCP forwarder to ``target_port``: ``shut`` stops listening and cuts every open
    connection (clients get refused connections), ``open`` listens again on the same port."""

    def __init__(self, target_port: int) -> None:
        self.target = target_port
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> "Gate":
        if self._listener is not None:
            return self
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def shut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, []
        if listener is not None:
            listener.close()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=10)
            except OSError:
                client.close()
                continue
            with self._lock:
                if self._listener is not listener:
                    client.close()
                    upstream.close()
                    return
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while block := src.recv(65536):
                dst.sendall(block)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def moto_env(gate_or_moto: Gate | Moto, **extra: str) -> dict[str, str]:
    """The environment of a `lab` process reaching the store through ``gate_or_moto``."""
    return {**os.environ, **aws_env(gate_or_moto.url), **extra}
