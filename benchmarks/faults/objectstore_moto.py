"""The full form's cases of the ``objectstore`` group (group_objectstore.py) that need processes:
moto's S3 server on loopback behind a gate that refuses connections on demand (tests/moto_store.py),
and a SIGKILL of `lab serve` during the snapshot upload of its shutdown."""
from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

from events import sigkill
from objectstore_kill import G, after_kill, one_line, upload_started, wait_for
from outcome import Outcome, status
from servers import FaultServer, lab


def planted_cases(moto: Any, work: Path) -> list[Outcome]:
    """Keys with '//' (an absolute path), '../' and './' under a snapshot folder in the bucket."""
    from moto_store import aws_env

    moto.bucket("planted")
    uri, env = "s3://planted/st", {**aws_env(moto.url), "LAB_STORE_CACHE": str(work / "planted-a")}
    (work / "p.jsonl").write_text("".join(json.dumps({"content": f"planted store memory {i} word w{i}"}) + "\n"
                                          for i in range(40)))
    lab("init", "--store", uri, "--model", "fake-hash-256", env=env).check_returncode()
    lab("ingest", str(work / "p.jsonl"), "--store", uri, "--namespace", "ns", "--quiet", env=env).check_returncode()
    s3, folder = moto.client(), "st/indexes/ns"
    absolute, climbed = work / "planted-absolute.txt", work / "planted-climb.txt"
    s3.put_object(Bucket="planted", Key=f"{folder}/{absolute}", Body=b"x")
    s3.put_object(Bucket="planted", Key=f"{folder}/" + "../" * 14 + str(climbed).lstrip("/"), Body=b"y")
    s3.put_object(Bucket="planted", Key=f"{folder}/./dot.bin", Body=b"z")
    manifest = s3.get_object(Bucket="planted", Key=f"{folder}/manifest.json")["Body"].read()
    s3.put_object(Bucket="planted", Key=f"{folder}/manifest.json", Body=manifest + b" ")  # newer: readers fetch
    got = lab("search", "planted store memory 7 word w7", "--store", uri, "--namespace", "ns", "-k", "1",
              env={**env, "LAB_STORE_CACHE": str(work / "planted-b")})
    said = [line for line in got.stderr.splitlines() if line.strip()]
    return [
        Outcome(G, "s3: keys '//ABS', '../'x14 and './' planted under a snapshot; a reader searches",
                "exit 0, finds it", f"exit {got.returncode}; found {'word w7' in got.stdout}",
                got.returncode == 0 and "word w7" in got.stdout and "Traceback" not in got.stderr),
        Outcome(G, "s3: planted keys: nothing written outside the working folder", "no file outside",
                f"absolute {absolute.exists()}, climbed {climbed.exists()}, dot.bin "
                f"{any(p.name == 'dot.bin' for p in (work / 'planted-b').rglob('*'))}",
                not absolute.exists() and not climbed.exists() and not any(p.name == "dot.bin" for p in (work / "planted-b").rglob("*"))),
        Outcome(G, "s3: planted keys: one log line naming the store and the count; the snapshot used",
                "1 line '3 object(s) ... skipped', no rebuild", f"{said[:2]}"[:300],
                len(said) == 1 and "store s3://planted/st: 3 object(s) under indexes/ns skipped" in said[0]),
    ]


def unreachable_cases(moto: Any, gate: Any, work: Path, secret: str) -> list[Outcome]:
    from moto_store import aws_env

    moto.bucket("gone")
    env = {**aws_env(gate.url), "AWS_SECRET_ACCESS_KEY": secret, "LAB_STORE_CACHE": str(work / "gone-cache")}
    lab("init", "--store", "s3://gone/st", "--model", "fake-hash-256", env=env).check_returncode()
    (work / "g.jsonl").write_text(json.dumps({"content": "written while the store is gone"}) + "\n")
    gate.shut()
    out = []
    for what, store, args in (("stats", "s3://gone/st", ("stats",)),
                              ("search", "s3://gone/st", ("search", "x", "--namespace", "n")),
                              ("ingest", "s3://gone/st", ("ingest", str(work / "g.jsonl"), "--namespace", "n")),
                              ("init of another prefix", "s3://gone/other", ("init", "--model", "fake-hash-256"))):
        ok, seen = one_line(lab(*args, "--store", store, env=env), f"error: store {store} is unreachable (")
        out.append(Outcome(G, f"s3 unreachable: lab {what}", "exit 5, one line naming the store, no secret", seen, ok))
    options = json.dumps({"aws_secret_access_key": secret, "aws_endpoint_url": gate.url})
    ok, seen = one_line(lab("stats", "--store", "s3://gone/st", env={**env, "LAB_STORAGE_OPTIONS": options}),
                        "is unreachable")
    out.append(Outcome(G, "s3 unreachable, the secret in LAB_STORAGE_OPTIONS", "exit 5, one line, no secret", seen, ok))
    gate.open()
    return out


def served_outage_cases(bundles: Any, moto: Any, gate: Any, work: Path, secret: str) -> list[Outcome]:
    """`lab serve` on an s3 store; the gate shut (connections refused), then opened again."""
    from moto_store import aws_env

    moto.bucket("served")
    env = {**aws_env(gate.url), "LAB_STORE_CACHE": str(work / "served-cache"),
           "LAB_STORAGE_OPTIONS": json.dumps({"aws_secret_access_key": secret})}
    srv = FaultServer(bundles.fake, "s3://served/st", env=env, log=work / "served.log")
    out, hidden = [], (secret, "served/st", gate.url.split("//")[1])
    search = {"namespace": "n", "query": "served memory 3 word w3", "k": 1}
    try:
        srv.start()
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "n"})
            acked = sum(c.post("/v1/memories", json={"namespace": "n", "content": f"served memory {i} word w{i}"}).status_code
                        == 201 for i in range(10))
            gate.shut()
            time.sleep(1.5)  # past the server's refresh_seconds: the next read looks at the store
            for method, path, body in (("POST", "/v1/search", search), ("GET", "/v1/namespaces/n/stats", None),
                                       ("POST", "/v1/memories", {"namespace": "n", "content": "during the outage"}),
                                       ("POST", "/v1/namespaces", {"name": "m"})):
                out.append(status(G, f"s3 gone: {method} {path}", c.request(method, path, json=body, timeout=120), {503},
                                  "store is unreachable", code="unavailable", absent=hidden))
            out.append(status(G, "s3 gone: GET /ready", c.get("/ready"), {503}, "unreachable", absent=hidden))
            health = c.get("/health")
            out.append(Outcome(G, "s3 gone: GET /health (liveness)", "200", str(health.status_code), health.status_code == 200))
            gate.open()
            hits = c.post("/v1/search", json=search)
            found = hits.status_code == 200 and "word w3" in hits.text
            ready = c.get("/ready").status_code
            count = c.get("/v1/namespaces/n/stats").json().get("memories")
            out.append(Outcome(G, "s3 back: search, /ready, the acknowledged writes", f"200 finds it, 200, {acked} memories",
                               f"search {hits.status_code} found {found}, ready {ready}, {count} memories",
                               found and ready == 200 and count == acked == 10))
    finally:
        srv.stop()
        gate.open()
    log = srv.log()
    out.append(Outcome(G, "s3 outage: the server's log", "no traceback, no secret, a line naming the store",
                       f"tracebacks {log.count('Traceback')}, secret {secret in log}, "
                       f"named {'store s3://served/st is unreachable' in log}",
                       "Traceback" not in log and secret not in log and "store s3://served/st is unreachable" in log))
    return out


def serve_upload_kill(bundles: Any, work: Path) -> list[Outcome]:
    """SIGTERM a server on a file:// store after acknowledged writes, SIGKILL it once the upload of
    its closing snapshot has begun."""
    root = work / "served-kill" / "st"
    cache = {"LAB_STORE_CACHE": str(work / "served-kill-cache")}
    srv = FaultServer(bundles.fake, root.as_uri(), env=cache, log=work / "served-kill.log")
    texts = [f"served kill memory {i} about subject {i % 11} tag k{i}" for i in range(300)]
    try:
        srv.start()
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "ing"})
            acked = [t for t in texts if c.post("/v1/memories", json={"namespace": "ing", "content": t}).status_code == 201]
        srv.proc.send_signal(signal.SIGTERM)
        seen = wait_for(upload_started(root / "indexes" / "ing"), srv.proc)
        alive = sigkill(srv.proc)
    finally:
        srv.stop()
    out = [Outcome(G, "SIGKILL of lab serve during its closing snapshot upload (file://)", "killed mid-upload",
                   f"{len(acked)} acked; upload seen {seen}; {'running at the kill' if alive else 'ALREADY EXITED'}",
                   seen and alive and len(acked) == len(texts))]
    return out + after_kill(root.as_uri(), work, "server killed mid-upload", [acked[i] for i in (0, 150, 299)],
                            len(acked), cache)


def moto_cases(work: Path, bundles: Any, secret: str) -> list[Outcome]:
    from moto_store import Gate, Moto

    started = time.perf_counter()

    def timed(part: str, got: list[Outcome]) -> list[Outcome]:
        print(f"    objectstore {part}: {len(got)} cases, {time.perf_counter() - started:.0f} s", flush=True)
        return got

    out = timed("server killed mid-upload", serve_upload_kill(bundles, work))
    with Moto() as moto:
        gate = Gate(moto.port).open()
        try:
            out += timed("planted keys", planted_cases(moto, work))
            out += timed("unreachable (CLI)", unreachable_cases(moto, gate, work, secret))
            out += timed("unreachable (server)", served_outage_cases(bundles, moto, gate, work, secret))
        finally:
            gate.shut()
    return out
