"""SIGKILL of `lab serve` while six writers create (one at a time and in batches), update, and
delete (soft and hard), at a seeded random moment placed by an observed event (so many
acknowledgements, so long after the first one, or the n-th commit of a table landing); then a
restart, every cut-off request resent, and the namespace checked against what each writer was
told. Also SIGKILL of the server's query-embedding worker while searches and writes run."""
from __future__ import annotations

import concurrent.futures as cf
import os
import random
import signal
import threading
import time
from pathlib import Path
from typing import Any

from events import CommitWatch, kill_when
from outcome import Outcome
from servers import check_case, store_check, worker_pids

from serving import Server

ORPHANS = "orphan chunk row"  # the warning a save cut between its chunks and memories commits leaves
OPS = ("create", "batch", "patch", "soft", "hard")
WEIGHTS = (45, 20, 15, 10, 10)


def all_memories(c: Any, ns: str) -> list[dict[str, Any]]:
    items, cursor = [], None
    while True:
        r = c.get("/v1/memories", params={"namespace": ns, "limit": 1000, **({"cursor": cursor} if cursor else {})})
        r.raise_for_status()
        items += r.json()["items"]
        cursor = r.json()["next_cursor"]
        if not cursor:
            return items


class Ledger:
    """What the writers were told, and the requests that got no answer."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[str, tuple[str, str | None]] = {}  # id -> (live | soft | hard, content)
        self.cut: list[tuple[str, str, str, Any, list[str]]] = []  # (op, method, path, body, texts)
        self.errors: list[str] = []
        self.acked = 0
        self.first_ack: float | None = None

    def told(self, op: str, resp: Any, path: str, texts: list[str]) -> None:
        with self.lock:
            if op in ("create", "batch"):
                got = [resp.json()] if op == "create" else resp.json()["memories"]
                for m, text in zip(got, texts):
                    self.state[m["id"]] = ("live", text)
            else:
                mid = path.split("/v1/memories/", 1)[1].split("?")[0]
                old = self.state[mid][1]
                self.state[mid] = {"patch": ("live", texts[0] if texts else old), "soft": ("soft", old),
                                   "hard": ("hard", None)}[op]
            self.acked += 1
            if self.first_ack is None:
                self.first_ack = time.monotonic()


def writer(srv: Server, ledger: Ledger, ns: str, tag: str, w: int, seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)
    mine: list[str] = []
    with srv.client(timeout=30) as c:
        for i in range(100_000):
            if stop.is_set():
                return
            op = rng.choices(OPS, WEIGHTS)[0]
            if op in ("patch", "soft", "hard") and len(mine) < 2:
                op = "create"
            texts: list[str] = []
            if op == "create":
                texts = [f"{tag} writer {w} note {i} about durable storage {w * 100_000 + i}"]
                call = ("POST", "/v1/memories", {"namespace": ns, "content": texts[0]})
            elif op == "batch":
                texts = [f"{tag} writer {w} batch {i} item {j} on group commits {w * 100_000 + i}x{j}"
                         for j in range(rng.randint(2, 5))]
                call = ("POST", "/v1/memories/batch", {"memories": [{"namespace": ns, "content": t} for t in texts]})
            elif op == "patch":
                target = rng.choice(mine)
                texts = [f"{tag} writer {w} note {i} revised edition {w * 100_000 + i}"]
                call = ("PATCH", f"/v1/memories/{target}", {"content": texts[0]})
            else:
                target = mine.pop(rng.randrange(len(mine)))
                call = ("DELETE", f"/v1/memories/{target}" + ("?hard=true" if op == "hard" else ""), None)
            try:
                resp = c.request(call[0], call[1], json=call[2])
            except Exception:  # the server is gone mid-request: resent after the restart
                with ledger.lock:
                    ledger.cut.append((op, *call, texts))
                return
            if resp.status_code not in (200, 201):
                with ledger.lock:
                    ledger.errors.append(f"{call[0]} {call[1]}: {resp.status_code} {resp.text[:120]}")
                return
            try:
                ledger.told(op, resp, call[1], texts)
                if op in ("create", "batch"):
                    mine += [m["id"] for m in ([resp.json()] if op == "create" else resp.json()["memories"])]
            except (ValueError, KeyError, TypeError) as exc:  # an answer not of the documented shape
                with ledger.lock:
                    ledger.errors.append(f"{call[0]} {call[1]}: {resp.status_code} answer {resp.text[:100]!r} ({exc!r})")
                return


def trigger(r: int, seed: int, ledger: Ledger, watch: CommitWatch) -> tuple[str, Any]:
    """This round's kill moment, seeded: (what it waits for, a test of whether it happened)."""
    rng = random.Random(seed * 7919 + r)
    kind = ("acks", "time", "commit")[r % 3]
    if kind == "acks":
        n = rng.randint(5, 150)
        return f"acknowledgement {n}", lambda: ledger.acked >= n
    if kind == "time":
        t = round(rng.uniform(0.05, 2.5), 3)
        return (f"{t} s after the first acknowledgement",
                lambda: ledger.first_ack is not None and time.monotonic() - ledger.first_ack >= t)
    table = rng.choice(("chunks", "memories"))
    k = rng.randint(2, 40)
    return f"{table} commit {k}", lambda: watch.counts()[table] >= k


def verify(srv: Server, ledger: Ledger, ns: str) -> dict[str, int]:
    """The namespace against the ledger, by listing and by searching each live memory."""
    with srv.client() as c:
        stored = {m["id"]: m for m in all_memories(c, ns)}
    state = ledger.state
    out = {"lost": 0, "resurrected": 0, "wrong": 0, "phantom": 0, "duplicated": 0, "unfindable": 0,
           "not_first_under_bm25": 0}
    for mid, (what, text) in state.items():
        m = stored.get(mid)
        if what == "hard":
            out["resurrected"] += m is not None
        elif m is None:
            out["lost"] += 1
        elif what == "soft":
            out["wrong"] += bool(m["valid"]) or m["content"] != text
        else:
            out["wrong"] += (not m["valid"]) or m["content"] != text
    out["phantom"] = len(set(stored) - set(state))
    contents = [m["content"] for m in stored.values()]
    out["duplicated"] = len(contents) - len(set(contents))
    live = sorted((mid, text) for mid, (what, text) in state.items() if what == "live" and mid in stored)

    def found(item: tuple[str, str]) -> bool:
        with srv.client() as c:
            for _ in range(20):
                r = c.post("/v1/search", json={"namespace": ns, "query": item[1], "k": 5})
                if r.status_code == 503:  # the query model restarting: the documented answer, retried
                    time.sleep(0.5)
                    continue
                return r.status_code == 200 and item[0] in [h["memory_id"] for h in r.json()["results"]]
        return False

    with cf.ThreadPoolExecutor(4) as pool:
        out["unfindable"] = sum(not ok for ok in pool.map(found, live))
    # the server answers with its one served configuration; under bm25 alone (the lexical side,
    # delta and merges included) a memory's own words must put it first, or tied with memories of
    # the same analysed words ("note 8" and "note 6" differ only in one-letter tokens, which BM25
    # drops): a reader of the same store
    from lab.config import LexicalIndexConfig
    from lab.index.lexical import LexicalAnalyzer
    from lab.retriever import Retriever

    words = LexicalAnalyzer(LexicalIndexConfig()).tokens

    def first_under_bm25(reader: Retriever, mid: str, text: str) -> bool:
        hits = reader.search(text, ns, k=max(len(live), 1), preset="bm25")
        ids = [h.memory_id for h in hits]
        if mid not in ids:
            return False
        own = sorted(words([text])[0])
        return all(sorted(w) == own for w in words([h.content for h in hits[:ids.index(mid)]]))

    with Retriever.open(srv.store) as reader:
        out["not_first_under_bm25"] = sum(not first_under_bm25(reader, mid, text) for mid, text in live)
    out["live"] = len(live)
    return out


def resend(srv: Server, ledger: Ledger) -> list[str]:
    """A client's retry of each request it was never answered."""
    problems = []
    with srv.client() as c:
        for op, method, path, body, texts in ledger.cut:
            resp = c.request(method, path, json=body)
            if op == "hard" and resp.status_code == 404:  # it had landed: gone either way
                mid = path.split("/v1/memories/", 1)[1].split("?")[0]
                ledger.state[mid] = ("hard", None)
                continue
            if resp.status_code not in (200, 201):
                problems.append(f"resent {method} {path}: {resp.status_code} {resp.text[:100]}")
                continue
            ledger.told(op, resp, path, texts)
    return problems


def searcher(srv: Server, ns: str, stop: threading.Event, answered: list[int]) -> None:
    """Searches beside the writers until the kill: each moves the namespace's view on by the saves
    since the last (lab.search.view_insert), so the kill lands among those moves too."""
    with srv.client(timeout=10) as c:
        i = 0
        while not stop.is_set():
            try:
                r = c.post("/v1/search", json={"namespace": ns, "query": f"durable storage note {i}", "k": 5})
            except Exception:  # the server was killed
                return
            answered[0] += r.status_code == 200
            i += 1


def serve_round(srv: Server, store: Path, r: int, seed: int, label: str, writers: int = 6) -> list[Outcome]:
    ns, tag = f"kill{r}", f"round {r}"
    with srv.client() as c:
        c.post("/v1/namespaces", json={"name": ns})
    ledger, stop = Ledger(), threading.Event()
    watch = CommitWatch(store)
    event, fired = trigger(r, seed, ledger, watch)
    searched = [0]
    with cf.ThreadPoolExecutor(writers + 1) as pool:
        futures = [pool.submit(writer, srv, ledger, ns, tag, w, seed * 1000 + r * 10 + w, stop) for w in range(writers)]
        futures.append(pool.submit(searcher, srv, ns, stop, searched))
        kill = kill_when(srv.proc, watch, event, fired, timeout=120)
        stop.set()
        for f in futures:
            f.result()
    acked_at_kill = ledger.acked
    cut = sorted({op for op, *_ in ledger.cut})
    why = "a write was in flight at the kill" if ledger.cut else ""
    allowed = (ORPHANS,) if ledger.cut else ()
    after_kill = check_case("kills", f"{label}: store check right after the kill", store, allowed, why)
    srv.start()
    problems = ledger.errors + resend(srv, ledger)
    got = verify(srv, ledger, ns)
    bad = {k: v for k, v in got.items() if k not in ("live",) and v}
    observed = (f"{kill.describe()}; {acked_at_kill} requests acknowledged, {searched[0]} searches answered beside "
                f"them, {len(ledger.cut)} cut ({', '.join(cut) or '-'}) "
                f"and resent; {got['live']} live memories checked: " + ", ".join(f"{k} {v}" for k, v in got.items() if k != "live")
                + (f"; {'; '.join(problems[:2])}" if problems else ""))
    return [Outcome("kills", f"{label} ({event})", "killed while running, at the event; 0 lost, duplicated, wrong, "
                    "resurrected, phantom, unfindable or not first under bm25", observed, kill.alive and kill.seen and not bad and not problems),
            after_kill,
            check_case("kills", f"{label}: store check after restart and resend", store, allowed, why)]


def serve_kills(tmp: Path, srv: Server, rounds: int, seed: int, label: str, first: int = 0) -> list[Outcome]:
    """``rounds`` kill rounds on the (started) server ``srv``, numbered from ``first`` (the round's
    number picks its kind of kill moment); the server is stopped at the end."""
    out = []
    try:
        for r in range(first, first + rounds):
            out += serve_round(srv, Path(srv.store), r, seed, f"{label} SIGKILL round {r + 1} (seed {seed})")
    finally:
        srv.stop()
    return out


def worker_kill(srv: Server, label: str, seed: int, searchers: int = 3, writers: int = 2) -> list[Outcome]:
    """SIGKILL the server's query-embedding process once searches have been answered by it, with
    writes going on; searches must come back (the server starts a new one) and no acknowledged
    write may be lost."""
    ns = "worker-kill"
    with srv.client() as c:
        c.post("/v1/namespaces", json={"name": ns})
    before = worker_pids(srv)
    ledger, stop = Ledger(), threading.Event()
    answers: dict[str, int] = {}
    lock = threading.Lock()
    recovered_at: list[float] = []
    killed_at: list[float] = []
    n_before = random.Random(seed).randint(10, 40)

    def searcher(s: int) -> None:
        with srv.client(timeout=60) as c:
            i = 0
            while not stop.is_set():
                i += 1
                sent = time.monotonic()
                r = c.post("/v1/search", json={"namespace": ns, "query": f"durable storage note {s} {i}", "k": 3})
                key = str(r.status_code) + ("" if r.status_code != 503 else " " + r.headers.get("retry-after", "-"))
                with lock:
                    answers[key] = answers.get(key, 0) + 1
                    if r.status_code == 200 and killed_at and sent > killed_at[0] and not recovered_at:
                        recovered_at.append(time.monotonic())

    with cf.ThreadPoolExecutor(searchers + writers) as pool:
        futures = [pool.submit(writer, srv, ledger, ns, "worker", w, seed + w, stop) for w in range(writers)]
        futures += [pool.submit(searcher, s) for s in range(searchers)]
        deadline = time.monotonic() + 60
        while answers.get("200", 0) < n_before and time.monotonic() < deadline:
            time.sleep(0.01)
        seen = answers.get("200", 0) >= n_before
        alive = False
        if before:  # the worker is the server's child, not ours: killed by its pid, if it still runs
            try:
                state = Path(f"/proc/{before[0][0]}/stat").read_text().rsplit(")", 1)[1].split()[0]
                os.kill(before[0][0], signal.SIGKILL)
                alive = state not in ("Z", "X")  # a zombie had exited already
            except (OSError, IndexError):
                alive = False
            killed_at.append(time.monotonic())
        deadline = time.monotonic() + 60
        while not recovered_at and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        for f in futures:
            f.result()
    after = worker_pids(srv)
    got = verify(srv, ledger, ns)
    recovery = f"{recovered_at[0] - killed_at[0]:.2f} s" if recovered_at and killed_at else "never"
    bad = {k: v for k, v in got.items() if k != "live" and v}
    log = srv.log()
    answered = ", ".join(f"{k} x{v}" for k, v in sorted(answers.items()))
    return [
        Outcome("kills", f"{label}: query worker SIGKILL, searches recover",
                "killed while running after its searches; a 200 again soon; only 200 or 503 with Retry-After",
                f"worker {before[0][0] if before else 'NOT FOUND'} killed after {answers.get('200', 0) if seen else 'too few'} "
                f"searches (target {n_before}), {'running at the kill' if alive else 'ALREADY GONE'}; searches "
                f"recovered after {recovery}; answers {answered}",
                bool(before) and alive and seen and bool(recovered_at)
                and all(k == "200" or (k.startswith("503 ") and k != "503 -") for k in answers)),
        Outcome("kills", f"{label}: query worker restarted", "a new worker process, the old one gone",
                f"before {[p for p, _ in before]}, after {[p for p, _ in after]}",
                bool(before) and bool(after) and before[0][0] not in [p for p, _ in after]),
        Outcome("kills", f"{label}: query worker SIGKILL, nothing acknowledged lost",
                "0 lost, duplicated, wrong, resurrected, phantom, unfindable or not first under bm25; no traceback",
                f"{ledger.acked} writes acknowledged, {got['live']} live checked: "
                + ", ".join(f"{k} {v}" for k, v in got.items() if k != "live")
                + f"; Traceback in log: {'Traceback' in log}",
                not bad and not ledger.errors and not ledger.cut and "Traceback" not in log),
    ]


def final_check(store: Path, label: str) -> Outcome:
    got = store_check(store)
    return Outcome("kills", label, "no error, no warning", got.said(), got.code == 0 and not got.unexpected())


