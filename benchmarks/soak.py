"""SIGKILL soak: writers killed at random moments during saves, compaction and index saves; after
every round the store must check clean (after a repair if needed) and every acknowledged save
must be stored and found by its own text.

    .venv/bin/python benchmarks/soak.py [--rounds 20] [--seed 7]

A writer prints each id once its save has returned (acknowledged). Each round starts one or two
writers (two writers contend for the lock), kills one after a random delay, lets the other finish,
and checks. Reports acknowledged writes lost (target 0), stores that needed a repair, and rounds.
Results land in benchmarks/results/soak.json.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import polars as pl

from _common import report

WRITER = textwrap.dedent("""
    import json, sys
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    store, name, n, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    pipe = Pipeline.open(store, embedder=FakeEmbedder())
    pipe.search("warm", "soak", k=1)
    for i in range(n):
        if mode == "bulk" and i % 10 == 0:
            recs = [{"namespace": "soak", "content": f"{name} bulk {i} item {j}"} for j in range(40)]
            report = pipe.save_many(recs, progress=False)
            for rec, mid in zip(recs, report.created):
                print(json.dumps([rec["content"], mid]), flush=True)
            continue
        content = f"{name} memory {i} on topic {i % 13}"
        report = pipe.save(content, namespace="soak" if i % 2 else name)
        print(json.dumps([content, (report.created or report.duplicates)[0]]), flush=True)
        if mode == "compact" and i % 15 == 14:
            pipe.compact()
        if i % 9 == 8:
            pipe.writer.flush()  # index snapshots saved mid-run
    pipe.close()
""")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    from lab.write.check import check_store

    rng = random.Random(args.seed)
    acked: dict[str, str] = {}  # acknowledged id -> its content
    lost_total, repaired, unclean, kills = 0, 0, 0, 0
    rounds = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "s"
        with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as pipe:
            pipe.save("seed", namespace="soak")
        for r in range(args.rounds):
            mode = rng.choice(["save", "bulk", "compact"])
            n_writers = rng.choice([1, 2])
            procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), f"w{r}x{w}", "60", mode],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                     for w in range(n_writers)]
            time.sleep(rng.uniform(1.5, 6.0))
            victim = procs[0]
            if victim.poll() is None:
                os.kill(victim.pid, signal.SIGKILL)
                kills += 1
            for p in procs:
                out, _ = p.communicate(timeout=600)
                for line in out.splitlines():
                    try:
                        content, mid = json.loads(line)
                    except ValueError:
                        continue  # a line cut by the kill was never acknowledged
                    acked[mid] = content
            report_ = check_store(store)
            needed_repair = bool(report_.errors)
            if needed_repair:
                unclean += 1
                with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
                    pipe.repair()
                repaired += 1
            with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
                mem = pipe.store.memories()
                ids = dict(zip(mem["id"].to_list(), mem["namespace"].to_list()))
                lost = [m for m in acked if m not in ids]
                dupes = int(mem.select("namespace", "content").is_duplicated().sum())
                # findable: every stored memory has its chunks live in its namespace's index (the
                # snapshot as loaded, caught up with the store)
                unindexed = 0
                for ns in pipe.store.namespaces():
                    idx = pipe.index(ns)
                    live = {m for m, alive in zip(idx.memory_of, idx.live) if alive}
                    unindexed += len(set(mem.filter(pl.col("namespace") == ns)["id"].to_list()) - live)
                sample = rng.sample(sorted(acked), min(25, len(acked)))
                unfound = [m for m in sample if m in ids
                           and m not in [h.memory_id for h in pipe.search(acked[m], ids[m], k=10)]]
            lost_total = len(lost)
            rounds.append({"round": r, "mode": mode, "writers": n_writers, "acknowledged_total": len(acked),
                           "lost": len(lost), "duplicates": dupes, "not_in_index": unindexed,
                           "sample_not_in_top10_of_25": len(unfound),
                           "needed_repair": needed_repair})
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    report("soak", {"rounds": args.rounds, "seed": args.seed, "kills": kills,
                    "acknowledged_saves": len(acked), "acknowledged_lost": lost_total,
                    "rounds_with_duplicates": sum(1 for x in rounds if x["duplicates"]),
                    "rounds_with_memories_missing_from_index": sum(1 for x in rounds if x["not_in_index"]),
                    "rounds_with_a_sample_not_in_top10": sum(1 for x in rounds if x["sample_not_in_top10_of_25"]),
                    "stores_needing_repair": unclean, "repairs": repaired,
                    "seconds": round(time.perf_counter() - started, 1), "per_round": rounds})


if __name__ == "__main__":
    main()
