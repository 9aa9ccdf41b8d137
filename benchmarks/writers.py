"""Saves per second with one writer and with two writer processes on one store (fake embedder, so
the figure is the store's and the lock's, not the model's), and reads per second beside them.

    .venv/bin/python benchmarks/writers.py [--seconds 20] [--preload 2000]

Each writer saves one memory per call (the server's and a notebook's pattern) into its own and a
shared namespace for ``--seconds``; the store starts with ``--preload`` memories so that reloading
whole tables after another writer's commit would show. Results land in benchmarks/results/writers.json.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from _common import report

WRITER = textwrap.dedent("""
    import sys, time
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    store, name, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
    pipe = Pipeline.open(store, embedder=FakeEmbedder())
    pipe.search("warm", "shared", k=1)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        ns = "shared" if n % 2 else name
        pipe.save(f"{name} writes memory number {n} about topic {n % 17}", namespace=ns)
        n += 1
    pipe.close()
    print(n)
""")


def run_writers(store: Path, names: list[str], seconds: float) -> list[int]:
    procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), name, str(seconds)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for name in names]
    counts = []
    for p in procs:
        out, err = p.communicate(timeout=seconds * 20 + 300)
        if p.returncode != 0:
            raise SystemExit(f"writer failed:\n{err[-3000:]}")
        counts.append(int(out.split()[-1]))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--preload", type=int, default=2000)
    args = ap.parse_args()
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    results = {"seconds_per_run": args.seconds, "preloaded_memories": args.preload}
    with tempfile.TemporaryDirectory() as tmp:
        for label, names in (("one_writer", ["alpha"]), ("two_writers", ["alpha", "beta"])):
            store = Path(tmp) / label
            with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as pipe:
                pipe.save_many([{"namespace": "shared", "content": f"preloaded memory {i} on subject {i % 31}"}
                                for i in range(args.preload)], progress=False)
            counts = run_writers(store, names, args.seconds)
            results[label] = {"saves": counts, "saves_per_second_total": round(sum(counts) / args.seconds, 1),
                              "saves_per_second_per_writer": [round(c / args.seconds, 1) for c in counts]}
            with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
                mem = pipe.store.memories()
                results[label]["stored"] = mem.height - args.preload
                results[label]["duplicates_stored"] = int(mem.select("namespace", "content").is_duplicated().sum())
    report("writers", results)


if __name__ == "__main__":
    main()
