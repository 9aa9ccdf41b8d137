"""Ingest throughput on LoCoMo dev turns (cold and warm embedding cache) and single-save latency.

    .venv/bin/python benchmarks/ingest.py [--saves 200] [--store-size 10000]

Real model (all-MiniLM-L6-v2 on the CPU). Results go to stdout and benchmarks/results/ingest.json.
"""
from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, Timer, percentiles, report  # noqa: E402

from lab.eval.locomo import load_conversations  # noqa: E402
from lab import workspace  # noqa: E402
from lab.pipeline import Pipeline  # noqa: E402
from lab.store.settings import StoreSettings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--store-size", type=int, default=10_000)
    args = parser.parse_args()
    turns = [t for conv in load_conversations(DATASETS / "locomo" / "locomo10-dev.json") for t in conv.turns]
    results: dict = {"locomo_turns": len(turns)}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shared = StoreSettings.of(workspace.use(embed_cache=tmp / "cache"))  # one cache: the warm run finds the cold run's
        for label in ("cold", "warm"):
            pipe = Pipeline.open(tmp / f"store-{label}", create=True, settings=shared)
            pipe.embedder.embed(["warm up the model"])  # model load is not ingest time
            with Timer() as t:
                with Timer() as t_save:
                    rep = pipe.save_many(turns, progress=False)
                # closing flushes the embedding cache and saves the index snapshots the write made
                # (a reader then loads them instead of building; before, the first search built them)
                with Timer() as t_close:
                    pipe.close()
            results[f"ingest_{label}"] = {
                "memories": len(rep.created), "embedded": rep.embedded, "seconds": round(t.seconds, 2),
                "memories_per_s": round(len(rep.created) / t.seconds, 1),
                "save_s": round(t_save.seconds, 2), "close_s (cache flush + index snapshots)": round(t_close.seconds, 2),
            }
            print(label, results[f"ingest_{label}"], file=sys.stderr)

        # A store of --store-size memories: LoCoMo turns, then variants of them to reach the size.
        rng = random.Random(7)
        records = [dict(t, id=None) for t in turns]
        i = 0
        while len(records) < args.store_size:
            base = turns[i % len(turns)]
            records.append({**base, "id": None, "content": f"{base['content']} (note {i}, ref {rng.randrange(10**6)})"})
            i += 1
        for r in records:
            r.pop("id")
        pipe = Pipeline.open(tmp / "store-big", create=True, settings=shared)
        with Timer() as t:
            pipe.save_many(records[: args.store_size], progress=False)
        results["build_store"] = {"memories": args.store_size, "seconds": round(t.seconds, 1)}
        namespaces = sorted({r["namespace"] for r in records})
        for ns in namespaces:
            pipe.index(ns)  # indexes loaded, as in a serving process
        samples = []
        for n in range(args.saves):
            ns = namespaces[n % len(namespaces)]
            with Timer() as t:
                pipe.save(f"fresh memory {n}: the user mentioned plan {rng.randrange(10**9)} for the weekend",
                          namespace=ns)
            samples.append(t.seconds)
        results["single_save_into_store"] = {"store_memories": args.store_size, **percentiles(samples)}
        pipe.close()
    report("ingest", results)


if __name__ == "__main__":
    main()
