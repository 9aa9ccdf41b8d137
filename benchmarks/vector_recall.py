"""Vector recall of lab's hnswlib index against exact search, on real embeddings (issue 58 item 4).

    .venv/bin/python benchmarks/vector_recall.py [--sizes 52000 260000] [--ef 50 100 200 400]

The vectors are real: every text the LongMemEval-S benchmark embedded (`benchmarks/longmemeval_s.py`,
turn granularity: the dev half's user turns, MiniLM as int8 ONNX), read from its embedding cache;
run that benchmark first. 1,000 of them, drawn with a fixed seed, are held out as the queries (a
query is then another user's turn, never a stored vector itself); the rest are the corpus.

A size above the real count is reached by copies with small noise: copy j of vector x is
normalise(x + s * g / sqrt(dim)), g standard normal (seeded), so each copy lies at a distance of
about s (``--noise``, default 0.3) from its original: near its neighbourhood, never on it, which keeps
the nearest-neighbour problem as hard as real data makes it rather than trivially duplicated.

Per size: the index is built as lab builds one (`lab.index.vector.VectorIndex`, the declared
`VectorIndexConfig`: M, ef_construction; from `shard_from` vectors split over `shards` graphs,
built one per thread, so both cores here), timed; then for each search ef, recall@10
of the graph's top 10 against the exact top 10 (a dot product over every vector) and the query
latency (p50, p99). Results: stdout and benchmarks/results/vector_recall.json. Exit 1 when the
declared ef_search falls below recall@10 0.95 at any size (the issue's bar). Take the latencies
with nothing else running.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import REAL_VECTORS, ROOT, grown, percentiles, real_vectors, report  # noqa: E402

QUERIES = 1000
K = 10
BAR = 0.95


def exact_top(corpus: np.ndarray, queries: np.ndarray, k: int, block: int = 100_000) -> np.ndarray:
    """Each query's exact top ``k`` labels, a block of the corpus at a time (the whole similarity
    matrix of 1,000 queries against a million vectors would be 4 GB)."""
    best_sims = np.full((len(queries), 0), -np.inf, dtype=np.float32)
    best = np.zeros((len(queries), 0), dtype=np.int64)
    for start in range(0, len(corpus), block):
        sims = queries @ corpus[start:start + block].T
        top = np.argpartition(-sims, min(k, sims.shape[1] - 1), axis=1)[:, :k]
        best_sims = np.hstack([best_sims, np.take_along_axis(sims, top, axis=1)])
        best = np.hstack([best, top + start])
        keep = np.argpartition(-best_sims, min(k, best_sims.shape[1] - 1), axis=1)[:, :k]
        best_sims, best = np.take_along_axis(best_sims, keep, axis=1), np.take_along_axis(best, keep, axis=1)
    return best


def measure(corpus: np.ndarray, queries: np.ndarray, efs: list[int]) -> dict:
    from lab.config import VectorIndexConfig
    from lab.index.vector import VectorIndex, shards_for

    config = VectorIndexConfig()
    shards = shards_for(config, len(corpus))
    start = time.perf_counter()
    index = VectorIndex(corpus.shape[1], config, capacity=len(corpus), shards=shards)
    index.add(corpus, np.arange(len(corpus), dtype=np.int64))
    build_s = time.perf_counter() - start
    truth = [set(row.tolist()) for row in exact_top(corpus, queries, K)]
    out = {"vectors": len(corpus), "build_s": round(build_s, 1), "graphs": shards, "m": config.m,
           "ef_construction": config.ef_construction, "declared_ef_search": config.ef_search, "by_ef": {}}
    for ef in efs:
        index.config = replace(config, ef_search=ef)
        found, took = [], []
        for q in queries:
            t0 = time.perf_counter()
            labels, _ = index.search(q, K)
            took.append(time.perf_counter() - t0)
            found.append(labels)
        recall = float(np.mean([len(truth[i] & set(f.tolist())) / K for i, f in enumerate(found)]))
        out["by_ef"][str(ef)] = {"recall@10": round(recall, 4), **percentiles(took)}
        print(f"{len(corpus):>9,} vectors  ef {ef:>4}  recall@10 {recall:.4f}  "
              f"p50 {out['by_ef'][str(ef)]['p50_ms']:.3f} ms", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", type=Path, default=REAL_VECTORS, help="an embedding cache folder of real vectors")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, help="corpus sizes (default: the real count)")
    ap.add_argument("--ef", type=int, nargs="+", default=[50, 100, 200, 400], help="search ef values")
    ap.add_argument("--noise", type=float, default=0.3, help="distance of a noisy copy from its original")
    args = ap.parse_args()
    vectors = real_vectors(args.cache)
    order = np.random.default_rng(0).permutation(len(vectors))
    queries, base = vectors[order[:QUERIES]], vectors[order[QUERIES:]]
    print(f"{len(vectors):,} real vectors ({vectors.shape[1]} dimensions): {QUERIES} held out as queries", flush=True)
    results = {"source": f"{args.cache.relative_to(ROOT) if args.cache.is_relative_to(ROOT) else args.cache}",
               "real_vectors": int(len(vectors)), "queries": QUERIES, "k": K, "noise": args.noise,
               "conditions": ("built as lab builds: one thread per graph (one graph below index.vector.shard_from, "
                              "index.vector.shards from it); searched on one thread; nothing else running"), "sizes": []}
    for size in args.sizes or [len(base)]:
        results["sizes"].append(measure(grown(base, size, args.noise), queries, args.ef))
        report("vector_recall", results)
    below = [s["vectors"] for s in results["sizes"]
             if s["by_ef"].get(str(s["declared_ef_search"]), {}).get("recall@10", 1.0) < BAR]
    if below:
        print(f"the declared ef_search gives recall@10 below {BAR} at {below} vectors", file=sys.stderr)
    sys.exit(1 if below else 0)


if __name__ == "__main__":
    main()
