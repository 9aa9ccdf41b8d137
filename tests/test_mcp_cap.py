"""The per-key MCP session cap under concurrent opens: a real `lab serve --mcp` and a burst of
initialize requests by one key, sent at once (each open takes its slot before the SDK opens the
session, and gives it back when none came of it)."""
from __future__ import annotations

import asyncio

import httpx

from serving import Server, write_bundle

from lab.serve.auth import add_key

ACC = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "cap", "version": "0"}}}
CAP = 4


async def burst(url: str, key: str, n: int, body: dict | None = None) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=n)) as c:
        return list(await asyncio.gather(*[c.post(url + "/mcp", json=body or INIT,
                                                  headers={**ACC, "Authorization": f"Bearer {key}"})
                                           for _ in range(n)]))


def test_a_burst_of_opens_by_one_key_never_passes_the_cap(tmp_path):
    keys = tmp_path / "keys.yaml"
    k = {name: add_key(keys, name, "read", ["*"]) for name in ("r", "other", "failing")}
    with Server(write_bundle(tmp_path / "bundle"), tmp_path / "store", "--mcp", "--auth", "on", "--keys-file",
                str(keys), "--mcp-sessions-per-key", str(CAP), "--rate", "100000", "--burst", "100000") as srv:
        got = asyncio.run(burst(srv.url, k["r"], 64))
        codes = [r.status_code for r in got]
        assert codes.count(200) == CAP and codes.count(429) == 64 - CAP, codes
        refused = next(r for r in got if r.status_code == 429).json()["error"]["message"]
        assert f"key 'r' holds {CAP} open MCP sessions" in refused and "mcp_sessions_per_key" in refused
        # another key is not locked out by r's burst
        assert [r.status_code for r in asyncio.run(burst(srv.url, k["other"], CAP))] == [200] * CAP
        # ending one of r's sessions frees exactly one slot
        sid = next(r for r in got if r.status_code == 200).headers["mcp-session-id"]
        ended = httpx.delete(srv.url + "/mcp", headers={**ACC, "Authorization": f"Bearer {k['r']}",
                                                       "mcp-session-id": sid}, timeout=30)
        assert ended.status_code == 200
        assert sorted(r.status_code for r in asyncio.run(burst(srv.url, k["r"], 8))) == [200] + [429] * 7
        # opens that fail (no session comes of them) give their slots back
        not_init = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}
        failed = [asyncio.run(burst(srv.url, k["failing"], 1, not_init))[0] for _ in range(3 * CAP)]
        assert all(r.status_code == 400 for r in failed), [r.status_code for r in failed]
        assert [r.status_code for r in asyncio.run(burst(srv.url, k["failing"], CAP))] == [200] * CAP
        assert "Traceback" not in srv.log()
