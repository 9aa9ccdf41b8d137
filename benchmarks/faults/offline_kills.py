"""SIGKILL of the store's command-line writers, each placed by an event seen on disk or on its
output: `lab ingest` once the n-th commit of a table has landed (or, with MiniLM, once it printed
that a batch was embedded), then run again to the end; `lab store compact` once its n-th commit
landed or its index save began, then run again. Each case says where its kill landed."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from events import CommitWatch, Lines, commit_event, folder_event, kill_when
from outcome import Outcome
from servers import ENV, LAB, check_case, lab

from serving import ROOT

ORPHANS = "orphan chunk row"
LEFTOVER = "left over from an interrupted save"
# (table, n): the kill waits for the n-th new commit of that table. An ingest commits the new
# namespace, then per batch of 512 its chunks, then its memories
INGEST_EVENTS = (("chunks", 1), ("memories", 1), ("namespaces", 1), ("chunks", 3), ("memories", 4), ("chunks", 6))


def contents(store: Path, namespace: str | None = None) -> dict[str, tuple[str, bool]]:
    """id -> (content, valid) of every memory, and the ids of memories with no visible chunk."""
    from lab.store.store import Store

    s = Store.open(store, read_only=True)
    mem = s.memories(namespace)
    return {r["id"]: (r["content"], r["valid"]) for r in mem.select("id", "content", "valid").iter_rows(named=True)}


def chunkless(store: Path) -> int:
    """Memories no visible chunk belongs to (unsearchable)."""
    from lab.store.store import Store

    s = Store.open(store, read_only=True)
    ids = set(s.memories()["id"].to_list())
    return len(ids - set(s.chunks()["memory_id"].to_list()))


def ingest_round(tmp: Path, r: int, n: int = 3000) -> list[Outcome]:
    store, data = tmp / f"ingest-store-{r}", tmp / f"ingest-{r}.jsonl"
    data.write_text("".join(json.dumps({"content": f"ingested memory {i} of round {r} token t{i}x{r}"}) + "\n"
                            for i in range(n)))
    lab("init", "--store", store, "--model", "fake-hash-256").check_returncode()
    table, k = INGEST_EVENTS[r % len(INGEST_EVENTS)]
    cmd = [*LAB, "ingest", str(data), "--store", str(store), "--namespace", "ing"]
    watch = CommitWatch(store)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
    kill = kill_when(proc, watch, f"{table} commit {k}", commit_event(watch, table, k))
    return after_ingest_kill(store, cmd, kill, watch, n, f"ingest SIGKILL round {r + 1}")


def after_ingest_kill(store: Path, cmd: list[str], kill: Any, watch: CommitWatch, n: int, label: str) -> list[Outcome]:
    """Check, run the ingest again to the end, count, check; compact when orphans were expected."""
    landed = watch.counts()
    window = landed["chunks"] > landed["memories"]  # a batch's chunks landed without its memories
    allowed, why = ((ORPHANS,), "the kill fell between a batch's chunks and memories commits") if window else ((), "")
    out = [check_case("kills", f"{label}: store check right after the kill", store, allowed, why)]
    again = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=ENV)
    mem = contents(store, "ing")
    texts = [c for c, _ in mem.values()]
    dup = len(texts) - len(set(texts))
    good = kill.alive and kill.seen and again.returncode == 0 and len(mem) == n and dup == 0
    out.insert(0, Outcome("kills", f"{label} ({kill.event})", f"killed while running, at the event; rerun: {n} once",
                          f"{kill.describe()}; rerun exit {again.returncode}, {len(mem)} stored, {dup} duplicated"
                          + (f"; {again.stderr.strip()[-160:]}" if again.returncode else ""), good))
    out.append(check_case("kills", f"{label}: store check after the rerun", store, allowed, why))
    if window:
        compacted = lab("store", "compact", "--store", store)
        case = check_case("kills", f"{label}: store check after compact", store)
        case.observed = f"compact exit {compacted.returncode}; {case.observed}"
        case.ok = case.ok and compacted.returncode == 0
        out.append(case)
    return out


def ingest_kills(tmp: Path, rounds: int) -> list[Outcome]:
    out = []
    for r in range(rounds):
        out += ingest_round(tmp, r)
    return out


def minilm_ingest_kill(tmp: Path, model: str, n: int = 1200) -> list[Outcome]:
    """`lab ingest` with MiniLM, piped, killed once it printed that texts were embedded (before
    any batch is committed); then run again."""
    store, data = tmp / "ingest-minilm", tmp / "ingest-minilm.jsonl"
    data.write_text("".join(json.dumps({"content": f"a note about the garden, number {i}, and what grew there"}) + "\n"
                            for i in range(n)))
    lab("init", "--store", store, "--model", model).check_returncode()
    cmd = [*LAB, "ingest", str(data), "--store", str(store), "--namespace", "ing"]
    watch = CommitWatch(store)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, env=ENV)
    lines = Lines(proc.stdout)
    kill = kill_when(proc, watch, "the first 'embedding:' progress line", lines.event("embedding:"), timeout=300)
    kill.event += f" ({next((ln for ln in lines.lines if 'embedding:' in ln), '-')!r})"
    return after_ingest_kill(store, cmd, kill, watch, n, "ingest (MiniLM) SIGKILL")


def compact_kills(tmp: Path, base: Path, rounds: int) -> list[Outcome]:
    """`lab store compact` on copies of ``base`` (a store many writes left in many small files),
    killed at a commit or when its index save begins; nothing may change but the file layout. A
    kill in an index save leaves its temporary folder (a warning until `lab store repair`)."""
    before = contents(base)
    events = [("memories commit 1", lambda w, s: commit_event(w, "memories", 1)),
              ("index save began", lambda w, s: folder_event(s / "indexes")),
              ("chunks commit 1", lambda w, s: commit_event(w, "chunks", 1)),
              ("namespaces commit 1", lambda w, s: commit_event(w, "namespaces", 1))]
    out = []
    for r in range(rounds):
        name, make = events[r % len(events)]
        store = tmp / f"compact-{r}"
        shutil.copytree(base, store)
        watch = CommitWatch(store)
        (store / "indexes").mkdir(exist_ok=True)
        fired = make(watch, store)  # before the process starts: what is there now is not the event
        proc = subprocess.Popen([*LAB, "store", "compact", "--store", str(store)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd=ROOT, env=ENV)
        kill = kill_when(proc, watch, name, fired)
        label = f"compact SIGKILL round {r + 1}"
        after = contents(store)
        lost = chunkless(store)
        same = after == before
        allowed, why = ((LEFTOVER,), "the kill cut an index save") if name == "index save began" else ((), "")
        out.append(Outcome("kills", f"{label} ({name})", "killed while running, at the event; every memory as it was, "
                           "each with its chunks", f"{kill.describe()}; memories {len(after)} of {len(before)}, "
                           f"{'identical' if same else 'CHANGED'}, {lost} without chunks", kill.alive and kill.seen
                           and same and lost == 0))
        out.append(check_case("kills", f"{label}: store check right after the kill", store, allowed, why))
        again = lab("store", "compact", "--store", store)
        case = check_case("kills", f"{label}: compact again, then store check", store, allowed, why)
        case.observed = f"compact exit {again.returncode}; {case.observed}; memories identical: {contents(store) == before}"
        case.ok = case.ok and again.returncode == 0 and contents(store) == before
        out.append(case)
        if allowed:
            mended = lab("store", "repair", "--store", store)
            case = check_case("kills", f"{label}: repair, then store check", store)
            case.observed = f"repair exit {mended.returncode}; {case.observed}"
            case.ok = case.ok and mended.returncode == 0 and contents(store) == before
            out.append(case)
    return out
