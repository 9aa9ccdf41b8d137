"""SIGKILL of `lab serve` during creates, updates and deletes (cut-off requests resent after the
restart), SIGKILL of `lab ingest` (then run again), and two writers (a server and the CLI) on one
namespace. Each round counts acknowledged-but-missing, duplicated and unfindable memories and
runs `lab store check`."""
from __future__ import annotations

import concurrent.futures as cf
import json
import random
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from outcome import Outcome

from serving import ROOT, Server

LAB = [sys.executable, "-m", "lab"]


def store_check(store: Path) -> tuple[bool, str]:
    got = subprocess.run([*LAB, "store", "check", "--store", str(store)], capture_output=True, text=True, cwd=ROOT)
    last = (got.stdout.strip().splitlines() or ["(no output)"])[-1]
    return got.returncode == 0 and "Traceback" not in got.stderr, f"check exit {got.returncode}: {last}"


def all_memories(c: Any, ns: str) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        r = c.get("/v1/memories", params={"namespace": ns, "limit": 1000, **({"cursor": cursor} if cursor else {})})
        r.raise_for_status()
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if not cursor:
            return items


def serve_round(srv: Server, r: int, writers: int, kill_after: int) -> dict[str, Any]:
    """Writers create, update and soft-delete; SIGKILL once ``kill_after`` operations are
    acknowledged; restart; resend every cut-off request; verify the namespace against what each
    writer was told."""
    ns = f"kill{r}"
    with srv.client() as c:
        c.post("/v1/namespaces", json={"name": ns})
    expected: dict[str, str | None] = {}  # id -> content it must have now (None: soft-deleted)
    cut: list[tuple[str, str, dict[str, Any]]] = []  # (method, path, body) that got no answer
    acked = [0]
    lock, enough = threading.Lock(), threading.Event()

    def writer(w: int) -> None:
        mine: list[str] = []
        with srv.client(timeout=30) as c:
            for i in range(100_000):
                if enough.is_set():
                    return
                if i % 5 == 4 and mine:
                    target, text = mine[-1], f"round {r} writer {w} note {i} revised edition {w * 100_000 + i}"
                    call = ("PATCH", f"/v1/memories/{target}", {"content": text})
                elif i % 7 == 6 and len(mine) > 1:
                    target, text = mine.pop(0), None
                    call = ("DELETE", f"/v1/memories/{target}", {})
                else:
                    target, text = None, f"round {r} writer {w} note {i} about durable storage {w * 100_000 + i}"
                    call = ("POST", "/v1/memories", {"namespace": ns, "content": text})
                try:
                    resp = c.request(call[0], call[1], json=call[2] or None)
                except Exception:  # the server is gone mid-request: resend it after the restart
                    with lock:
                        cut.append(call)
                    return
                if resp.status_code not in (200, 201):
                    raise RuntimeError(f"{call[0]} {call[1]}: {resp.status_code} {resp.text[:200]}")
                with lock:
                    if call[0] == "POST":
                        target = resp.json()["id"]
                        mine.append(target)
                    expected[target] = text
                    acked[0] += 1
                    if acked[0] >= kill_after:
                        enough.set()

    with cf.ThreadPoolExecutor(writers) as pool:
        futures = [pool.submit(writer, w) for w in range(writers)]
        enough.wait(300)
        srv.kill()
        for f in futures:
            f.result()
    srv.start()
    with srv.client() as c:
        for method, path, body in cut:  # a client's retry of what it was never answered
            resp = c.request(method, path, json=body or None)
            if resp.status_code not in (200, 201):
                raise RuntimeError(f"resent {method} {path}: {resp.status_code} {resp.text[:200]}")
            if method == "POST":
                expected[resp.json()["id"]] = body["content"]
            else:
                expected[path.rsplit("/", 1)[1]] = body.get("content")
        stored = {m["id"]: m for m in all_memories(c, ns)}
        lost = [mid for mid in expected if mid not in stored]
        contents = [m["content"] for m in stored.values() if m["valid"]]
        duplicated = len(contents) - len(set(contents))
        wrong, unfindable = 0, 0
        for mid, text in expected.items():
            if mid not in stored:
                continue
            if text is None:
                wrong += stored[mid]["valid"]
                continue
            wrong += stored[mid]["content"] != text
            hits = c.post("/v1/search", json={"namespace": ns, "query": text, "k": 5}).json()["results"]
            unfindable += mid not in [h["memory_id"] for h in hits]
    return {"acknowledged": acked[0], "resent": len(cut), "lost": len(lost), "duplicated": duplicated,
            "wrong": wrong, "unfindable": unfindable}


def serve_kills(tmp: Path, bundle: Path, rounds: int, writers: int = 6, kill_after: int = 60) -> list[Outcome]:
    store = tmp / "killed-store"
    srv = Server(bundle, store, "--rate", "1000000", "--burst", "1000000").start()
    out = []
    try:
        for r in range(rounds):
            got = serve_round(srv, r, writers, kill_after)
            bad = {k: v for k, v in got.items() if k in ("lost", "duplicated", "wrong", "unfindable") and v}
            out.append(Outcome("kills", f"serve SIGKILL round {r + 1}", "0 lost/duplicated/unfindable",
                               ", ".join(f"{k} {v}" for k, v in got.items()), not bad))
    finally:
        srv.stop()
    ok, said = store_check(store)
    out.append(Outcome("kills", "serve: store check after the rounds", "check exit 0", said, ok))
    return out


def ingest_kills(tmp: Path, rounds: int, n: int = 1500, seed: int = 0) -> list[Outcome]:
    """``lab ingest`` killed at a random moment, then run again to the end: every memory once."""
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        store = tmp / f"ingest-store-{r}"
        data = tmp / f"ingest-{r}.jsonl"
        data.write_text("".join(json.dumps({"content": f"ingested memory {i} of round {r} token t{i}x{r}"}) + "\n"
                                for i in range(n)))
        subprocess.run([*LAB, "init", "--store", str(store), "--model", "fake-hash-256"], check=True,
                       capture_output=True, cwd=ROOT)
        cmd = [*LAB, "ingest", str(data), "--store", str(store), "--namespace", "ing"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        time.sleep(rng.uniform(1.0, 3.0))  # past the imports, into the batches
        proc.kill()
        proc.wait()
        again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        from lab.store.store import Store

        mem = Store.open(store, read_only=True).memories("ing")
        dup = mem.height - mem["content"].n_unique()
        ok, said = store_check(store)
        good = again.returncode == 0 and mem.height == n and dup == 0 and ok
        out.append(Outcome("kills", f"ingest SIGKILL round {r + 1}", f"{n} memories once, check clean",
                           f"rerun exit {again.returncode}, {mem.height} stored, {dup} duplicated; {said}", good))
    return out


def two_writers(tmp: Path, bundle: Path, n_http: int = 120, n_cli: int = 600) -> list[Outcome]:
    """A server and a `lab ingest` process writing one namespace at once."""
    store = tmp / "two-writers"
    srv = Server(bundle, store, "--rate", "1000000", "--burst", "1000000").start()
    data = tmp / "cli.jsonl"
    data.write_text("".join(json.dumps({"content": f"from the command line {i} token c{i}"}) + "\n"
                            for i in range(n_cli)))
    try:
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "shared"})
        cli = subprocess.Popen([*LAB, "ingest", str(data), "--store", str(store), "--namespace", "shared"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)

        def post(i: int) -> int:
            with srv.client(timeout=120) as c:
                return c.post("/v1/memories", json={"namespace": "shared",
                                                    "content": f"from the server {i} token s{i}"}).status_code

        with cf.ThreadPoolExecutor(4) as pool:
            codes = list(pool.map(post, range(n_http)))
        _, err = cli.communicate(timeout=600)
        time.sleep(1.5)  # the server sees the other process's commits within refresh_seconds
        with srv.client() as c:
            contents = [m["content"] for m in all_memories(c, "shared")]
            probe = c.post("/v1/search", json={"namespace": "shared", "query": "from the command line 7 token c7"})
            found = any(h["memory_id"] and "c7" in h["content"] for h in probe.json()["results"][:3])
    finally:
        srv.stop()
    ok, said = store_check(store)
    good = (codes.count(201) == n_http and cli.returncode == 0 and len(contents) == n_http + n_cli
            and len(set(contents)) == len(contents) and found and ok)
    return [Outcome("writers", "server + lab ingest on one namespace", f"{n_http + n_cli} memories once, found",
                    f"http 201 x{codes.count(201)}, cli exit {cli.returncode}, {len(contents)} stored, "
                    f"{len(contents) - len(set(contents))} duplicated, CLI memory found by the server: {found}; {said}"
                    + (f"; cli: {err.strip()[-200:]}" if cli.returncode else ""), good)]
