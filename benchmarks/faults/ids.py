"""Caller-chosen ids at every face that saves (REST one and batch, MCP over HTTP, `lab mcp` over
stdio): an id must begin with its own namespace and ':'; any other is refused (422, the field
ending in ``id``, the message naming the id and the prefix) before the store is looked at, so the
answer is the same whether another namespace holds that id or not, and the owner's own later
saves of a text another key tried to take its id of still succeed."""
from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from outcome import Outcome, error_of, same_answer
from servers import ENV, Bundles, real_encoder_case, real_server

from lab.serve.auth import add_key
from serving import ROOT

STORED = "Priya owns the billing service"
GUESSED = "Priya owns the payroll service"
GUESSED_BATCH = "Priya owns the pension service"


def default_id(ns: str, content: str) -> str:
    """The id lab gives a memory: NS:sha256(NS\\0content)[:16]."""
    return ns + ":" + hashlib.sha256((ns + "\x00" + content).encode()).hexdigest()[:16]


def id_refusal(case: str, r: Any, chosen: str, ns: str) -> Outcome:
    err = error_of(r)
    msg, field = str(err.get("message", r.text)), str(err.get("field") or "")
    return Outcome("ids", case, f"422, field ..id, naming {chosen!r} and the prefix '{ns}:'",
                   f"{r.status_code} [field {field}] {msg[:150]}",
                   r.status_code == 422 and field.endswith("id") and chosen in msg and f"{ns}:" in msg)


def id_cases(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    keys = tmp / "keys.yaml"
    k_all = add_key(keys, "all", "write", ["*"])
    k_a = add_key(keys, "team-a", "write", ["team-a/*"])
    k_b = add_key(keys, "team-b", "write", ["team-b"])
    out: list[Outcome] = []
    with real_server(bundles, tmp / "ids-store", "--mcp", "--auth", "on", "--keys-file", str(keys),
                     "--rate", "100000", "--burst", "100000") as srv:
        out.append(real_encoder_case("ids", srv, k_all))
        with srv.client(k_all) as c:
            for ns in ("team-a/x", "team-b"):
                c.post("/v1/namespaces", json={"name": ns})
            stored = c.post("/v1/memories", json={"namespace": "team-b", "content": STORED}).json()["id"]
        yes, no, no_batch = default_id("team-b", STORED), default_id("team-b", GUESSED), default_id("team-b", GUESSED_BATCH)
        out.append(Outcome("ids", "lab's own id of a text", "NS:sha256(NS\\0text)[:16]", stored, stored == yes))
        with srv.client(k_a) as a:
            one = lambda mid, content: a.post("/v1/memories", json={"namespace": "team-a/x", "content": content, "id": mid})
            ry, rn = one(yes, "probe one"), one(no, "probe two")
            out.append(id_refusal("REST: team-b's id of a stored text, saved into team-a/x", ry, yes, "team-a/x"))
            out.append(id_refusal("REST: team-b's id of a text it does not hold", rn, no, "team-a/x"))
            out.append(same_answer("ids", "REST: the answer does not tell whether team-b holds the text", ry, rn, yes, no,
                                   {422}))
            batch = lambda mid: a.post("/v1/memories/batch", json={"memories": [
                {"namespace": "team-a/x", "content": "batch probe", "id": mid}]})
            by, bn = batch(yes), batch(no_batch)
            out.append(id_refusal("REST batch: team-b's id of a stored text", by, yes, "team-a/x"))
            out.append(same_answer("ids", "REST batch: the same answer for a text team-b does not hold", by, bn, yes,
                                   no_batch, {422}))
            good = one("team-a/x:doc-1", "a note with an id of its own")
            out.append(Outcome("ids", "REST: an id with its own namespace's prefix", "201, the id kept",
                               f"{good.status_code} {good.json().get('id')}", good.status_code == 201
                               and good.json().get("id") == "team-a/x:doc-1"))
            for name, mid in (("the prefix alone", "team-a/x:"), ("another namespace that starts alike", "team-a/xy:doc"),
                              ("the parent namespace", "team-a:doc"), ("no namespace at all", "doc-1")):
                out.append(id_refusal(f"REST: an id of {name} ({mid!r})", one(mid, f"note {name}"), mid, "team-a/x"))
            r = a.post("/v1/memories", json={"namespace": "team-a/nope", "content": "x", "id": yes})
            out.append(id_refusal("REST: checked before the store (a namespace that does not exist)", r, yes, "team-a/nope"))
            mixed = a.post("/v1/memories/batch", json={"memories": [
                {"namespace": "team-a/x", "content": "the good one of a mixed batch", "id": "team-a/x:good"},
                {"namespace": "team-a/x", "content": "the bad one", "id": "team-b:bad"}]})
            landed = a.get("/v1/memories/team-a/x:good").status_code
            case = id_refusal("REST batch: one good id, one bad", mixed, "team-b:bad", "team-a/x")
            case.observed += f"; the good one stored: {landed == 200}"
            case.ok = case.ok and landed == 404
            out.append(case)
        with srv.client(k_all) as c:
            out.append(id_refusal("REST: a key for every namespace is bound too",
                                  c.post("/v1/memories", json={"namespace": "team-a/x", "content": "admin probe",
                                                               "id": no}), no, "team-a/x"))
        with srv.client(k_b) as b:
            r = b.post("/v1/memories", json={"namespace": "team-b", "content": GUESSED})
            out.append(Outcome("ids", "team-b then saves the text whose id team-a tried", "201 created, its own id",
                               f"{r.status_code} {r.json().get('status')} {r.json().get('id')}",
                               r.status_code == 201 and r.json().get("id") == no and r.json().get("status") == "created"))
            r = b.post("/v1/memories/batch", json={"memories": [{"namespace": "team-b", "content": "a fresh note"},
                                                                {"namespace": "team-b", "content": GUESSED_BATCH}]})
            got = r.json().get("memories", [{}, {}]) if r.status_code == 201 else [{}, {}]
            out.append(Outcome("ids", "team-b's batch with the text tried in a batch", "201, both created",
                               f"{r.status_code} {[m.get('status') for m in got]}",
                               r.status_code == 201 and [m.get("status") for m in got] == ["created", "created"]
                               and got[1].get("id") == no_batch))
        out += mcp_http(srv.url, k_a, yes, no)
        log = srv.log()
    out.append(Outcome("ids", "server log: no traceback", "no Traceback", f"Traceback x{log.count('Traceback')}",
                       "Traceback" not in log))
    out += mcp_stdio(tmp, bundles)
    return out


async def _tool(c: Any, name: str, **args: Any) -> tuple[str, str]:
    try:
        r = await c.call_tool(name, args)
    except Exception as exc:
        return "EXC", f"{type(exc).__name__}: {exc}"[:200]
    return ("ERR", r.content[0].text if r.content else "") if r.is_error else ("OK", json.dumps(r.structured_content))


def tool_refusal(case: str, got: tuple[str, str], chosen: str, ns: str) -> Outcome:
    return Outcome("ids", case, f"a tool error naming {chosen!r} and '{ns}:'", f"{got[0]}: {got[1][:150]}",
                   got[0] == "ERR" and chosen in got[1] and f"{ns}:" in got[1])


def mcp_http(url: str, key: str, yes: str, no: str) -> list[Outcome]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    out: list[Outcome] = []

    async def run() -> None:
        async with Client(streamable_http_client(url + "/mcp", http_client=httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"}, timeout=120))) as c:
            a = await _tool(c, "memory_save", content="mcp probe one", namespace="team-a/x", id=yes)
            b = await _tool(c, "memory_save", content="mcp probe two", namespace="team-a/x", id=no)
            out.append(tool_refusal("MCP memory_save: team-b's id of a stored text", a, yes, "team-a/x"))
            out.append(Outcome("ids", "MCP memory_save: the same answer for a text team-b does not hold",
                               "the same tool error", f"{a[1][:80]} | {b[1][:80]}",
                               a[0] == b[0] == "ERR" and a[1].replace(yes, "<id>") == b[1].replace(no, "<id>")))
            m = await _tool(c, "memory_save_many", memories=[{"content": "mcp batch probe", "id": yes}], namespace="team-a/x")
            out.append(tool_refusal("MCP memory_save_many: team-b's id", m, yes, "team-a/x"))
            ok = await _tool(c, "memory_save", content="an mcp note with its own id", namespace="team-a/x",
                             id="team-a/x:mcp-1")
            out.append(Outcome("ids", "MCP memory_save: an id with its own prefix", "saved with that id",
                               f"{ok[0]}: {ok[1][:120]}", ok[0] == "OK" and "team-a/x:mcp-1" in ok[1]))

    try:
        asyncio.run(run())
    except BaseException as exc:
        out.append(Outcome("ids", "MCP over HTTP: the session ran to its end", "no crash", repr(exc)[:300], False))
    return out


def mcp_stdio(tmp: Path, bundles: Bundles) -> list[Outcome]:
    """`lab mcp` as an MCP host launches it (stdio, the local user, default namespace 'notes')."""
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=ENV, args=[
        "-m", "lab", "mcp", "--bundle", str(bundles.fake), "--store", str(tmp / "stdio-store"), "--namespace", "notes"])
    out: list[Outcome] = []

    async def run() -> None:
        async with Client(params) as c:
            other = default_id("other", "a text of another namespace")
            bad = await _tool(c, "memory_save", content="stdio probe", id=other)
            out.append(tool_refusal("lab mcp (stdio) memory_save: another namespace's id", bad, other, "notes"))
            many = await _tool(c, "memory_save_many", memories=[{"content": "stdio batch probe", "id": "other:x"}])
            out.append(tool_refusal("lab mcp (stdio) memory_save_many: another namespace's id", many, "other:x", "notes"))
            good = await _tool(c, "memory_save", content="a stdio note with its own id", id="notes:doc-1")
            out.append(Outcome("ids", "lab mcp (stdio): an id with its own prefix", "saved with that id",
                               f"{good[0]}: {good[1][:120]}", good[0] == "OK" and "notes:doc-1" in good[1]))

    try:
        asyncio.run(run())
    except BaseException as exc:
        out.append(Outcome("ids", "lab mcp (stdio): the session ran to its end", "no crash", repr(exc)[:300], False))
    return out
