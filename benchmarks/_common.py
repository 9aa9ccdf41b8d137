"""Helpers shared by the benchmark scripts: dataset paths, timing, percentile reports."""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATASETS = Path(os.environ.get("LAB_DATASETS", ROOT.parent / "shared" / "datasets"))


def _install_workspace() -> None:
    """A benchmark is an edge, like the CLI: its environment becomes the process's workspace."""
    from lab.workspace import Workspace, install

    install(Workspace.resolve())


_install_workspace()


def percentiles(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {"p50_ms": round(float(np.percentile(ms, 50)), 3), "p99_ms": round(float(np.percentile(ms, 99)), 3),
            "mean_ms": round(float(ms.mean()), 3), "n": int(len(ms))}


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def report(name: str, results: dict) -> None:
    results = {"benchmark": name, "machine": f"{platform.machine()} {os.cpu_count()} cores", **results}
    print(json.dumps(results, indent=2))
    out = ROOT / "benchmarks" / "results"
    out.mkdir(exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")


def random_unit_vectors(texts, dim: int) -> np.ndarray:
    """A deterministic random unit vector per text (benchmark stores: index and search costs of
    real vectors without spending minutes embedding them)."""
    import hashlib

    out = np.empty((len(texts), dim), dtype=np.float32)
    for i, t in enumerate(texts):
        seed = int.from_bytes(hashlib.blake2b(t.encode(), digest_size=8).digest(), "little")
        out[i] = np.random.default_rng(seed).standard_normal(dim)
    from lab.embed.base import normalize_rows

    return normalize_rows(out)


# real MiniLM vectors: the LongMemEval-S dev half's user turns, as benchmarks/longmemeval_s.py embedded them
REAL_VECTORS = ROOT / ".lab" / "bench" / "longmemeval-s" / "turn" / "embeddings"


def real_vectors(cache: Path) -> np.ndarray:
    import pyarrow.parquet as pq

    parts = sorted(cache.rglob("part-*.parquet"))
    if not parts:
        sys.exit(f"no embedding cache under {cache}: run benchmarks/longmemeval_s.py --granularity turn first")
    blocks = []
    for part in parts:
        table = pq.read_table(part, columns=["vector"])
        flat = table["vector"].combine_chunks().flatten().to_numpy(zero_copy_only=False)
        blocks.append(np.asarray(flat, dtype=np.float32).reshape(table.num_rows, -1))
    vectors = np.vstack(blocks)
    return np.unique(vectors, axis=0)  # a text embedded twice (two cache parts) counts once


def grown(base: np.ndarray, size: int, noise: float, seed: int = 0) -> np.ndarray:
    """``base`` and noisy copies of it, ``size`` vectors in all: copy j of vector x is
    normalise(x + noise * g / sqrt(dim)), g standard normal (seeded), so each copy lies at a distance
    of about ``noise`` from its original: near its neighbourhood, never on it, which keeps the
    nearest-neighbour problem as hard as real data makes it rather than trivially duplicated."""
    from lab.embed.base import normalize_rows

    rng = np.random.default_rng(seed)
    out, dim = [base], base.shape[1]
    while sum(len(b) for b in out) < size:
        need = min(len(base), size - sum(len(b) for b in out))
        copy = base[:need] + noise * rng.standard_normal((need, dim)).astype(np.float32) / np.sqrt(dim)
        out.append(normalize_rows(copy))
    return np.vstack(out)[:size]
