"""The proxy's passthrough (`lab serve --proxy-upstream URL`, every /v1 path that is not lab's own)
against an upstream that records each request line exactly as it arrived, with requests written
raw on a socket (no client-side normalisation): traversal out of the upstream's base path (dot
segments plain and encoded, encoded slashes, double encoding, NUL and CR/LF), the allow-list
(setting proxy_passthrough), methods by key scope, lab's keys in every Authorization scheme, the
chat path with a trailing slash, lab's own paths with another method, and the server log."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from outcome import Outcome, error_of
from raw_upstream import RawUpstream, raw_request
from servers import Bundles, server

from lab.serve.auth import add_key

G = "passthrough"
SECRET = "UPSTREAMSECRET"
BASE = "/base/v1"
ALLOWED = "models,embeddings,files"
TRAVERSAL = [  # (target, what the refusal names)
    ("/v1/../admin", "dot segment"), ("/v1/../../admin", "dot segment"), ("/v1/%2e%2e/admin", "dot segment"),
    ("/v1/%2E%2E/%2e%2e/admin", "dot segment"), ("/v1/..%2f..%2fadmin", "encoded '/'"),
    ("/v1/models/%2e%2e/%2e%2e/%2e%2e/secret", "dot segment"), ("/v1/models/../../../secret", "dot segment"),
    ("/v1/./././models", "dot segment"), ("/v1/models%2f..%2f..%2fadmin", "encoded '/'"),
    ("/v1/models%5c..%5c..%5cadmin", "encoded '/' or '\\'"), ("/v1/%252e%252e/admin", "percent-encoded twice"),
    ("/v1//evil.example/x", "empty"), ("/v1/http://evil.example/x", "empty"),
    ("/v1/models%00", "control character '\\x00'"), ("/v1/models%00/../../admin", "control character"),
    ("/v1/models%0d%0aX-Injected:%201", "control character '\\r'"), ("/v1/models%0aX:%201", "control character '\\n'"),
    ("/v1/models%09", "control character '\\t'"), ("/v1/models%7f", "control character '\\x7f'"),
    ("/v1/%ff%fe", "UTF-8"), ("/v1/.%2e/admin", "dot segment"), ("/v1/%2e/models", "dot segment"),
    ("/v1/memories/abc%0Adef", "control character '\\n'"), ("/v1/namespaces/x%0A%0Dy/stats", "control character")]
NOT_LISTED = ["/v1/responses", "/v1/admin/keys", "/v1/modelsx", "/v1/Models", "/v1/fine_tuning/jobs",
              "/v1/@evil.example/x", "/v1/batches"]


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def cases(work: Path, bundles: Bundles, short: bool, seed: int) -> list[Outcome]:
    keys = work / "passthrough-keys.yaml"
    k = {"writer": add_key(keys, "writer", "write", ["*"]), "reader": add_key(keys, "reader", "read", ["*"]),
         "other": add_key(keys, "other", "write", ["team-b"])}
    out: list[Outcome] = []
    with RawUpstream() as up:
        srv = server(bundles.fake, work / "passthrough-store", "--auth", "on", "--keys-file", str(keys),
                     "--proxy-upstream", f"{up.url}{BASE}?api-key={SECRET}", "--rate", "100000", "--burst", "100000",
                     env={"LAB_SERVE_PROXY_PASSTHROUGH": ALLOWED}).start()
        try:
            with srv.client(k["writer"]) as c:
                c.post("/v1/namespaces", json={"name": "notes"})
            probe = Probe(srv.port, up)
            out += traversal(probe, k, short)
            out += allow_list(probe, k)
            out += scopes(probe, k, short)
            out += schemes(probe, k, short)
            out += own_paths(probe, k)
        finally:
            srv.stop()
        log = srv.log()
        out.append(Outcome(G, "server log", "no Traceback, no upstream secret, no lab key",
                           f"Traceback x{log.count('Traceback')}; secret {'FOUND' if SECRET in log else 'absent'}; "
                           f"keys {'FOUND' if any(v in log for v in k.values()) else 'absent'}",
                           "Traceback" not in log and SECRET not in log and not any(v in log for v in k.values())))
    return out


class Probe:
    """One raw request and what reached the upstream because of it."""

    def __init__(self, port: int, up: RawUpstream) -> None:
        self.port, self.up = port, up

    def __call__(self, method: str, target: str, key: str | None, headers: dict[str, str] | None = None,
                 body: bytes = b"") -> tuple[Any, list[dict[str, Any]]]:
        n0 = len(self.up.received)
        h = {**({"X-API-Key": key} if key else {}), **({"Content-Type": "application/json"} if body else {}),
             **(headers or {})}
        code, got_headers, text = raw_request(self.port, method, target, h, body)
        answer = SimpleNamespace(status_code=code, headers=got_headers, text=text, json=lambda: json.loads(text))
        return answer, self.up.since(n0)


def refusal(case: str, r: Any, got: list, want: int, names: str, field: str | None = None) -> Outcome:
    err = error_of(r)
    message = str(err.get("message", r.text[:120]))
    ok = (r.status_code == want and names.lower() in message.lower() and not got and SECRET not in r.text
          and (field is None or err.get("field") == field))
    return Outcome(G, case, f"{want} naming {names!r}" + (f", field {field}" if field else "") + "; upstream not called",
                   f"{r.status_code} {message[:140]}; upstream got {[g['line'] for g in got]}", ok)


def traversal(probe: Probe, k: dict[str, str], short: bool) -> list[Outcome]:
    out = []
    targets = TRAVERSAL[::2] if short else TRAVERSAL
    for target, names in targets:
        for key in ("writer",) if short else ("writer", "reader"):
            r, got = probe("GET", target, k[key])
            out.append(refusal(f"traversal {target} ({key})", r, got, 400, names, "path"))
    for method in ("POST", "DELETE") if not short else ("POST",):
        r, got = probe(method, "/v1/%2e%2e/%2e%2e/admin", k["writer"], body=b"{}" if method == "POST" else b"")
        out.append(refusal(f"traversal by {method} (write key)", r, got, 400, "dot segment", "path"))
    r, got = probe("GET", "/v1/models?x=/../../admin&u=http://a:b@evil.example/", k["reader"])
    line = got[0]["target"] if got else "-"
    out.append(Outcome(G, "dots and a URL in the query only", f"200; the path stays {BASE}/models",
                       f"{r.status_code}; upstream target {line}", r.status_code == 200 and line.startswith(f"{BASE}/models?")))
    return out


def allow_list(probe: Probe, k: dict[str, str]) -> list[Outcome]:
    out = []
    r, got = probe("GET", "/v1/models?limit=2", k["reader"])
    want = f"{BASE}/models?api-key={SECRET}&limit=2"
    out.append(Outcome(G, "GET /v1/models?limit=2", f"200 passthrough to {want.replace(SECRET, '...')}",
                       f"{r.status_code} {r.headers.get('x-lab-proxy')}; upstream {[g['target'].replace(SECRET, '...') for g in got]}",
                       r.status_code == 200 and r.headers.get("x-lab-proxy") == "passthrough" and [g["target"] for g in got] == [want]))
    r, got = probe("GET", "/v1/models/gpt%3Fx=1%23frag@evil.example", k["reader"])
    want = f"{BASE}/models/gpt%3Fx=1%23frag@evil.example?api-key={SECRET}"
    out.append(Outcome(G, "a ? # @ decoded from a segment stays in it", "200; re-quoted inside the segment",
                       f"{r.status_code}; upstream {[g['target'].replace(SECRET, '...') for g in got]}",
                       r.status_code == 200 and [g["target"] for g in got] == [want]))
    r, got = probe("POST", "/v1/embeddings", k["writer"], body=b'{"input": "hello"}')
    out.append(Outcome(G, "POST /v1/embeddings (write key)", "200; the body as sent", f"{r.status_code}; upstream "
                       f"{[g['line'].split('?')[0] for g in got]} body {[g['body'] for g in got]}",
                       r.status_code == 200 and len(got) == 1 and got[0]["body"] == '{"input": "hello"}'))
    for target in NOT_LISTED:
        r, got = probe("GET", target, k["writer"])
        out.append(refusal(f"not allowed: GET {target}", r, got, 404, "setting proxy_passthrough", "path"))
    return out


def scopes(probe: Probe, k: dict[str, str], short: bool) -> list[Outcome]:
    out = []
    calls = [("POST", "/v1/embeddings", b'{"input": "x"}'), ("DELETE", "/v1/files/file-1", b""),
             ("PUT", "/v1/files/file-1", b"{}"), ("PATCH", "/v1/files/file-1", b"{}"), ("POST", "/v1/files", b"{}")]
    for method, target, body in calls[:2] if short else calls:
        r, got = probe(method, target, k["reader"], body=body)
        out.append(refusal(f"read-only key: {method} {target}", r, got, 403, f"read-only: through the passthrough "
                           f"it may only GET, not {method} {target}"))
    r, got = probe("DELETE", "/v1/files/file-1", k["writer"])
    out.append(Outcome(G, "write key: DELETE /v1/files/file-1", "200; DELETE under the base path",
                       f"{r.status_code}; upstream {[g['line'].split('?')[0] for g in got]}",
                       r.status_code == 200 and [g["line"].split("?")[0] for g in got] == [f"DELETE {BASE}/files/file-1"]))
    r, got = probe("GET", "/v1/models", k["other"])  # a key of one namespace: the passthrough names none
    out.append(Outcome(G, "a key scoped to another namespace: GET /v1/models", "200 (no namespace involved)",
                       f"{r.status_code}; upstream calls {len(got)}", r.status_code == 200 and len(got) == 1))
    for name, key in (("no key", None), ("a wrong key", "lab_wrong")):
        r, got = probe("GET", "/v1/models", key)
        out.append(refusal(f"{name}: GET /v1/models", r, got, 401, "API key"))
    for target in ("/v1/../admin", "/v1/models%00"):  # no key: nothing about the path is told
        r, got = probe("GET", target, None)
        out.append(refusal(f"no key: GET {target}", r, got, 401, "API key"))
    return out


def schemes(probe: Probe, k: dict[str, str], short: bool) -> list[Outcome]:
    """A lab key in any Authorization scheme never reaches the upstream; the caller's own key does."""
    w, r_ = k["writer"], k["reader"]
    values = [("Bearer (another lab key)", f"Bearer {r_}"), ("Token", f"Token {r_}"), ("Basic key:", f"Basic {b64(r_ + ':')}"),
              ("Basic user:key", f"Basic {b64('me:' + r_)}"), ("Basic unpadded", f"Basic {b64(r_).rstrip('=')}"),
              ("a bare key", r_), ("bearer, odd case and spaces", f"bEaReR   {w} "), ("Token token=\"key\"", f'Token token="{r_}"'),
              ("Basic of the caller's own key", f"Basic {b64(w + ':')}")]
    out = []
    for header in ("Authorization",) if short else ("Authorization", "X-Upstream-Authorization"):
        for name, value in values[::2] if short else values:
            r, got = probe("GET", "/v1/models", w, {header: value})
            sent = got[0]["headers"] if got else {}
            leaked = [n for n, v in k.items() if v in json.dumps(sent)]
            out.append(Outcome(G, f"lab key as {header}: {name}", "200; no authorization upstream, no lab key",
                               f"{r.status_code}; upstream authorization {'present' if 'authorization' in sent else 'absent'}; "
                               f"leaked {leaked}", r.status_code == 200 and "authorization" not in sent and not leaked))
    r, got = probe("GET", "/v1/models", w, {"Authorization": "Bearer sk-upstream"})
    sent = got[0]["headers"] if got else {}
    out.append(Outcome(G, "the caller's own upstream key", "forwarded as sent; no X-API-Key upstream",
                       f"{r.status_code}; authorization {sent.get('authorization')!r}; x-api-key {'x-api-key' in sent}",
                       sent.get("authorization") == "Bearer sk-upstream" and "x-api-key" not in sent))
    return out


def own_paths(probe: Probe, k: dict[str, str]) -> list[Outcome]:
    """lab's own paths and the chat route: never forwarded as a passthrough."""
    out = []
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "lab": {"namespace": "notes"}})
    r, got = probe("POST", "/v1/chat/completions/", k["writer"], body=chat.encode())
    body = json.loads(got[0]["body"]) if got else {}
    out.append(Outcome(G, "POST /v1/chat/completions/ (trailing slash)", "the chat route: lab field removed, not passthrough",
                       f"{r.status_code}; x-lab-namespace {r.headers.get('x-lab-namespace')}; upstream "
                       f"{[g['line'].split('?')[0] for g in got]}; lab field upstream {'lab' in body}",
                       r.status_code == 200 and r.headers.get("x-lab-namespace") == "notes" and "lab" not in body
                       and len(got) == 1 and "x-lab-proxy" not in r.headers))
    for target in ("/v1/chat/completions", "/v1/chat/completions/"):
        r, got = probe("GET", target, k["writer"])
        case = refusal(f"GET {target}", r, got, 405, "")
        case.ok = case.ok and r.headers.get("allow") == "POST"
        case.observed += f"; Allow {r.headers.get('allow')}"
        out.append(case)
    for method, target, allow in (("HEAD", "/v1/models", "GET, POST, PUT, PATCH, DELETE"),
                                  ("OPTIONS", "/v1/embeddings", "GET, POST, PUT, PATCH, DELETE"),
                                  ("TRACE", "/v1/models", "GET, POST, PUT, PATCH, DELETE"),
                                  ("OPTIONS", "/v1/chat/completions", "POST")):
        r, got = probe(method, target, k["writer"])
        case = refusal(f"a method not forwarded: {method} {target}", r, got, 405, "" if method == "HEAD" else method)
        case.ok = case.ok and r.headers.get("allow") == allow
        case.observed += f"; Allow {r.headers.get('allow')}"
        out.append(case)
    for method, target in (("PUT", "/v1/memories"), ("GET", "/v1/search"), ("DELETE", "/v1/namespaces/notes/stats")):
        r, got = probe(method, target, k["writer"], body=b"{}" if method == "PUT" else b"")
        case = refusal(f"lab's own path, another method: {method} {target}", r, got, 405, "")
        case.ok = case.ok and bool(r.headers.get("allow")) and method not in r.headers.get("allow", "")
        case.observed += f"; Allow {r.headers.get('allow')}"
        out.append(case)
    return out
