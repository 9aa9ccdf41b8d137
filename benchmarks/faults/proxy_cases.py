"""The chat proxy (`lab serve --proxy-upstream URL`) against a recording upstream in this process:
whose credentials reach the upstream (never lab's key), which namespaces a key may inject or save
into, bodies that are not JSON a client could mean, a gzip-encoded stream, an upstream URL with a
path and a query, upstream errors whose texts (and the log) must not show the URL's userinfo or
query values, and a client that leaves mid-stream (its partial answer is not saved)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from outcome import Outcome, status
from servers import Bundles, real_encoder_case, real_server, server, wait_until
from upstream import Upstream

from lab.serve.auth import add_key

MSG = {"model": "echo", "messages": [{"role": "user", "content": "who owns billing?"}]}
QUERY_SECRET = "SECRETQ"
PASSWORD = "hunter2"


def body(**kw: Any) -> dict[str, Any]:
    return {**MSG, **kw}


def proxy_cases(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    keys = tmp / "keys.yaml"
    k_all = add_key(keys, "all", "write", ["*"])
    k_a = add_key(keys, "team-a", "write", ["team-a/*"])
    k_ar = add_key(keys, "team-a-reader", "read", ["team-a/*"])
    lab_keys = (k_all, k_a, k_ar)
    out: list[Outcome] = []
    with Upstream() as up:
        base = f"{up.base}/v1?api-version=2024-06-01&api-key={QUERY_SECRET}"
        srv = real_server(bundles, tmp / "proxy-store", "--auth", "on", "--keys-file", str(keys), "--proxy-upstream",
                          base, "--proxy-timeout", "2", "--rate", "100000", "--burst", "100000").start()
        try:
            out.append(real_encoder_case("proxy", srv, k_all))
            with srv.client(k_all) as c:
                for ns in ("team-a/x", "team-b"):
                    c.post("/v1/namespaces", json={"name": ns})
                c.post("/v1/memories", json={"namespace": "team-a/x", "content": "Priya owns the billing service"})
                c.post("/v1/memories", json={"namespace": "team-b", "content": "team-b secret: billing is owned by Zed"})
            out += on_auth_server(srv, up, k_all, k_a, k_ar, lab_keys, short)
        finally:
            srv.stop()
        log = srv.log()
        out.append(Outcome("proxy", "server log: no traceback, no upstream secret, no lab key",
                           "none of them", f"Traceback {'found' if 'Traceback' in log else 'none'}; query secret "
                           f"{'FOUND' if QUERY_SECRET in log else 'absent'}; lab keys "
                           f"{'FOUND' if any(k in log for k in lab_keys) else 'absent'}",
                           "Traceback" not in log and QUERY_SECRET not in log and not any(k in log for k in lab_keys)))
    out += unreachable(tmp, bundles)
    return out


def on_auth_server(srv: Any, up: Upstream, k_all: str, k_a: str, k_ar: str, lab_keys: tuple[str, ...],
                   short: bool) -> list[Outcome]:
    out: list[Outcome] = []
    url = srv.url + "/v1/chat/completions"
    team = {"X-Lab-Namespace": "team-a/x"}

    def post(headers: dict[str, str], js: Any = None, content: Any = None, timeout: float = 30) -> tuple[Any, list]:
        n0 = len(up.received)
        r = httpx.post(url, json=js if content is None else None, content=content, headers=headers, timeout=timeout)
        return r, up.since(n0)

    def sent(got: list, secret: str) -> bool:
        return any(secret in json.dumps(g) for g in got)

    for name, h in (("no key", {}), ("a wrong X-API-Key", {"X-API-Key": "lab_wrong"}),
                    ("a wrong Bearer", {"Authorization": "Bearer lab_wrong"})):
        r, got = post(h, body())
        case = status("proxy", f"auth: {name}", r, {401}, code="unauthenticated")
        case.observed += f"; upstream calls {len(got)}"
        case.ok = case.ok and not got
        out.append(case)
    r, got = post({"X-API-Key": k_a, "Authorization": "Bearer sk-upstream", **team}, body())
    hdrs = got[0]["headers"] if got else {}
    out.append(Outcome("proxy", "lab key as X-API-Key, upstream key as Authorization",
                       "200; the upstream gets its key only, no X-API-Key or X-Lab-* header",
                       f"{r.status_code}; upstream authorization {hdrs.get('authorization')!r}; lab key sent "
                       f"{sent(got, k_a)}; x- headers {sorted(k for k in hdrs if k.startswith('x-'))}",
                       r.status_code == 200 and hdrs.get("authorization") == "Bearer sk-upstream"
                       and not sent(got, k_a) and not any(k.startswith("x-") for k in hdrs)))
    system = json.dumps(got[0]["body"]["messages"][0]) if got else ""
    out.append(Outcome("proxy", "memories injected from the key's namespace only",
                       "X-Lab-Memories names a team-a/x memory; the upstream sees it, not team-b's",
                       f"X-Lab-Memories {r.headers.get('x-lab-memories')}; Priya upstream {'Priya' in system}; "
                       f"Zed upstream {'Zed' in system}",
                       "team-a/x:" in (r.headers.get("x-lab-memories") or "") and "Priya" in system and "Zed" not in system))
    where = (got[0]["path"], got[0]["query"]) if got else ("-", "-")
    out.append(Outcome("proxy", "an upstream URL with a path and a query",
                       "POST /v1/chat/completions, the query kept", f"{where[0]}?{where[1]}",
                       where[0] == "/v1/chat/completions" and "api-version=2024-06-01" in where[1]
                       and f"api-key={QUERY_SECRET}" in where[1]))
    for name, h, want in (
            ("lab key in both X-API-Key and Authorization", {"X-API-Key": k_a, "Authorization": f"Bearer {k_a}"}, None),
            ("lab key as Bearer only", {"Authorization": f"Bearer {k_a}"}, None),
            ("lab key as Bearer, upstream key as X-Upstream-Authorization",
             {"Authorization": f"Bearer {k_a}", "X-Upstream-Authorization": "Bearer sk-up2"}, "Bearer sk-up2")):
        r, got = post({**h, **team}, body())
        hdrs = got[0]["headers"] if got else {}
        out.append(Outcome("proxy", f"credentials: {name}", "200; lab key never upstream" +
                           (f"; upstream authorization {want!r}, header itself not passed" if want else ""),
                           f"{r.status_code}; upstream authorization {str(hdrs.get('authorization'))[:16]!r}; "
                           f"lab key sent {sent(got, k_a)}; x-upstream-authorization passed "
                           f"{'x-upstream-authorization' in hdrs}",
                           r.status_code == 200 and not any(sent(got, k) for k in lab_keys)
                           and hdrs.get("authorization") == want and "x-upstream-authorization" not in hdrs))
    r, got = post({"X-API-Key": k_a, **team, "Cookie": "session=abc", "X-Lab-Debug": "1"},
                  body(lab={"namespace": "team-a/x", "budget": 500}, user="u1"))
    b, hdrs = (got[0]["body"], got[0]["headers"]) if got else ({}, {})
    out.append(Outcome("proxy", "what else reaches the upstream", "no cookie, no x-lab-*; the body without 'lab'",
                       f"{r.status_code}; headers {sorted(hdrs)}; body keys {sorted(b)}",
                       r.status_code == 200 and bool(b) and "lab" not in b and "cookie" not in hdrs
                       and not any(k.startswith("x-lab") for k in hdrs)))
    for name, h, js, want, names in (
            ("X-Lab-Namespace of another team", {"X-API-Key": k_a, "X-Lab-Namespace": "team-b"}, body(), 403, "team-b"),
            ("lab.namespace of another team", {"X-API-Key": k_a}, body(lab={"namespace": "team-b"}), 403, "team-b"),
            ("header team-a/x, body lab.namespace team-b", {"X-API-Key": k_a, **team}, body(lab={"namespace": "team-b"}),
             403, "team-b"),
            ("a read-only key asking to save", {"X-API-Key": k_ar, **team}, body(lab={"save": True}), 403, "read-only"),
            ("a read-only key with X-Lab-Save: on", {"X-API-Key": k_ar, **team, "X-Lab-Save": "on"}, body(), 403,
             "read-only")):
        r, got = post(h, js)
        case = status("proxy", f"scope: {name}", r, {want}, names, absent=("Zed",))
        case.observed += f"; upstream calls {len(got)}"
        case.ok = case.ok and not got
        out.append(case)
    h = {"X-API-Key": k_a, **team, "Content-Type": "application/json"}
    bad = [("a NaN literal", '{"model": "echo", "temperature": NaN, "messages": [{"role": "user", "content": "b"}]}', "NaN"),
           ("an Infinity literal", '{"model": "echo", "temperature": Infinity, "messages": [{"role": "user", "content": "b"}]}',
            "Infinity"),
           ("nesting 100000 deep", '{"model": "echo", "x": ' + "[" * 100000 + "]" * 100000 +
            ', "messages": [{"role": "user", "content": "b"}]}', "nested"),
           ("not JSON", "hello", "JSON"),
           ("messages empty", json.dumps(body(messages=[])), "messages")]
    if not short:
        bad += [("no user message", json.dumps(body(messages=[{"role": "system", "content": "s"}])), "user message"),
                ("lab an unknown option", json.dumps(body(lab={"model": "x"})), "model"),
                ("lab.save 'maybe'", json.dumps(body(lab={"save": "maybe"})), "save"),
                ("lab.budget 0", json.dumps(body(lab={"budget": 0})), "budget")]
    for name, raw, names in bad:
        r, got = post(h, content=raw)
        case = status("proxy", f"body: {name}", r, {422}, names)
        case.observed += f"; upstream calls {len(got)}"
        case.ok = case.ok and not got
        out.append(case)
    out += streams(srv, up, url, {"X-API-Key": k_a, **team}, k_all)
    t0 = time.monotonic()
    r, got = post({"X-API-Key": k_a, **team}, body(model="slow"), timeout=60)
    case = status("proxy", "a silent upstream (proxy timeout 2 s)", r, {504}, "did not answer", absent=(QUERY_SECRET,))
    case.observed += f" after {time.monotonic() - t0:.1f} s"
    out.append(case)
    r, got = post({"X-API-Key": k_a, **team}, body(model="short"))
    out.append(status("proxy", "an upstream answer cut short (body under its Content-Length)", r, {502},
                      "upstream", absent=(QUERY_SECRET,)))
    return out


def streams(srv: Any, up: Upstream, url: str, h: dict[str, str], k_all: str) -> list[Outcome]:
    """gzip-encoded stream; a whole stream saved; a stream the client left not saved."""
    out = []
    with httpx.stream("POST", url, json=body(model="gzip", stream=True), headers=h, timeout=30) as r:
        raw = b"".join(r.iter_raw())
    out.append(Outcome("proxy", "a gzip-encoded upstream stream", "the client reads it decoded",
                       f"{r.status_code}; content-encoding {r.headers.get('content-encoding')}; first bytes {raw[:16]!r}",
                       r.status_code == 200 and b"zipped" in raw and r.headers.get("content-encoding") in (None, "identity")))

    def saved(marker: str) -> list[str]:
        with srv.client(k_all) as c:
            items = c.get("/v1/memories", params={"namespace": "team-a/x", "limit": 1000}).json()["items"]
        return [m["content"] for m in items if f"first {marker}" in m["content"]]

    whole = "whole-stream-0001"
    r = httpx.post(url, json=body(model="stream", stream=True, lab={"save": True},
                                  messages=[{"role": "user", "content": f"tell me about {whole}"}]), headers=h, timeout=30)
    wait_until(lambda: bool(saved(whole[-12:])), 10)
    got = saved(whole[-12:])
    out.append(Outcome("proxy", "save on: a whole stream's answer is saved", "the answer saved once it ended",
                       f"{r.status_code}, [DONE] {'[DONE]' in r.text}; saved {got[:1]}",
                       r.status_code == 200 and len(got) == 1 and "part3" in got[0]))
    left = "disconnected-0002"
    with httpx.stream("POST", url, json=body(model="endless", stream=True, lab={"save": True},
                                             messages=[{"role": "user", "content": f"tell me about {left}"}]),
                      headers=h, timeout=30) as s:
        it = s.iter_raw()
        next(it)
        next(it)
    closed = wait_until(lambda: up.open_streams == 0, 10)
    time.sleep(1.5)  # a save, if one were coming, would have landed by now
    got = saved(left[-12:])
    out.append(Outcome("proxy", "save on: a client leaves mid-stream", "its partial answer not saved; upstream closed",
                       f"saved {got[:1]}; upstream streams still open {up.open_streams}", not got and closed))
    return out


def unreachable(tmp: Path, bundles: Bundles) -> list[Outcome]:
    """An upstream URL with userinfo and a query key, nothing listening: the 502 and the log."""
    base = f"http://proxyuser:{PASSWORD}@127.0.0.1:1/v1?api-key={QUERY_SECRET}"
    srv = server(bundles.fake, tmp / "proxy-dead-store", "--proxy-upstream", base, "--proxy-timeout", "2").start()
    out = []
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as c:  # one keep-alive connection
            c.post("/v1/namespaces", json={"name": "ns"})
            r = c.post("/v1/chat/completions", json=body(), headers={"X-Lab-Namespace": "ns"})
            out.append(status("proxy", "an unreachable upstream whose URL holds a password and a query key", r, {502},
                              "could not be reached", absent=(PASSWORD, QUERY_SECRET, "proxyuser")))
            nxt = c.post("/v1/memories", json={"namespace": "ns", "content": "after the 502"})
            out.append(Outcome("proxy", "the same connection after the 502", "201", str(nxt.status_code),
                               nxt.status_code == 201))
    finally:
        srv.stop()
    log = srv.log()
    out.append(Outcome("proxy", "server log after the 502", "no password, no query key, no traceback",
                       f"password {'FOUND' if PASSWORD in log else 'absent'}, query key "
                       f"{'FOUND' if QUERY_SECRET in log else 'absent'}, Traceback {'found' if 'Traceback' in log else 'none'}",
                       PASSWORD not in log and QUERY_SECRET not in log and "Traceback" not in log))
    return out
