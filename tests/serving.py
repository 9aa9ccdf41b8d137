"""Start a real `lab serve` subprocess on a free loopback port and talk HTTP to it (tests and benchmarks)."""
from __future__ import annotations

import asyncio
import concurrent.futures as cf
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent


def write_bundle(folder: Path, *, verdict: str = "GO", model: str | None = None, preset: str = "lab",
                 config=None) -> Path:
    """A bundle as `lab gate --export` writes it (the same serialisers), for the fake embedder by
    default; ``config`` (a SearchConfig) instead of the preset."""
    from lab import bundle
    from lab.config import FAKE_MODEL, AssembleConfig, EmbedConfig, SaveConfig
    from lab.search.presets import resolve

    return bundle.write_bundle(folder, config or resolve(preset), AssembleConfig(),
                               SaveConfig(embed=EmbedConfig(model=model or FAKE_MODEL)),
                               {"verdict": verdict, "candidate": preset, "run_id": "test"})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``lab serve`` as a subprocess; ``client`` is an httpx client on its base URL."""

    def __init__(self, bundle: Path, store: Path, *args: str, env: dict[str, str] | None = None,
                 log: Path | None = None) -> None:
        self.bundle, self.store, self.args = bundle, store, list(args)
        self.env = {**os.environ, **(env or {})}
        self.log_path = log or store.parent / f"serve-{store.name}.log"
        self.proc: subprocess.Popen | None = None
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> "Server":
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "lab", "serve", "--bundle", str(self.bundle), "--store", str(self.store),
             "--port", str(self.port), "--log-level", "warning", *self.args],
            stdout=self._log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lab serve exited with {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                if httpx.get(self.url + "/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"lab serve not ready after {timeout} s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, key: str | None = None, **kw: Any) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=kw.pop("timeout", 60), **kw)

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> int:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else 0

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def acknowledged_survive_sigkill(server: Server, writers: int = 8, kill_after: int = 60) -> dict:
    """Concurrent writers; SIGKILL once ``kill_after`` writes are acknowledged; restart; check each."""
    acked: list[tuple[str, str]] = []
    lock = threading.Lock()
    enough = threading.Event()
    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "durable"})

    def writer(w: int) -> None:
        with server.client(timeout=30) as c:
            for i in range(10_000):
                if enough.is_set():
                    return
                text = f"writer {w} note {i} about durable storage {w * 100_000 + i}"
                try:
                    r = c.post("/v1/memories", json={"namespace": "durable", "content": text})
                except Exception:  # the server is gone: nothing more was acknowledged
                    return
                if r.status_code == 201:
                    with lock:
                        acked.append((r.json()["id"], text))
                        if len(acked) >= kill_after:
                            enough.set()

    with cf.ThreadPoolExecutor(writers) as pool:
        futures = [pool.submit(writer, w) for w in range(writers)]
        enough.wait(300)
        server.kill()
        for f in futures:
            f.result()
    server.start()
    lost = []
    with server.client() as c:
        for mid, text in acked:
            r = c.post("/v1/search", json={"namespace": "durable", "query": text, "k": 5})
            assert r.status_code == 200, r.text
            found = r.json()["results"]
            if c.get(f"/v1/memories/{mid}").status_code != 200 or mid not in [h["memory_id"] for h in found]:
                lost.append(mid)
        metrics = c.get("/metrics").text
    return {"acknowledged": len(acked), "lost": lost, "metrics": metrics}


class ChatUpstream:
    """A Chat Completions upstream: `model` picks its behaviour (echo, stream, fail, slow)."""

    def __init__(self) -> None:
        self.received: list[dict] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"

    def app(self):
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        async def chat(request):
            body = await request.json()
            self.received.append({"body": body, "authorization": request.headers.get("authorization"),
                                  "query": request.url.query, "headers": dict(request.headers)})
            model = body.get("model")
            if model in ("gzip-stream", "endless"):
                return special(model, body)
            if model == "fail":
                return JSONResponse({"error": {"message": "upstream quota exceeded", "type": "rate_limit"}},
                                    status_code=429)
            if model == "slow":
                await asyncio.sleep(3)
            answer = f"seen {len(body['messages'])} messages"
            if body.get("stream"):
                async def events():
                    for i, piece in enumerate(["seen ", f"{len(body['messages'])} ", "messages"]):
                        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                                 "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
                        yield f"data: {json.dumps(chunk)}\n\n"
                        await asyncio.sleep(0.01)
                    yield "data: [DONE]\n\n"
                return StreamingResponse(events(), media_type="text/event-stream")
            return JSONResponse({"id": "c1", "object": "chat.completion", "created": 1, "model": model,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": answer}}],
                                 "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        def special(model, body):
            from starlette.responses import Response

            def event(piece, finish=None):
                chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": model,
                         "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": finish}]}
                return f"data: {json.dumps(chunk)}\n\n"

            if model == "gzip-stream":  # a whole stream, gzip-encoded as some upstreams send it
                text = event("compressed ") + event("answer", "stop") + "data: [DONE]\n\n"
                return Response(gzip.compress(text.encode()), media_type="text/event-stream",
                                headers={"Content-Encoding": "gzip"})

            async def endless():  # never finishes: a client that leaves mid-answer
                for i in range(100_000):
                    yield event(f"part {i} ")
                    await asyncio.sleep(0.05)

            return StreamingResponse(endless(), media_type="text/event-stream")

        async def models(request):  # what many clients and UIs ask first
            self.received.append({"path": request.url.path, "authorization": request.headers.get("authorization"),
                                  "query": request.url.query, "headers": dict(request.headers)})
            return JSONResponse({"object": "list", "data": [{"id": "echo", "object": "model", "created": 1,
                                                             "owned_by": "upstream"}]})

        async def embeddings(request):
            body = await request.json()
            self.received.append({"path": request.url.path, "body": body,
                                  "authorization": request.headers.get("authorization")})
            return JSONResponse({"object": "list", "model": body.get("model"),
                                 "data": [{"object": "embedding", "index": 0, "embedding": [0.5, 0.25]}],
                                 "usage": {"prompt_tokens": 1, "total_tokens": 1}})

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                                 Route("/v1/models", models, methods=["GET"]),
                                 Route("/v1/embeddings", embeddings, methods=["POST"])])

    def __enter__(self) -> "ChatUpstream":
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)
