"""Concurrent MCP opens (`lab serve --mcp`, auth on): bursts of initialize requests by one key,
sent at once, never get it more sessions than mcp_sessions_per_key; the refusal names the cap;
another key opening at the same moment is not held back; the sessions granted are real; a slot
comes back when a session ends and when an open fails; the server log stays clean."""
from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import httpx

from outcome import Outcome, error_of
from servers import Bundles, server

from lab.serve.auth import add_key

G = "mcp_open"
ACC = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "burst", "version": "0"}}}
NOT_INIT = {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}


def headers(key: str, sid: str | None = None) -> dict[str, str]:
    return {**ACC, "Authorization": f"Bearer {key}", **({"mcp-session-id": sid} if sid else {})}


async def _burst(url: str, plan: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=max(1, len(plan)))) as c:
        return list(await asyncio.gather(*[c.post(url + "/mcp", json=body, headers=headers(key)) for key, body in plan]))


def burst(url: str, plan: list[tuple[str, dict[str, Any]]]) -> list[httpx.Response]:
    """Every request of ``plan`` (key, JSON-RPC body) sent at once, each on its own connection."""
    return asyncio.run(_burst(url, plan))


def codes(rs: list[httpx.Response]) -> dict[int, int]:
    found: dict[int, int] = {}
    for r in rs:
        found[r.status_code] = found.get(r.status_code, 0) + 1
    return dict(sorted(found.items()))


def cases(work: Path, bundles: Bundles, short: bool, seed: int) -> list[Outcome]:
    cap = 4 if short else 32
    keys = work / "mcp-open-keys.yaml"
    names = ("r", "w", "other", "failing", "ender") + (() if short else ("r2", "r3"))
    k = {n: add_key(keys, n, "read" if n.startswith("r") else "write", ["*"]) for n in names}
    out: list[Outcome] = []
    srv = server(bundles.fake, work / "mcp-open-store", "--mcp", "--auth", "on", "--keys-file", str(keys),
                 "--mcp-sessions-per-key", str(cap), "--rate", "100000", "--burst", "100000").start()
    try:
        out += bursts(srv.url, k, cap, short, seed)
        out += freed(srv.url, k, cap)
    finally:
        srv.stop()
    log = srv.log()
    out.append(Outcome(G, "server log", "no Traceback, no lab key", f"Traceback x{log.count('Traceback')}; keys "
                       f"{'FOUND' if any(v in log for v in k.values()) else 'absent'}",
                       "Traceback" not in log and not any(v in log for v in k.values())))
    if not short:  # the report's case: 400 opens at once at the default rate settings (rate 50, burst 100)
        out += default_rate(work, bundles, seed)
    return out


def capped(case: str, rs: list[httpx.Response], cap: int, key: str) -> Outcome:
    """Exactly ``cap`` sessions granted of a burst, the rest refused 429 naming the cap."""
    refused = [r for r in rs if r.status_code == 429]
    message = str(error_of(refused[0]).get("message", "")) if refused else ""
    granted = sum(1 for r in rs if r.status_code == 200 and r.headers.get("mcp-session-id"))
    ok = (granted == min(cap, len(rs)) and len(refused) == len(rs) - granted
          and (not refused or (f"key {key!r} holds {cap} open MCP sessions" in message
                               and "mcp_sessions_per_key" in message)))
    return Outcome(G, case, f"{min(cap, len(rs))} sessions, the rest 429 naming mcp_sessions_per_key",
                   f"{codes(rs)}; {granted} session ids; {message[:110]}", ok)


def bursts(url: str, k: dict[str, str], cap: int, short: bool, seed: int) -> list[Outcome]:
    rng = random.Random(seed)
    out = []
    sizes = [8 * cap] if short else [2 * cap, 4 * cap, 400]
    for i, n in enumerate(sizes):
        key = ("r", "r2", "r3")[i] if not short else "r"
        rs = burst(url, [(k[key], INIT)] * n)
        out.append(capped(f"{n} opens at once by read key {key!r} (cap {cap})", rs, cap, key))
        if i == 0:
            sids = [r.headers["mcp-session-id"] for r in rs if r.headers.get("mcp-session-id")]
            listed = [httpx.post(url + "/mcp", json={"jsonrpc": "2.0", "id": 9, "method": "tools/list"},
                                 headers=headers(k[key], sid), timeout=60).status_code for sid in sids]
            out.append(Outcome(G, f"the {len(sids)} sessions granted to {key!r} answer", "tools/list 200 on each",
                               str(listed), bool(listed) and all(c == 200 for c in listed)))
    # two keys at the same moment, interleaved in a shuffled order: each gets its own cap
    plan = [(k["w"], INIT)] * (3 * cap) + [(k["other"], INIT)] * (3 * cap)
    rng.shuffle(plan)
    rs = burst(url, plan)
    for name in ("w", "other"):
        mine = [r for (key, _), r in zip(plan, rs) if key == k[name]]
        out.append(capped(f"two keys open {3 * cap} each at once: {name!r}", mine, cap, name))
    return out


def freed(url: str, k: dict[str, str], cap: int) -> list[Outcome]:
    out = []
    rs = burst(url, [(k["ender"], INIT)] * cap)
    sids = [r.headers["mcp-session-id"] for r in rs if r.headers.get("mcp-session-id")]
    ended = [httpx.delete(url + "/mcp", headers=headers(k["ender"], sid), timeout=30).status_code for sid in sids[:2]]
    again = burst(url, [(k["ender"], INIT)] * (2 * cap))
    granted = sum(1 for r in again if r.status_code == 200)
    out.append(Outcome(G, "two sessions ended with DELETE, then a burst", "exactly 2 more sessions",
                       f"held {len(sids)}; DELETE {ended}; then {codes(again)}",
                       len(sids) == cap and ended == [200, 200] and granted == 2))
    failed = [burst(url, [(k["failing"], NOT_INIT)])[0].status_code for _ in range(2 * cap)]
    rs = burst(url, [(k["failing"], INIT)] * (2 * cap))
    case = capped(f"{2 * cap} failed opens one by one (no session came of them), then a burst", rs, cap, "failing")
    case.observed = f"failed opens {sorted(set(failed))}; then " + case.observed
    case.ok = case.ok and set(failed) == {400}
    out.append(case)
    return out


def default_rate(work: Path, bundles: Bundles, seed: int) -> list[Outcome]:
    keys = work / "mcp-open-keys2.yaml"
    key = add_key(keys, "kR", "read", ["*"])
    srv = server(bundles.fake, work / "mcp-open-store2", "--mcp", "--auth", "on", "--keys-file", str(keys)).start()
    try:
        rs = burst(srv.url, [(key, INIT)] * 400)
    finally:
        srv.stop()
    granted = sum(1 for r in rs if r.status_code == 200)
    ok = granted <= 32 and all(r.status_code in (200, 429) for r in rs) and "Traceback" not in srv.log()
    return [Outcome(G, "400 opens at once by one read key, default settings (cap 32, rate 50, burst 100)",
                    "at most 32 sessions; the rest 429 (cap or rate); no traceback", f"{codes(rs)}", ok)]
