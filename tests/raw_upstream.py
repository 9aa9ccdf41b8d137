"""An upstream on loopback that records each request exactly as it arrived (the request line as
sent, not as a framework would decode or normalise it), for the proxy's passthrough tests and
fault group, and a client that sends a request line as given (httpx would normalise ``/a/../b``)."""
from __future__ import annotations

import json
import socket
import threading
from typing import Any


class RawUpstream:
    """HTTP/1.1 on a raw socket: every request is recorded (``line``, ``method``, ``target``,
    ``headers`` with lower-case names, ``body``) and answered 200 with a small JSON body naming the
    request line."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def since(self, n: int) -> list[dict[str, Any]]:
        return self.received[n:]

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        stream = conn.makefile("rb")
        try:
            while True:
                line = stream.readline()
                if not line:
                    return
                headers: dict[str, str] = {}
                while (h := stream.readline()) not in (b"\r\n", b"\n", b""):
                    k, _, v = h.decode("latin-1").partition(":")
                    headers[k.strip().lower()] = v.strip()
                body = stream.read(int(headers["content-length"])) if "content-length" in headers else b""
                text = line.decode("latin-1").rstrip("\r\n")
                method, target = (text.split(" ") + ["", ""])[:2]
                self.received.append({"line": text, "method": method, "target": target, "headers": headers,
                                      "body": body.decode("utf-8", "replace")})
                answer = json.dumps({"object": "list", "data": [], "line": text}).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n\r\n" % len(answer) + answer)
        except OSError:
            return
        finally:
            conn.close()

    def __enter__(self) -> "RawUpstream":
        threading.Thread(target=self._serve, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()


def raw_request(port: int, method: str, target: str, headers: dict[str, str] | None = None,
                body: bytes = b"") -> tuple[int, dict[str, str], str]:
    """(status, headers, body text) of one request whose request line is sent as given."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    if body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(body)}")
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    first, *rest = head.decode("latin-1").split("\r\n")
    found = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
    if found.get("transfer-encoding") == "chunked":
        out = b""
        while payload:
            size_line, _, payload = payload.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, payload = out + payload[:size], payload[size + 2:]
        payload = out
    return int(first.split()[1]), found, payload.decode("utf-8", "replace")
