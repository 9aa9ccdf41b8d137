"""Scale-out, measured: embedding a corpus locally and on Ray (issue 43).

    .venv/bin/python benchmarks/scale.py [--limit N] [--workers 1 2]

Embeds the SciFact corpus (5,183 abstracts, title + text) with the store model (all-MiniLM-L6-v2):
- local: in this process, the model given every core (torch threads = cores), 64 texts a call;
- ray: `lab.engine.on_ray.RayEngine` on a local Ray started here with N workers of one core each
  (the same cores as local when N = cores), model loading per worker included in its time, Ray's
  own start-up reported apart.
Reports texts/s, the Ray overhead against local, and the largest difference between Ray's vectors
and local ones; exits 1 when they differ by more than 1e-6. Run with nothing else on the machine.
Results: stdout and benchmarks/results/scale.json.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

import numpy as np  # noqa: E402

from lab.config import EmbedConfig  # noqa: E402
from lab.embed.base import set_model_threads  # noqa: E402
from lab.embed.registry import make_embedder  # noqa: E402

TOLERANCE = 1e-6


def corpus(limit: int | None) -> list[str]:
    texts = []
    with open(DATASETS / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            texts.append(f"{doc.get('title', '')}\n{doc.get('text', '')}".strip())
    return texts[:limit] if limit else texts


def local_run(texts: list[str]) -> tuple[np.ndarray, float]:
    embedder = make_embedder(EmbedConfig())
    set_model_threads(embedder, os.cpu_count() or 1)
    started = time.perf_counter()
    vectors = np.vstack([embedder.embed(texts[i:i + 64]) for i in range(0, len(texts), 64)])
    return vectors, time.perf_counter() - started


def ray_run(texts: list[str], workers: int) -> tuple[np.ndarray, float, float]:
    import ray

    from lab.engine.on_ray import RayEngine

    started = time.perf_counter()
    engine = RayEngine(None, workers=workers)
    startup = time.perf_counter() - started
    try:
        embedder = make_embedder(EmbedConfig())  # only its id and dimension travel: workers load their own
        started = time.perf_counter()
        vectors = engine.embed(embedder, texts)
        return vectors, time.perf_counter() - started, startup
    finally:
        engine.close()
        assert not ray.is_initialized()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=None, help="the first N abstracts only")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    texts = corpus(args.limit)
    base, local_s = local_run(texts)
    rows = {"local": {"seconds": round(local_s, 2), "texts_per_s": round(len(texts) / local_s, 1)}}
    worst = 0.0
    for n in args.workers:
        vectors, seconds, startup = ray_run(texts, n)
        diff = float(np.abs(vectors - base).max())
        worst = max(worst, diff)
        rows[f"ray_{n}_workers"] = {"seconds": round(seconds, 2), "texts_per_s": round(len(texts) / seconds, 1),
                                    "ray_startup_s": round(startup, 2), "overhead_vs_local": round(seconds / local_s - 1, 3),
                                    "max_abs_diff_vs_local": diff}
    report("scale", {"embed": {"texts": len(texts), "corpus": "SciFact abstracts (title + text)",
                               "model": "all-MiniLM-L6-v2", "cores": os.cpu_count(), **rows,
                               "note": "nothing else running; Ray time includes each worker loading the model"}})
    if worst > TOLERANCE:
        print(f"FAIL: Ray's vectors differ from local ones by {worst:g} (> {TOLERANCE:g})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
