"""A Chat Completions upstream in this process (uvicorn in a thread, loopback): it records every
request (method, path, query, headers, body) and behaves as the request's ``model`` says: echo,
stream (three parts and [DONE]), endless, gzip (a gzip-encoded stream), slow (answers after 10 s),
short (a body shorter than its Content-Length), fail500. An adapter file's calls (a body with
``memories``, a path ending in /search) get the answers an HTTP adapter expects."""
from __future__ import annotations

import asyncio
import gzip
import json
import threading
import time
from typing import Any

from serving import free_port


def chunk(text: str) -> str:
    return "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                  "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}) + "\n\n"


class Upstream:
    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.open_streams = 0
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"

    def app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse, Response, StreamingResponse
        from starlette.routing import Route

        async def anything(request: Any) -> Any:
            raw = await request.body()
            try:
                body = json.loads(raw)
            except ValueError:
                body = {"_raw": raw[:200].decode("latin-1")}
            self.received.append({"method": request.method, "path": request.url.path, "query": request.url.query,
                                  "headers": dict(request.headers), "body": body})
            if isinstance(body, dict) and isinstance(body.get("memories"), list):  # an adapter's save
                return JSONResponse({"memories": [{"id": m.get("id", str(i)) if isinstance(m, dict) else str(i)}
                                                  for i, m in enumerate(body["memories"])]})
            if request.url.path.endswith("/search"):  # an adapter's search
                return JSONResponse({"results": []})
            model = body.get("model") if isinstance(body, dict) else None
            if model == "fail500":
                return JSONResponse({"error": {"message": "upstream exploded"}}, status_code=500)
            if model == "slow":
                await asyncio.sleep(10)
                return JSONResponse({"late": True})
            if model == "short":
                return Response(b'{"choices": [', media_type="application/json", headers={"content-length": "400"})
            if model == "gzip":
                data = gzip.compress("".join([chunk("zipped "), chunk("answer"), "data: [DONE]\n\n"]).encode())
                return Response(data, media_type="text/event-stream", headers={"Content-Encoding": "gzip"})
            if model in ("stream", "endless"):
                marker = body["messages"][-1]["content"][-12:] if body.get("messages") else ""

                async def events() -> Any:
                    self.open_streams += 1
                    try:
                        yield chunk(f"first {marker} ")
                        n = 0
                        while model == "endless" or n < 3:
                            await asyncio.sleep(0.1)
                            n += 1
                            yield chunk(f"part{n} ")
                        yield "data: [DONE]\n\n"
                    finally:
                        self.open_streams -= 1
                return StreamingResponse(events(), media_type="text/event-stream")
            messages = body.get("messages", []) if isinstance(body, dict) else []
            return JSONResponse({"id": "c", "object": "chat.completion", "created": 1, "model": model,
                                 "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                     "role": "assistant", "content": f"echo of {len(messages)} messages"}}]})

        return Starlette(routes=[Route("/{p:path}", anything, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])])

    def since(self, n: int) -> list[dict[str, Any]]:
        return self.received[n:]

    def __enter__(self) -> "Upstream":
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(self.app(), host="127.0.0.1", port=self.port, log_level="critical"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
