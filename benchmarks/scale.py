"""Scale-out, measured: embedding a corpus and evaluating presets, locally and on Ray (issue 43).

    .venv/bin/python benchmarks/scale.py [--part embed eval] [--limit N] [--workers 1 2]

embed: embeds the SciFact corpus (5,183 abstracts, title + text) with the store model (all-MiniLM-L6-v2):
- local: in this process, the model given every core (torch threads = cores), 64 texts a call;
- ray: `lab.engine.on_ray.RayEngine` on a local Ray started here with N workers of one core each
  (the same cores as local when N = cores), model loading per worker included in its time, Ray's
  own start-up reported apart.
Reports texts/s, the Ray overhead against local, and the largest difference between Ray's vectors
and local ones; exits 1 when they differ by more than 1e-6.

eval: `lab eval`'s path (`lab.flow.evaluate.evaluate`, context metrics at the default budget)
over five presets (lab, maia, brainbridge, lma, stackmemory) on LoCoMo dev and on SciFact train:
locally, and on a local Ray of 1 and of 2 one-core workers (presets sharing candidate lists are one
task). Each run starts from the same built store and the same cached question vectors (copied into
a fresh root), with no candidate table: what is timed is searching every list, fusing, scoring and
writing the run folders. Exits 1 when any metric differs from local (beyond 1e-9) or a run file
differs. Run with nothing else on the machine. Results: stdout and benchmarks/results/scale.json
(each part keeps the other's last figures).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, ROOT, report  # noqa: E402

import numpy as np  # noqa: E402

from lab.cli.eval import DEFAULT_BUDGET  # noqa: E402
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


PRESETS = ("lab", "maia", "brainbridge", "lma", "stackmemory")
RUN_FILES = ("run.trec", "per_question.parquet", "run.parquet")


def eval_once(name: str, seed_root: Path, work: Path, engine) -> tuple[float, dict[str, Any], Path]:
    """One evaluation of the presets on ``name`` from a copy of ``seed_root`` (stores and vectors,
    no candidate tables); returns (seconds, metrics by preset, the runs folder)."""
    from lab.eval.candidate_cache import forget_loaded
    from lab.eval.runner import EvalOptions
    from lab.eval.dataset_ref import DatasetRef
    from lab.flow.evaluate import EvalCandidate, Overrides, evaluate
    from lab.workspace import Workspace

    root = work / "eval"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(seed_root / "stores", root / "stores", symlinks=True)
    shutil.copytree(seed_root / "embeddings", root / "embeddings")
    forget_loaded()  # no table kept in this process from the last run
    ws = Workspace(eval_root=root, datasets=DATASETS, tracking_uri=None)
    started = time.perf_counter()
    done = list(evaluate(EvalCandidate(PRESETS), Overrides(), DatasetRef(name), EvalOptions(budget=DEFAULT_BUDGET),
                         ws, out=work / "runs", tracked=False, engine=engine))
    seconds = time.perf_counter() - started
    return seconds, {d.config.name: d.result.metrics["metrics"] for d in done}, work / "runs"


def seed(name: str, seed_root: Path) -> None:
    """Build the dataset's store and cache its question vectors (not timed)."""
    from lab.eval.runner import EvalOptions
    from lab.eval.dataset_ref import DatasetRef
    from lab.flow.evaluate import EvalCandidate, Overrides, evaluate
    from lab.workspace import Workspace

    ws = Workspace(eval_root=seed_root, datasets=DATASETS, tracking_uri=None)
    for _ in evaluate(EvalCandidate(("bm25",)), Overrides(), DatasetRef(name), EvalOptions(), ws,
                      out=seed_root / "runs", tracked=False, progress=True):
        pass
    shutil.rmtree(seed_root / "candidates", ignore_errors=True)


def eval_part(workers: list[int], datasets: list[str]) -> tuple[dict[str, Any], bool]:
    import ray

    from lab.engine.on_ray import RayEngine

    seed_root = ROOT / ".lab" / "bench" / "scale-eval"
    out: dict[str, Any] = {"presets": list(PRESETS), "budget": DEFAULT_BUDGET,
                           "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    same = True
    for name in datasets:
        seed(name, seed_root)
        work = Path(tempfile.mkdtemp(prefix=f"scale-{name}-"))
        local_s, local_m, local_runs = eval_once(name, seed_root, work / "local", None)
        row: dict[str, Any] = {"local_s": round(local_s, 2)}
        for n in workers:
            ray.init(address="local", num_cpus=n, include_dashboard=False, object_store_memory=200 * 1024**2,
                     logging_level=logging.ERROR, log_to_driver=False)
            engine = RayEngine(None)
            try:
                seconds, metrics, runs = eval_once(name, seed_root, work / f"ray{n}", engine)
            finally:
                ray.shutdown()
            diff = max(abs(metrics[p][m] - local_m[p][m]) for p in PRESETS for m in local_m[p])
            files_equal = all((runs / d.name / f).read_bytes() == (d / f).read_bytes()
                              for d in local_runs.iterdir() for f in RUN_FILES)
            same &= diff <= 1e-9 and files_equal and metrics.keys() == local_m.keys()
            row[f"ray_{n}_workers_s"] = round(seconds, 2)
            row[f"ray_{n}_workers_overhead_vs_local"] = round(seconds / local_s - 1, 3)
            row[f"ray_{n}_workers_max_metric_diff"] = diff
            row[f"ray_{n}_workers_run_files_equal"] = files_equal
        out[name] = row
        shutil.rmtree(work, ignore_errors=True)
    out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    out["note"] = ("to be run with nothing else on the machine (the load averages say whether it was); store and "
                   "question vectors warm, candidate lists searched in each run; Ray times exclude starting Ray, "
                   "include each task loading the dataset, store and model")
    return out, same


def embed_part(args) -> tuple[dict[str, Any], bool]:
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
    if worst > TOLERANCE:
        print(f"FAIL: Ray's vectors differ from local ones by {worst:g} (> {TOLERANCE:g})", file=sys.stderr)
    return ({"texts": len(texts), "corpus": "SciFact abstracts (title + text)", "model": "all-MiniLM-L6-v2",
             "cores": os.cpu_count(), **rows,
             "note": "nothing else running; Ray time includes each worker loading the model"}, worst <= TOLERANCE)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", nargs="+", choices=["embed", "eval"], default=["embed", "eval"])
    ap.add_argument("--limit", type=int, default=None, help="embed: the first N abstracts only")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--datasets", nargs="+", choices=["locomo", "scifact"], default=["locomo", "scifact"],
                    help="eval: the datasets evaluated")
    args = ap.parse_args()
    path = ROOT / "benchmarks" / "results" / "scale.json"
    results = {k: v for k, v in (json.loads(path.read_text()) if path.is_file() else {}).items()
               if k in ("embed", "eval")}
    ok = True
    if "embed" in args.part:
        results["embed"], good = embed_part(args)
        ok &= good
    if "eval" in args.part:
        results["eval"], good = eval_part(args.workers, args.datasets)
        ok &= good
        if not good:
            print("FAIL: an evaluation on Ray differs from the local one", file=sys.stderr)
    report("scale", results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
