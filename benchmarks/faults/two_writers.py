"""Two writers on one namespace (a server and `lab ingest`), then ordinary updates: every memory
once, the command line's memories found by the server, and `lab store check` with no error and
no warning at all (an ordinary PATCH must leave nothing a check would warn about)."""
from __future__ import annotations

import concurrent.futures as cf
import json
import subprocess
import time
from pathlib import Path

from kills import all_memories
from outcome import Outcome
from servers import ENV, LAB, check_case, real_encoder_case

from serving import ROOT, Server


def two_writers(tmp: Path, srv: Server, n_http: int = 120, n_cli: int = 300) -> list[Outcome]:
    """``srv`` (not yet started) and a `lab ingest` process writing one namespace at once."""
    store = Path(srv.store)
    srv.start()
    out = [real_encoder_case("writers", srv)]
    data = tmp / "cli.jsonl"
    data.write_text("".join(json.dumps({"content": f"from the command line {i} token c{i}"}) + "\n"
                            for i in range(n_cli)))
    try:
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "shared"})
        cli = subprocess.Popen([*LAB, "ingest", str(data), "--store", str(store), "--namespace", "shared"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=ENV)

        def post(i: int) -> int:
            with srv.client(timeout=120) as c:
                return c.post("/v1/memories", json={"namespace": "shared",
                                                    "content": f"from the server {i} token s{i}"}).status_code

        with cf.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(post, range(n_http)))
        _, err = cli.communicate(timeout=900)
        time.sleep(1.5)  # the server sees the other process's commits within refresh_seconds
        with srv.client() as c:
            contents = [m["content"] for m in all_memories(c, "shared")]
            probe = c.post("/v1/search", json={"namespace": "shared", "query": "from the command line 7 token c7"})
            found = any("c7" in h["content"] for h in probe.json()["results"][:3])
            ids = [m["id"] for m in all_memories(c, "shared")[:5]]
            patched = [c.patch(f"/v1/memories/{m}", json={"content": f"patched note {i} token p{i}"}).status_code
                       for i, m in enumerate(ids)]
            tagged = [c.patch(f"/v1/memories/{m}", json={"tags": ["reviewed"], "importance": 0.9}).status_code
                      for m in ids]
    finally:
        srv.stop()
    good = (codes.count(201) == n_http and cli.returncode == 0 and len(contents) == n_http + n_cli
            and len(set(contents)) == len(contents) and found)
    out.append(Outcome("writers", "server + lab ingest on one namespace", f"{n_http + n_cli} memories once, found",
                       f"http 201 x{codes.count(201)}, cli exit {cli.returncode}, {len(contents)} stored, "
                       f"{len(contents) - len(set(contents))} duplicated, CLI memory found by the server: {found}"
                       + (f"; cli: {err.strip()[-200:]}" if cli.returncode else ""), good))
    case = check_case("writers", "store check after both writers and 10 ordinary PATCHes", store)
    case.observed = f"PATCH {sorted(set(patched + tagged))}; {case.observed}"
    case.ok = case.ok and set(patched + tagged) == {200}
    out.append(case)
    return out
