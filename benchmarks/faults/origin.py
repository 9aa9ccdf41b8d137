"""Host, Origin and body type on every route of a loopback server with auth off (REST, /mcp and
the chat proxy): a Host that is not a loopback name is 421, an Origin that is not the request's
own host and port 403, a body that is not JSON 415, each naming what it refused and changing
nothing; the loopback names and a same-origin request still work."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from outcome import Outcome, status
from servers import Bundles, raw_http, real_encoder_case, real_server
from upstream import Upstream

INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
MCP = {"Accept": "application/json, text/event-stream"}
CHAT = {"model": "echo", "messages": [{"role": "user", "content": "hello"}], "lab": {"namespace": "o", "save": True}}


def origin_cases(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    out: list[Outcome] = []
    with Upstream() as up:
        with real_server(bundles, tmp / "origin-store", "--mcp", "--proxy-upstream", f"{up.base}/v1",
                         "--rate", "100000", "--burst", "100000") as srv:
            out.append(real_encoder_case("origin", srv))
            with srv.client() as c:
                c.post("/v1/namespaces", json={"name": "o"})
                mid = c.post("/v1/memories", json={"namespace": "o", "content": "a memory to patch"}).json()["id"]
            out += cases(srv, up, mid, short)
            with srv.client() as c:
                items = c.get("/v1/memories", params={"namespace": "o", "limit": 1000}).json()["items"]
            planted = [m["content"] for m in items if "planted" in m["content"] or "hello" in m["content"]]
            out.append(Outcome("origin", "nothing a refused request carried was stored", "no planted memory",
                               str(planted[:3]), not planted))
            log = srv.log()
        out.append(Outcome("origin", "server log has no traceback", "no Traceback",
                           "Traceback found" if "Traceback" in log else "none", "Traceback" not in log))
    return out


def cases(srv: Any, up: Upstream, mid: str, short: bool) -> list[Outcome]:
    port = srv.url.rsplit(":", 1)[1]
    own = f"127.0.0.1:{port}"
    routes = [("GET", "/v1/namespaces", None, {}),
              ("POST", "/v1/memories", {"namespace": "o", "content": "planted by a rebinding page"}, {}),
              ("POST", "/v1/search", {"namespace": "o", "query": "memory"}, {}),
              ("PATCH", f"/v1/memories/{mid}", {"content": "planted by a patch"}, {}),
              ("POST", "/mcp", INIT, MCP),
              ("POST", "/v1/chat/completions", CHAT, {})]
    if not short:
        routes += [("GET", "/health", None, {}), ("GET", "/metrics", None, {}),
                   ("DELETE", f"/v1/memories/{mid}", None, {}), ("GET", "/v1/memories?namespace=o", None, {})]
    out = []

    def send(method: str, path: str, js: Any, extra: dict[str, str], **headers: str) -> Any:
        return httpx.request(method, srv.url + path, json=js, headers={**extra, **headers}, timeout=30)

    n0 = len(up.received)
    for method, path, js, extra in routes:
        shown = path.replace(mid, "<id>")
        out.append(status("origin", f"Host evil.example: {method} {shown}", send(method, path, js, extra,
                                                                                Host="evil.example"), {421}, "evil.example"))
        out.append(status("origin", f"Origin http://evil.example: {method} {shown}",
                          send(method, path, js, extra, Origin="http://evil.example"), {403}, "evil.example"))
    for method, path, js, extra in routes[:2]:
        if not short:
            out.append(status("origin", f"Host evil.example:{port} (right port): {method} {path}",
                              send(method, path, js, extra, Host=f"evil.example:{port}"), {421}, "evil.example"))
        out.append(status("origin", f"Origin of another local port: {method} {path}",
                          send(method, path, js, extra, Origin="http://127.0.0.1:1"), {403}, "127.0.0.1:1"))
        out.append(status("origin", f"Origin 'null': {method} {path}", send(method, path, js, extra, Origin="null"),
                          {403}, "null"))
    if not short:
        out.append(status("origin", "Origin localhost with Host 127.0.0.1 (not the same origin)",
                          send("GET", "/v1/namespaces", None, {}, Origin=f"http://localhost:{port}"), {403}, "localhost"))
    out.append(Outcome("origin", "refused proxy requests never reached the upstream", "0 upstream calls",
                       f"{len(up.since(n0))} calls", not up.since(n0)))
    hosts = [own, f"localhost:{port}", f"[::1]:{port}", "localhost", "127.0.0.1"]
    for host in hosts if not short else hosts[:3]:
        r = httpx.get(srv.url + "/v1/namespaces", headers={"Host": host}, timeout=30)
        out.append(status("origin", f"a loopback Host {host}", r, {200}))
    r = httpx.post(srv.url + "/v1/memories", json={"namespace": "o", "content": "same-origin save"},
                   headers={"Origin": f"http://{own}"}, timeout=30)
    out.append(status("origin", "a same-origin request (Origin = its Host)", r, {201}))
    typed = [("text/plain", "/v1/memories", b'{"namespace": "o", "content": "planted as text/plain"}'),
             ("application/x-www-form-urlencoded", "/v1/memories", b'{"namespace": "o", "content": "planted as a form"}'),
             ("multipart/form-data; boundary=x", "/v1/search", b'{"namespace": "o", "query": "x"}'),
             ("text/plain;charset=UTF-8", "/v1/chat/completions", str.encode(__import__("json").dumps(
                 {**CHAT, "messages": [{"role": "user", "content": "planted through the proxy"}]}))),
             ("text/plain", "/mcp", str.encode(__import__("json").dumps(INIT)))]
    if not short:
        typed += [("text/html", f"/v1/memories/{mid}", b'{"content": "planted by a text patch"}'),
                  ("application/xml", "/v1/memories/batch", b'{"memories": [{"namespace": "o", "content": "planted xml"}]}')]
    for kind, path, raw in typed:
        method = "PATCH" if path.startswith("/v1/memories/") and not path.endswith("batch") else "POST"
        r = httpx.request(method, srv.url + path, content=raw, headers={"Content-Type": kind, **MCP}, timeout=30)
        out.append(status("origin", f"body as {kind}: {method} {path.replace(mid, '<id>')}", r, {415}, kind.split(";")[0]))
    r = raw_http(srv.url, "POST", "/v1/memories", body=b'{"namespace": "o", "content": "planted without a type"}')
    out.append(status("origin", "a body with no Content-Type: POST /v1/memories", r, {415}))
    for kind, path, raw, want in (("application/json; charset=utf-8", "/v1/memories",
                                   b'{"namespace": "o", "content": "json with a charset"}', 201),
                                  ("application/merge-patch+json", f"/v1/memories/{mid}", b'{"tags": ["ok"]}', 200)):
        method = "PATCH" if want == 200 else "POST"
        r = httpx.request(method, srv.url + path, content=raw, headers={"Content-Type": kind}, timeout=30)
        out.append(status("origin", f"a JSON body as {kind}", r, {want}))
    return out
