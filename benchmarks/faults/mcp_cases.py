"""MCP over streamable HTTP (`lab serve --mcp`, auth on): keys at the door, sessions bound to the
key that opened them (another key's use or DELETE is answered like an unknown session), a per-key
cap on open sessions and an idle timeout, malformed JSON-RPC, oversized calls, and through the
official SDK client: scopes, read-only keys, traversal, refused resource reads."""
from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx

from outcome import Outcome, error_of, status
from servers import Bundles, real_encoder_case, real_server, server, wait_until

from lab.serve.auth import add_key

ACC = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "0"}}}
TEAM_B_TEXT = "the launch code is 4711"
TOOLS = {"memory_save", "memory_save_many", "memory_search", "memory_context", "memory_get", "memory_update",
         "memory_forget", "memory_list", "memory_link", "memory_check"}


class Raw:
    """JSON-RPC over plain httpx, to send what the SDK client never would."""

    def __init__(self, url: str) -> None:
        self.url = url + "/mcp"

    def headers(self, key: str | None, sid: str | None = None) -> dict[str, str]:
        return {**ACC, **({"Authorization": f"Bearer {key}"} if key else {}), **({"mcp-session-id": sid} if sid else {})}

    def open(self, key: str) -> tuple[int, str | None, Any]:
        r = httpx.post(self.url, json=INIT, headers=self.headers(key), timeout=30)
        sid = r.headers.get("mcp-session-id")
        if sid:
            httpx.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers=self.headers(key, sid), timeout=30)
        return r.status_code, sid, r

    def call(self, key: str | None, sid: str | None, method: str = "tools/list", params: Any = None,
             raw: bytes | str | None = None) -> Any:
        content = raw if raw is not None else json.dumps({"jsonrpc": "2.0", "id": 7, "method": method,
                                                          "params": params or {}})
        return httpx.post(self.url, content=content, headers=self.headers(key, sid), timeout=60)

    def delete(self, key: str, sid: str) -> Any:
        return httpx.delete(self.url, headers=self.headers(key, sid), timeout=30)


def mcp_cases(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    keys = tmp / "keys.yaml"
    k = {name: add_key(keys, name, scope, ns) for name, scope, ns in (
        ("all", "write", ["*"]), ("team-a", "write", ["team-a/*"]), ("team-a-reader", "read", ["team-a/*"]),
        ("team-b", "write", ["team-b"]), ("reader", "read", ["*"]))}
    out: list[Outcome] = []
    with real_server(bundles, tmp / "mcp-store", "--mcp", "--auth", "on", "--keys-file", str(keys),
                     "--rate", "100000", "--burst", "100000") as srv:
        out.append(real_encoder_case("mcp", srv, k["all"]))
        with srv.client(k["all"]) as c:
            for ns in ("team-a/x", "team-b"):
                c.post("/v1/namespaces", json={"name": ns})
            ma = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "team a note about deploys"}).json()["id"]
            mb = c.post("/v1/memories", json={"namespace": "team-b", "content": TEAM_B_TEXT}).json()["id"]
        out += door_and_sessions(Raw(srv.url), k, short)
        out += sdk_cases(srv.url, k, ma, mb, short)
        out += number_literals(Raw(srv.url), srv, k, short)
        with srv.client(k["all"]) as c:
            got = c.get(f"/v1/memories/{mb}").json()
        out.append(Outcome("mcp", "after it all: team-b's memory untouched", f"{TEAM_B_TEXT!r}, valid",
                           f"{got.get('content')!r}, valid {got.get('valid')}",
                           got.get("content") == TEAM_B_TEXT and got.get("valid") is True))
        log = srv.log()
    out.append(Outcome("mcp", "server log: no traceback", "no Traceback",
                       f"Traceback x{log.count('Traceback')}", "Traceback" not in log))
    out += caps_and_idle(tmp, bundles, keys, k, short)
    return out


def door_and_sessions(raw: Raw, k: dict[str, str], short: bool) -> list[Outcome]:
    out = []
    for method in ("POST", "GET", "DELETE"):
        r = httpx.request(method, raw.url, json=INIT if method == "POST" else None, headers=ACC, timeout=30)
        out.append(status("mcp", f"no key: {method} /mcp", r, {401}, code="unauthenticated"))
    out.append(status("mcp", "a wrong key", httpx.post(raw.url, json=INIT, headers=raw.headers("lab_wrong"), timeout=30),
                      {401}, "not valid", code="unauthenticated"))
    out.append(status("mcp", "the key in the query string only", httpx.post(
        raw.url + f"?api_key={k['team-a']}", json=INIT, headers=ACC, timeout=30), {401}, code="unauthenticated"))
    code, sid, _ = raw.open(k["team-a"])
    out.append(Outcome("mcp", "initialize with a key", "200 and a session id", f"{code}, session {bool(sid)}",
                       code == 200 and bool(sid)))
    out.append(status("mcp", "a call without a session id", raw.call(k["team-a"], None), {400}))
    unknown = "0" * 32
    r_unknown = raw.call(k["team-b"], unknown)
    r_other = raw.call(k["team-b"], sid, "tools/call", {"name": "memory_list", "arguments": {}})
    same = (r_other.status_code, r_other.text.replace(str(sid), "<sid>")) == \
        (r_unknown.status_code, r_unknown.text.replace(unknown, "<sid>"))
    out.append(Outcome("mcp", "another key uses a session", "404, the answer to an unknown session id",
                       f"{r_other.status_code} {r_other.text[:100]!r} | unknown: {r_unknown.status_code} "
                       f"{r_unknown.text[:60]!r}; same {same}", r_other.status_code == 404 and same))
    d_other = raw.delete(k["team-b"], sid)
    d_unknown = raw.delete(k["team-b"], unknown)
    after = raw.call(k["team-a"], sid)
    out.append(Outcome("mcp", "another key DELETEs a session", "404 (as an unknown one); the owner's session lives",
                       f"DELETE {d_other.status_code} (unknown id: {d_unknown.status_code}); owner's next call "
                       f"{after.status_code}", d_other.status_code == 404 == d_unknown.status_code
                       and after.status_code == 200))
    mine = raw.delete(k["team-a"], sid)
    gone = raw.call(k["team-a"], sid)
    out.append(Outcome("mcp", "the owner DELETEs its session", "2xx, then 404", f"{mine.status_code}, then {gone.status_code}",
                       mine.status_code < 300 and gone.status_code == 404))
    _, sid, _ = raw.open(k["team-a"])
    bad = {"not JSON": "garbage{", "a JSON array": "[]", "deep params (20000)": '{"jsonrpc": "2.0", "id": 1, '
           '"method": "tools/call", "params": ' + "[" * 20000 + "]" * 20000 + "}",
           "a NaN literal": '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "memory_search", '
           '"arguments": {"query": "x", "k": NaN}}}'}
    if not short:
        bad.update({"jsonrpc 1.0": json.dumps({"jsonrpc": "1.0", "id": 1, "method": "tools/list"}),
                    "a method that is a number": json.dumps({"jsonrpc": "2.0", "id": 1, "method": 5}),
                    "an unknown method": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "admin/shutdown"}),
                    "invalid UTF-8": b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "x": "\xff\xfe"}'})
    for name, body in bad.items():
        r = raw.call(k["team-a"], sid, raw=body)
        answer = r.text[:120]
        error = r.status_code >= 400 or '"error"' in r.text or '"isError":true' in r.text.replace(" ", "")
        out.append(Outcome("mcp", f"malformed JSON-RPC: {name}", "refused (4xx or a JSON-RPC error), no 5xx",
                           f"{r.status_code} {answer!r}", error and r.status_code < 500))
    big = {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
           "params": {"name": "memory_save", "arguments": {"content": "x" * 1_500_000, "namespace": "team-a/x"}}}
    out.append(status("mcp", "a 1.5 MB tool call", httpx.post(raw.url, json=big, headers=raw.headers(k["team-a"], sid),
                                                             timeout=60), {413}, "bytes"))
    return out


def number_literals(raw: Raw, srv: Any, k: dict[str, str], short: bool) -> list[Outcome]:
    """Number literals JSON does not have, in a tool's arguments (the SDK client would send null):
    refused, or stored as a finite importance from 0 to 1."""
    out = []
    _, sid, _ = raw.open(k["team-a"])
    for literal in ("Infinity", "NaN", "1e999") if not short else ("Infinity",):
        text = f"importance {literal}"
        body = ('{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "memory_save", "arguments": '
                f'{{"content": "{text}", "namespace": "team-a/x", "importance": {literal}}}}}}}')
        r = raw.call(k["team-a"], sid, raw=body)
        with srv.client(k["all"]) as c:
            items = c.get("/v1/memories", params={"namespace": "team-a/x", "limit": 1000}).json()["items"]
        stored = [m["importance"] for m in items if m["content"] == text]
        refused_it = r.status_code >= 400 or '"isError":true' in r.text.replace(" ", "")
        out.append(Outcome("mcp", f"a raw tool call with importance {literal}", "refused, or a finite importance in 0..1",
                           f"{r.status_code}, refused {refused_it}; stored importance {stored}",
                           r.status_code < 500 and (refused_it and not stored or bool(stored) and all(
                               isinstance(x, (int, float)) and 0 <= x <= 1 for x in stored))))
    return out


def sdk_cases(url: str, k: dict[str, str], ma: str, mb: str, short: bool) -> list[Outcome]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    out: list[Outcome] = []

    def client(key: str) -> Any:
        return Client(streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"}, timeout=120)))

    async def tool(c: Any, name: str, **args: Any) -> tuple[str, str]:
        try:
            r = await c.call_tool(name, args)
        except Exception as exc:
            return "EXC", f"{type(exc).__name__}: {exc}"[:200]
        return ("ERR", r.content[0].text if r.content else "") if r.is_error else ("OK", json.dumps(r.structured_content))

    def refused(case: str, got: tuple[str, str], names: str) -> Outcome:
        st, text = got
        return Outcome("mcp", case, f"a tool error naming {names!r}, nothing of team-b", f"{st}: {text[:160]}",
                       st == "ERR" and names.lower() in text.lower() and "4711" not in text)

    absent = "team-b:ffffffffffffffff"

    async def run() -> None:
        async with client(k["team-a"]) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            out.append(Outcome("mcp", "SDK: tools/list", f"the memory tools ({len(TOOLS)} at least)", str(sorted(tools)),
                               TOOLS <= tools))
            out.append(refused("SDK: search another team's namespace",
                               await tool(c, "memory_search", query="launch code", namespace="team-b"), "no access"))
            out.append(refused("SDK: save into another team's namespace",
                               await tool(c, "memory_save", content="planted", namespace="team-b"), "no access"))
            for name, args in (("memory_get", {}), ("memory_update", {"content": "overwritten"}),
                               ("memory_forget", {"hard": True})):
                a = await tool(c, name, id=mb, **args)
                b = await tool(c, name, id=absent, **args)
                same = a[0] == b[0] == "ERR" and a[1].replace(mb, "<id>") == b[1].replace(absent, "<id>")
                out.append(Outcome("mcp", f"SDK: {name} on another team's id (as an absent id)",
                                   "the same tool error either way", f"{a[0]}: {a[1][:90]} | {b[0]}: {b[1][:60]}",
                                   same and "4711" not in a[1]))
            out.append(refused("SDK: a namespace with '..'",
                               await tool(c, "memory_search", query="launch", namespace="team-a/../team-b"), "namespace"))
            out.append(refused("SDK: an unknown tool", await tool(c, "memory_drop_all"), "memory_drop_all"))
            out.append(refused("SDK: memory_save_many item naming a namespace",
                               await tool(c, "memory_save_many", memories=[{"content": "y", "namespace": "team-b"}],
                                          namespace="team-a/x"), "namespace"))
            if not short:
                out.append(refused("SDK: k = 10**9", await tool(
                    c, "memory_search", query="x", namespace="team-a/x", k=10**9), "k"))
                out.append(refused("SDK: a link to another team's memory", await tool(c, "memory_link", src=ma, dst=mb),
                                   "no memory"))
                out.append(refused("SDK: save_many of 1001", await tool(
                    c, "memory_save_many", memories=[{"content": f"m{i}"} for i in range(1001)], namespace="team-a/x"),
                    "memories"))
            for uri, ok_expected in (("lab://namespaces/team-b/stats", False), ("lab://namespaces/team-a%2Fx/stats", True)):
                try:
                    r = await c.read_resource(uri)
                    st, text = "OK", json.dumps([x.text for x in r.contents])
                except Exception as exc:
                    st, text = "ERR", f"{type(exc).__name__}: {exc}"
                if ok_expected:
                    out.append(Outcome("mcp", f"SDK: read {uri}", "its stats", f"{st}: {text[:120]}",
                                       st == "OK" and "memories" in text))
                else:
                    out.append(Outcome("mcp", f"SDK: read {uri} with a team-a key", "an error naming why (no access)",
                                       f"{st}: {text[:160]}", st == "ERR" and "no access" in text.lower()
                                       and "4711" not in text))
        async with client(k["team-a-reader"]) as c:
            for name, args in (("memory_save", {"content": "ro", "namespace": "team-a/x"}),
                               ("memory_forget", {"id": ma, "hard": True}),
                               ("memory_update", {"id": ma, "content": "ro change"})):
                out.append(refused(f"SDK read-only key: {name}", await tool(c, name, **args), "read-only"))

    try:
        asyncio.run(run())
    except BaseException as exc:  # the session itself broke: one failed case naming why
        out.append(Outcome("mcp", "SDK: the sessions ran to their end", "no crash", repr(exc)[:300], False))
    return out


def caps_and_idle(tmp: Path, bundles: Bundles, keys: Path, k: dict[str, str], short: bool) -> list[Outcome]:
    """A server with 3 sessions per key and a 2 s idle timeout (the short form: the cap only)."""
    out: list[Outcome] = []
    with server(bundles.fake, tmp / "mcp-caps-store", "--mcp", "--auth", "on", "--keys-file", str(keys),
                "--mcp-sessions-per-key", "3", "--mcp-session-idle", "2", "--rate", "100000", "--burst", "100000") as srv:
        raw = Raw(srv.url)
        opened = [raw.open(k["reader"]) for _ in range(3)]
        fourth = raw.open(k["reader"])
        msg = str(error_of(fourth[2]).get("message", fourth[2].text))
        out.append(Outcome("mcp", "a key holding its 3 sessions opens a 4th", "3 x 200, then 429 naming the cap",
                           f"{[o[0] for o in opened]}, then {fourth[0]} {msg[:140]!r}",
                           [o[0] for o in opened] == [200] * 3 and fourth[0] == 429 and "3" in msg
                           and "session" in msg.lower()))
        other = raw.open(k["all"])
        out.append(Outcome("mcp", "another key meanwhile", "200", str(other[0]), other[0] == 200))
        closed = raw.delete(k["reader"], opened[0][1])
        again = raw.open(k["reader"])
        out.append(Outcome("mcp", "the key closes one, opens one", "2xx, then 200", f"{closed.status_code}, {again[0]}",
                           closed.status_code < 300 and again[0] == 200))
        kept = again[1]
        log = srv.log()
        if short:
            return out + [Outcome("mcp", "caps server log: no traceback", "no Traceback",
                                  f"Traceback x{log.count('Traceback')}", "Traceback" not in log)]
        alive = []
        for _ in range(5):  # used every second: never idle for 2 s
            time.sleep(0.8)
            alive.append(raw.call(k["reader"], kept).status_code)
        out.append(Outcome("mcp", "a session in use outlives the idle time", "200 every time over 4 s", str(alive),
                           alive == [200] * 5))
        idle = opened[1][1]
        # each look is a use that keeps a live session alive: look less often than the idle time
        gone = wait_until(lambda: raw.call(k["reader"], idle).status_code == 404, 20, every=3.5)
        out.append(Outcome("mcp", "an idle session is closed (idle timeout 2 s)", "404 within 20 s",
                           f"{raw.call(k['reader'], idle).status_code}", gone))
        wait_until(lambda: raw.call(k["reader"], kept).status_code == 404, 20, every=3.5)
        fresh = [raw.open(k["reader"])[0] for _ in range(3)]
        out.append(Outcome("mcp", "closed idle sessions free the key's cap", "3 new sessions: 200 each", str(fresh),
                           fresh == [200] * 3))
        log = srv.log()
    out.append(Outcome("mcp", "caps server log: no traceback", "no Traceback", f"Traceback x{log.count('Traceback')}",
                       "Traceback" not in log))
    return out
