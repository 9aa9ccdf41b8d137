"""schemathesis over every operation of the served OpenAPI document (`lab serve` with the chat
proxy on, so its route is in the document): no 5xx, every status, content type and response body
as documented. One case per operation (from schemathesis's JUnit report), one that the document's
operations were all tested, and the server log. The short form runs the fuzzing phase with a few
examples per operation; the full form every phase with more, and again with auth on."""
from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx

from outcome import Outcome
from raw_upstream import RawUpstream
from servers import ENV, Bundles, server

from lab.serve.auth import add_key

G = "schema"
CHECKS = "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance"
METHODS = ("get", "put", "post", "patch", "delete")


def schemathesis(document: str, work: Path, name: str, short: bool, extra: list[str]) -> tuple[int, Path, str]:
    """(exit code, JUnit report, the run's last lines) of one schemathesis run."""
    exe = str(Path(sys.executable).with_name("schemathesis"))
    report = work / f"schema-{name}.xml"
    bounded = ["--phases", "examples,fuzzing", "--max-examples", "3"] if short else ["--max-examples", "25"]
    got = subprocess.run([exe, "run", document, *bounded, "--generation-deterministic", "--checks", CHECKS,
                          "--suppress-health-check", "all", "--request-timeout", "30", "--no-color",
                          "--report", "junit", "--report-junit-path", str(report), *extra],
                         capture_output=True, text=True, timeout=1800, cwd=work, env=ENV)
    return got.returncode, report, (got.stdout[-1500:] + got.stderr[-500:]).strip()


def per_operation(report: Path, label: str) -> tuple[list[Outcome], set[str]]:
    """One outcome per operation of a JUnit report (a failure names its first problem)."""
    out, seen = [], set()
    if not report.exists():
        return [Outcome(G, f"{label}: JUnit report", "written", "missing", False)], seen
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "?")
        seen.add(name)
        problems = [p for tag in ("failure", "error") for p in case.findall(tag)]
        said = "; ".join(((p.get("message") or "") + " " + (p.text or "")).strip().splitlines()[0][:200]
                         for p in problems) if problems else "no problem found"
        out.append(Outcome(G, f"{label}: {name}", "no 5xx; status, type and body as documented", said, not problems))
    return out, seen


def documented(doc: dict[str, Any]) -> set[str]:
    return {f"{m.upper()} {path}" for path, ops in doc.get("paths", {}).items() for m in ops if m in METHODS}


def coverage(label: str, doc: dict[str, Any], seen: set[str], code: int, tail: str) -> Outcome:
    missing = sorted(documented(doc) - seen)
    has_proxy = "POST /v1/chat/completions" in documented(doc)
    return Outcome(G, f"{label}: every operation of the document tested", "all, the chat route included; exit 0",
                   f"{len(documented(doc))} documented, {len(seen & documented(doc))} tested, missing {missing[:5]}; "
                   f"chat route documented {has_proxy}; exit {code}" + ("" if code == 0 else f": {tail[-300:]}"),
                   not missing and has_proxy and code == 0)


def seed(srv: Any, key: str | None) -> None:
    with srv.client(key) as c:
        c.post("/v1/namespaces", json={"name": "fuzz"})
        for text in ("Priya owns the billing service", "the deploy runs on Fridays", "Rosa plays the violin"):
            c.post("/v1/memories", json={"namespace": "fuzz", "content": text})


def cases(work: Path, bundles: Bundles, short: bool, seed_: int) -> list[Outcome]:
    out: list[Outcome] = []
    with RawUpstream() as up:
        srv = server(bundles.fake, work / "schema-store", "--proxy-upstream", f"{up.url}/v1",
                     "--rate", "100000", "--burst", "100000").start()
        try:
            seed(srv, None)
            doc = httpx.get(srv.url + "/openapi.json", timeout=30).json()
            code, report, tail = schemathesis(f"{srv.url}/openapi.json", work, "open", short,
                                              ["-H", "X-Lab-Namespace: fuzz"])
            found, seen = per_operation(report, "auth off")
            out += found
            out.append(coverage("auth off", doc, seen, code, tail))
            out.append(Outcome(G, "auth off: the chat route reached the upstream", "at least one forwarded request",
                               f"{len(up.received)} upstream requests", len(up.received) > 0))
        finally:
            srv.stop()
        out.append(log_case("auth off", srv.log()))
        if not short:
            out += guarded(work, bundles, up)
    return out


def guarded(work: Path, bundles: Bundles, up: RawUpstream) -> list[Outcome]:
    """The same with auth on: the document is behind a key, and so is every request."""
    keys = work / "schema-keys.yaml"
    key = add_key(keys, "fuzzer", "write", ["*"])
    srv = server(bundles.fake, work / "schema-store-auth", "--auth", "on", "--keys-file", str(keys),
                 "--proxy-upstream", f"{up.url}/v1", "--rate", "100000", "--burst", "100000").start()
    out: list[Outcome] = []
    try:
        seed(srv, key)
        doc = httpx.get(srv.url + "/openapi.json", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
        path = work / "schema-auth-openapi.json"
        path.write_text(json.dumps(doc), encoding="utf-8")
        code, report, tail = schemathesis(str(path), work, "auth", False,
                                          ["--url", srv.url, "-H", f"X-API-Key: {key}", "-H", "X-Lab-Namespace: fuzz"])
        found, seen = per_operation(report, "auth on")
        out += found
        out.append(coverage("auth on", doc, seen, code, tail))
    finally:
        srv.stop()
    out.append(log_case("auth on", srv.log(), key))
    return out


def log_case(label: str, log: str, key: str | None = None) -> Outcome:
    leaked = bool(key) and key in log
    return Outcome(G, f"{label}: server log", "no Traceback, no key", f"Traceback x{log.count('Traceback')}; key "
                   f"{'FOUND' if leaked else 'absent'}", "Traceback" not in log and not leaked)
