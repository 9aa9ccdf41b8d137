"""An embedding model in a child process, so its Python work does not contend for the GIL.

A server's searches are Python-heavy and hold the GIL most of the time they run; a model in the
same process waits for the GIL at each of the hundred-odd operator calls of a forward pass (the
cost is in benchmarks/results/serve_load.json's notes). In a child process the
model has an interpreter of its own; the parent only writes texts to a pipe and reads vectors
back, and waits with the GIL released.

The protocol, over the child's stdin and stdout (the child's own prints go to stderr):
- the child, once its model is loaded: ``R`` and the dimension (4 bytes);
- the parent: a JSON object ``{"queries": bool, "texts": [...]}``, as 4 length bytes and UTF-8
  (``queries``: encode the texts as search queries, else as passages);
- the child: ``V``, the row count (4 bytes) and the float32 rows; or ``E`` and a UTF-8 message.
The child ends when its stdin closes (the parent closed it, or died).

    python -m lab.embed.worker MODEL THREADS BATCH_SIZE
"""
from __future__ import annotations

import json
import os
import select
import struct
import subprocess
import sys
import threading
import time
from typing import IO, Sequence

import numpy as np

from lab.config import EmbedConfig
from lab.embed import make_embedder
from lab.embed.base import set_model_threads
from lab.errors import LabError

_LENGTH = struct.Struct("<I")


class EmbedderProcessError(LabError):
    """The embedding process died or could not start (a server answers 503: a retry gets a new one)."""
    http_status = 503


class EmbedderModelError(LabError):
    """The process is alive but its model failed on the texts, or gives vectors of another size
    (a retry would fail the same way)."""


class ProcessEmbedder:
    """Embeds with ``model`` in a child process; one call at a time (calls queue on a lock).

    The process starts on the first call or on ``start()``. Should it die, the call in flight
    fails with a clear error; the next call (or one after it died idle) starts a new one.
    """

    START_TIMEOUT_S = 300.0  # loading the model: seconds on a warm disk, far more on a cold one

    def __init__(self, model: str, dim: int, *, threads: int = 1, batch_size: int = 8,
                 timeout_s: float = 30.0, space: str | None = None, symmetric: bool = True) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.model_id = model
        self.space = space or model
        self.symmetric = symmetric
        self.timeout_s = timeout_s  # a call not answered by then: the process is taken as hung
        self.dim = dim
        self.threads = threads
        # the model pads each batch to its longest text, and sorts a call's texts by length
        # first: small batches of similar lengths pad least
        self.batch_size = batch_size
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        with self._lock:
            self._ensure()

    def _ensure(self) -> subprocess.Popen:
        if self._closed:
            raise EmbedderProcessError(f"the embedding process ({self.model_id}) is closed")
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        # a session of its own: a Ctrl-C or a SIGTERM sent to the server's process group must not
        # end the model while the server drains its queue; the child still ends with its stdin
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "lab.embed.worker", self.model_id, str(self.threads), str(self.batch_size)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, start_new_session=True)
        # the first message says the model is loaded; a child that dies first gives EOF
        deadline = time.monotonic() + self.START_TIMEOUT_S
        if self._read(1, deadline, "starting") != b"R":
            raise self._died("starting")
        dim = _LENGTH.unpack(self._read(4, deadline, "starting"))[0]
        if dim != self.dim:
            self._stop()
            raise EmbedderModelError(f"the embedding process's model {self.model_id!r} gives {dim}-dimensional "
                                       f"vectors, {self.dim} expected")
        return self._proc

    def _read(self, n: int, deadline: float, doing: str = "embedding") -> bytes:
        """``n`` bytes from the child, by ``deadline`` (time.monotonic): a child that does not
        answer in time is taken as hung, and ended like one that died.

        Reads go to the raw descriptor (the buffered reader is never used, so select() sees
        every byte that has not been read yet)."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        parts: list[bytes] = []
        left = n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise self._died(doing, hung=True)
            data = os.read(fd, left)
            if not data:
                raise self._died(doing)
            parts.append(data)
            left -= len(data)
        return b"".join(parts)

    def _died(self, doing: str, hung: bool = False) -> EmbedderProcessError:
        """The child stopped speaking the protocol: it is ended (killed should it still run, so
        a garbled stream is never read again) and the next call starts a new one."""
        if hung:
            self._stop(kill=True, at_once=True)
            limit = self.START_TIMEOUT_S if doing == "starting" else self.timeout_s
            return EmbedderProcessError(f"the embedding process ({self.model_id}) did not answer within {limit:g} s "
                                        f"while {doing}; it was killed and the next call starts a new one")
        code = self._stop(kill=True)
        return EmbedderProcessError(f"the embedding process ({self.model_id}) exited with code {code} while {doing}; "
                                    "the next call starts a new one (its error is in the server log)")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors."""
        return self._call(texts, queries=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._call(texts, queries=True)

    def _call(self, texts: Sequence[str], *, queries: bool) -> np.ndarray:
        if len(texts) == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        payload = json.dumps({"queries": queries, "texts": list(texts)}).encode("utf-8")
        with self._lock:
            proc = self._ensure()
            assert proc.stdin is not None
            try:
                proc.stdin.write(_LENGTH.pack(len(payload)) + payload)
                proc.stdin.flush()
            except (BrokenPipeError, OSError):
                raise self._died("receiving texts") from None
            deadline = time.monotonic() + self.timeout_s
            kind = self._read(1, deadline)
            if kind not in (b"V", b"E"):
                raise self._died("answering (it sent something other than vectors or an error)")
            size = _LENGTH.unpack(self._read(4, deadline))[0]
            if kind == b"E":
                message = self._read(size, deadline).decode("utf-8", "replace")
                raise EmbedderModelError(f"the embedding model failed: {message}")
            rows = np.frombuffer(self._read(size * self.dim * 4, deadline), dtype=np.float32).reshape(size, self.dim)
            return rows.copy()

    def close(self) -> None:
        """End the child (after the call in flight, if any): close its stdin and wait for it,
        killed should it not end. Later calls fail."""
        with self._lock:
            self._closed = True
            self._stop()

    def _stop(self, kill: bool = False, at_once: bool = False) -> int | None:
        """End the child if there is one (``kill``: soon, should it still run; ``at_once``: without
        waiting for it to exit by itself); its exit code."""
        proc, self._proc = self._proc, None
        if proc is None:
            return None
        if at_once:
            proc.kill()
        elif kill:
            try:  # a child that closed its output is usually exiting: its own exit code is the story
                proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                proc.kill()
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        return code


def _serve(model: str, threads: int, batch_size: int, inp: IO[bytes], out: IO[bytes]) -> int:
    embedder = make_embedder(EmbedConfig(model=model, batch_size=batch_size, cache=False))
    set_model_threads(embedder, threads)
    embedder.embed(["warm up"])  # load the model before saying so
    out.write(b"R" + _LENGTH.pack(embedder.dim))
    out.flush()
    while True:
        head = inp.read(4)
        if len(head) < 4:
            return 0  # the parent closed the pipe (or died)
        call = json.loads(inp.read(_LENGTH.unpack(head)[0]).decode("utf-8"))
        texts = call["texts"]
        try:
            vectors = embedder.embed_queries(texts) if call["queries"] else embedder.embed(texts)
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        except Exception as exc:  # the parent reports it; the process keeps serving
            message = f"{type(exc).__name__}: {exc}".encode("utf-8")
            out.write(b"E" + _LENGTH.pack(len(message)) + message)
        else:
            out.write(b"V" + _LENGTH.pack(len(vectors)) + vectors.tobytes())
        out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        print("usage: python -m lab.embed.worker MODEL THREADS BATCH_SIZE", file=sys.stderr)
        return 2
    # the protocol owns the real stdout; anything printed (library warnings) goes to stderr
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    return _serve(args[0], int(args[1]), int(args[2]), sys.stdin.buffer, out)


if __name__ == "__main__":
    sys.exit(main())
