"""A recording fake of an OpenAI-compatible model server, for tests: ``/v1/embeddings`` (deterministic
vectors: lab's hashing fake embedder, or any function given), ``/v1/rerank`` (Cohere-shaped) and
``/rerank`` (TEI-shaped) scoring by shared words, and ``/v1/models``.

Every request is recorded (path, headers, body, how many were in flight). Faults are scripted: each
request takes the next entry of ``faults`` (when any is left):
- ``{"status": 429, "retry_after": "0.2"}`` or ``{"status": 503}``: that status, with Retry-After if given;
- ``{"delay": 2.0}``: answer after that many seconds;
- ``{"dim": 32}``: vectors of another dimension;
- ``{"nan": True}``: a NaN in the first vector;
- ``{"cut": "json"}``: the JSON body cut in half; ``{"cut": "vectors"}``: one vector fewer than texts;
- ``{"drip": 2.0}``: the body sent a byte at a time over that many seconds.
"""
from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import numpy as np

from lab.embed.fake import FakeEmbedder

WORD = re.compile(r"\w+")


def shared_words(query: str, document: str) -> float:
    """The rerank fake's score: the share of the query's words the document holds (deterministic)."""
    q = set(WORD.findall(query.lower()))
    return len(q & set(WORD.findall(document.lower()))) / max(len(q), 1)


class ModelServer:
    def __init__(self, *, dim: int = 64, key: str | None = None, models: tuple[str, ...] = ("fake-embed",),
                 embed: Callable[[list[str]], np.ndarray] | None = None, score=shared_words) -> None:
        self.key = key
        self.models = models
        self.embed_fn = embed or FakeEmbedder(dim).embed
        self.score = score
        self.faults: list[dict[str, Any]] = []
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> "ModelServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()

    def texts_embedded(self) -> int:
        return sum(len(r["body"].get("input", [])) for r in self.requests if r["path"].endswith("/embeddings"))

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"data": [{"id": m, "object": "model"} for m in server.models]})
                else:
                    self._send(404, {"error": "no such route"})

            def do_POST(self) -> None:
                self.path = self.path.split("?", 1)[0]  # a key in the query string (some hosted APIs) is not a route
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                with server._lock:
                    server.in_flight += 1
                    server.most_in_flight = max(server.most_in_flight, server.in_flight)
                    fault = server.faults.pop(0) if server.faults else {}
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body,
                                            "at": time.monotonic(), "fault": fault})
                try:
                    self._answer(body, fault)
                finally:
                    with server._lock:
                        server.in_flight -= 1

            def _answer(self, body: dict, fault: dict) -> None:
                time.sleep(fault.get("delay", 0))
                if server.key is not None and self.headers.get("Authorization") != f"Bearer {server.key}":
                    given = self.headers.get("Authorization", "")[7:]
                    # as hosted APIs do: part of the wrong key quoted back
                    return self._send(401, {"error": {"message": f"Incorrect API key provided: {given[:6]}***{given[-4:]}"}})
                if "status" in fault:
                    extra = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
                    return self._send(fault["status"], {"error": {"message": "scripted fault"}}, extra)
                if self.path == "/v1/embeddings":
                    return self._embeddings(body, fault)
                if self.path in ("/v1/rerank", "/rerank"):
                    return self._rerank(body)
                self._send(404, {"error": "no such route"})

            def _embeddings(self, body: dict, fault: dict) -> None:
                if body.get("model") not in server.models:
                    return self._send(404, {"error": {"message": f"The model `{body.get('model')}` does not exist"}})
                texts = body["input"]
                vectors = np.asarray(server.embed_fn(texts), dtype=np.float64)
                if "dim" in fault:
                    vectors = np.resize(vectors, (len(texts), fault["dim"]))
                if fault.get("nan"):
                    vectors[0, 0] = float("nan")
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                if fault.get("cut") == "vectors":
                    data = data[:-1]
                answer = {"object": "list", "model": body["model"], "data": data,
                          "usage": {"prompt_tokens": sum(len(t.split()) for t in texts)}}
                raw = json.dumps(answer).encode()
                if fault.get("cut") == "json":
                    raw = raw[: len(raw) // 2]
                self._send_raw(200, raw, drip=fault.get("drip"))

            def _rerank(self, body: dict) -> None:
                documents = body.get("documents") if self.path == "/v1/rerank" else body.get("texts")
                scores = [server.score(body["query"], d) for d in documents]
                order = sorted(range(len(documents)), key=lambda i: (-scores[i], i))
                if self.path == "/v1/rerank":
                    top = order[: body.get("top_n") or len(order)]
                    self._send(200, {"results": [{"index": i, "relevance_score": scores[i]} for i in top]})
                else:
                    self._send(200, [{"index": i, "score": scores[i]} for i in order])

            def _send(self, status: int, payload: Any, headers: dict | None = None) -> None:
                self._send_raw(status, json.dumps(payload).encode(), headers)

            def _send_raw(self, status: int, raw: bytes, headers: dict | None = None, drip: float | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if drip:
                    for i in range(len(raw)):
                        self.wfile.write(raw[i:i + 1])
                        self.wfile.flush()
                        time.sleep(drip / len(raw))
                else:
                    self.wfile.write(raw)

        return Handler
