"""The hostile HTTP server the adapter_v2 fault group points adapter files at: it answers by mode
(dripped, huge, gzip, NaN, redirect, deep) and hands out captured values meant to steer requests."""
from __future__ import annotations

import gzip
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


# answers of a search (the ids it would rank) that a hostile server gives by mode
FIXED: dict[str, Callable[[list[str]], bytes]] = {
    "declared": lambda top: b'{"pad": "' + b"y" * (2 << 20) + b'"}',  # 2 MB, its length declared
    "deep": lambda top: b'{"ids": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "nan": lambda top: ('{"ids": [%s], "distances": [[NaN%s]]}' % (json.dumps(top), ", 0.5" * (len(top) - 1))).encode(),
    "-inf": lambda top: ('{"ids": [%s], "distances": [[-Infinity%s]]}'
                         % (json.dumps(top), ", 0.5" * (len(top) - 1))).encode(),
    "inf-hits": lambda top: ('{"results": [%s]}' % ", ".join('{"id": %s, "score": Infinity}' % json.dumps(i)
                                                             for i in top)).encode(),
}


class Hostile(BaseHTTPRequestHandler):
    """A Chroma-shaped server whose ``server.capture`` makes the collection id a create call answers
    and whose ``server.mode`` shapes the query answer; it records every request."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, code: int = 200, headers: tuple[tuple[str, str], ...] = (), length: bool = True,
              drip: float = 0.0) -> None:
        self.send_response(code)
        for k, v in (("content-type", "application/json"), *((("content-length", str(len(body))),) if length else
                                                             (("transfer-encoding", "chunked"),)), *headers):
            self.send_header(k, v)
        self.end_headers()
        try:
            if drip:  # a byte at a time: no single read ever times out
                for b in body:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                    time.sleep(drip)
            elif not length:  # 4 MB in 64 KB chunks, no length up front
                for _ in range(64):
                    self.wfile.write(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            else:
                self.wfile.write(body)
        except OSError:  # the client hung up: what a bound does
            self.close_connection = True

    def do_POST(self) -> None:
        import numpy as np

        srv: Any = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        srv.seen.append((self.path, dict(self.headers)))
        head, _, call = self.path.rpartition("/")
        if self.path == "/collections":
            return self._send(json.dumps({"id": srv.capture(body["name"])}).encode())
        if call == "add":
            vectors = body.get("embeddings") or [[1.0]] * len(body["ids"])
            srv.store.setdefault(head, {}).update(zip(body["ids"], vectors))
            return self._send(b"{}")
        kept = srv.store.get(head, {})
        ids = sorted(kept)
        score = np.array([kept[i] for i in ids]) @ np.array(body["q"]) if len(body["q"]) > 1 else np.zeros(len(ids))
        order = sorted(range(len(ids)), key=lambda n: (-score[n], ids[n]))[:body["k"]]
        top = [ids[n] for n in order]
        plain = json.dumps({"ids": [top], "distances": [[float(1 - score[n]) for n in order]]}).encode()
        mode = srv.mode
        if mode in FIXED:
            return self._send(FIXED[mode](top))
        if mode == "gzip":  # 40 KB on the wire, 40 MB once decoded
            return self._send(gzip.compress(b'{"pad": "' + b" " * (40 << 20) + b'"}'),
                              headers=(("content-encoding", "gzip"),))
        if mode == "redirect":
            return self._send(b"{}", 307, (("location", srv.other + "/steal"),))
        self._send(plain, length=mode != "huge", drip=0.25 if mode == "drip" else 0.0)


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up on a dripped or huge answer is the case, not a server fault


def serve() -> Any:
    """The server, answering on a free loopback port in a thread of this process."""
    srv: Any = _Quiet(("127.0.0.1", 0), Hostile)
    srv.capture, srv.mode, srv.seen, srv.store, srv.other = (lambda name: "c-" + name), "normal", [], {}, ""
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
    return srv
