"""Fault group ``objectstore``: stores at a URI (file://, and s3:// on moto's server on loopback).

Short form (no moto): refused storage options and store URIs (the secret never echoed), snapshot
keys that would leave their folder, a snapshot copy damaged here, missing at the URI or carrying a
stray object, and a SIGKILL of `lab ingest` during its snapshot upload. Full form adds moto: keys
planted under a snapshot folder in a bucket, the CLI and a server while the object store refuses
connections (and after it is back), and a SIGKILL of `lab serve` during its closing snapshot upload.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from events import sigkill
from outcome import Outcome, refused
from objectstore_kill import G, SECRET, after_kill, upload_started, wait_for
from servers import ENV, LAB, lab

from serving import ROOT

RECORDS = [{"namespace": "n", "content": f"memory {i}: the {w} report is due on day {i}"}
           for i, w in enumerate(["budget", "travel", "garden", "violin", "mortgage", "marathon"] * 4)]


@contextmanager
def logged(*names: str) -> Iterator[list[str]]:
    """The log lines of the ``names`` loggers while the block runs (warnings and above)."""
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    handler = Keep(logging.WARNING)
    loggers = [logging.getLogger(n) for n in names]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        yield lines
    finally:
        for lg in loggers:
            lg.removeHandler(handler)


def refusal_cases() -> list[Outcome]:
    from lab.store.location import inside, locate
    from lab.workspace import Workspace

    out = []
    for text, names in (('{"aws_secret_access_key": "%s", "x": [1]}' % SECRET, "'x' (an array)"),
                        ('{"aws_secret_access_key": "%s", "aws_region": null}' % SECRET, "'aws_region' (null)"),
                        ('{"aws_secret_access_key": "%s"' % SECRET, "not JSON at line 1"),
                        ('"%s"' % SECRET, "got a string")):
        case = refused(G, f"LAB_STORAGE_OPTIONS {text.replace(SECRET, 'SECRET')[:60]}",
                       lambda t=text: Workspace.resolve({"LAB_STORAGE_OPTIONS": t}), names)
        case.ok = case.ok and SECRET not in case.observed
        out.append(case)
    for uri in (f"s3://AKIA:{SECRET}@bucket/st", f"s3://{SECRET}@bucket/st", f"s3://bucket/st?token={SECRET}"):
        case = refused(G, f"store URI {uri.replace(SECRET, 'SECRET')}", lambda u=uri: locate(u, Path("/nonexistent")),
                       "credentials or a query in a store URI are refused")
        case.ok = case.ok and SECRET not in case.observed
        out.append(case)
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"objectstore-inside-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    for key in ("/etc/passwd", "a//b", "../../x", "a/../../x", "./a", "a\\..\\b", "a\x00b"):
        got = inside(folder, key)
        out.append(Outcome(G, f"snapshot key {key!r}: placed inside the folder or skipped", "skipped",
                           "skipped" if got is None else f"PLACED at {got}", got is None))
    shutil.rmtree(folder, ignore_errors=True)
    return out


def file_store_cases(work: Path) -> list[Outcome]:
    """A file:// store: a copy damaged here, a snapshot missing at the URI, a stray object in it."""
    from lab import workspace
    from lab.embed.fake import FakeEmbedder
    from lab.index.snapshot import IndexDamaged, verify
    from lab.pipeline import Pipeline
    from lab.retriever import Retriever
    from lab.store.settings import StoreSettings

    at_uri, out = work / "bucket" / "st", []
    uri, before = at_uri.as_uri(), workspace.current()
    snap = at_uri / "indexes" / "n"

    def read(folder: str) -> tuple[bool, list[str]]:
        on = StoreSettings(work / folder)
        with logged("lab.index.manager", "lab.store.location") as lines:
            with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
                hit = far.search(RECORDS[5]["content"], "n", k=1)[0].content == RECORDS[5]["content"]
        return hit, lines

    def shared() -> str:
        try:
            return f"at the URI, {verify(snap, 'n')['n_labels']} labels"
        except IndexDamaged as exc:
            return f"DAMAGED at the URI: {exc}"

    try:
        writer = StoreSettings(work / "writer")
        with Pipeline.open(uri, embedder=FakeEmbedder(), create=True, settings=writer) as pipe:
            pipe.save_many(RECORDS, progress=False)
        read("reader")
        copy = next((work / "reader").glob("file-*")) / "indexes" / "n"
        (copy / "labels.parquet").write_bytes(b"damaged on this machine")
        hit, lines = read("reader")
        out.append(Outcome(G, "file://: a snapshot copy damaged here (the URI's intact)", "fetched again, no rebuild",
                           f"found {hit}; log {lines[:2]}", hit and not lines))
        (snap / "stray.bin").write_bytes(b"an object nobody saved")
        hit, lines = read("fresh-reader")
        rebuilt = any("failed verification" in line and "stray.bin" in line for line in lines)
        out.append(Outcome(G, "file://: a stray object in the snapshot at the URI", "rebuilt from the store, one warning",
                           f"found {hit}; log {[line[:140] for line in lines[:2]]}", hit and rebuilt and len(lines) == 1))
        writer = StoreSettings(work / "writer")
        with Pipeline.open(uri, embedder=FakeEmbedder(), settings=writer) as pipe:
            pipe.save("the harp lesson moved to Thursday", "n")
        state = shared()
        out.append(Outcome(G, "file://: the next writer's upload replaces the bad snapshot", "verified, stray gone",
                           f"{state}; stray {'left' if (snap / 'stray.bin').exists() else 'gone'}",
                           state.startswith("at the URI") and not (snap / "stray.bin").exists()))
        (snap / "manifest.json").unlink()  # an upload cut off before its manifest
        with Pipeline.open(uri, embedder=FakeEmbedder(), settings=writer) as pipe:
            pipe.search("violin", "n", k=1)
        state = shared()
        out.append(Outcome(G, "file://: a snapshot missing at the URI, a writer opens and closes",
                           "uploaded again (verified)", state, state.startswith("at the URI")))
    finally:
        workspace.install(before)
    return out


def ingest_upload_kill(work: Path, n: int) -> list[Outcome]:
    """SIGKILL `lab ingest` into a file:// store once its snapshot upload has begun."""
    root = work / "killed" / "st"
    uri, cache = root.as_uri(), {"LAB_STORE_CACHE": str(work / "ingest-cache")}
    texts = [f"ingested memory {i} about subject {i % 17} tag t{i}" for i in range(n)]
    (work / "ing.jsonl").write_text("".join(json.dumps({"content": t}) + "\n" for t in texts))
    lab("init", "--store", uri, "--model", "fake-hash-256", env=cache).check_returncode()
    proc = subprocess.Popen([*LAB, "ingest", str(work / "ing.jsonl"), "--store", uri, "--namespace", "ing", "--quiet"],
                            cwd=ROOT, env={**ENV, **cache}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = wait_for(upload_started(root / "indexes" / "ing"), proc)
    alive = sigkill(proc)
    out = [Outcome(G, "SIGKILL of lab ingest during its snapshot upload (file://)", "killed mid-upload",
                   f"upload seen {seen}; {'running at the kill' if alive else f'ALREADY EXITED ({proc.returncode})'}",
                   seen and alive)]
    return out + after_kill(uri, work, "ingest killed mid-upload", [texts[i] for i in (0, n // 2, n - 1)], n, cache)


def cases(work: Path, bundles: Any, short: bool, seed: int) -> list[Outcome]:
    out = refusal_cases()
    out += file_store_cases(work)
    if not short:  # processes: seconds each
        out += ingest_upload_kill(work, 4000)
        from objectstore_moto import moto_cases

        out += moto_cases(work, bundles, SECRET)
    return out
