"""A million memories on one machine (issue 43 item 7): how a store's costs grow from 10,000 to
100,000 to 1,000,000 memories.

    .venv/bin/python benchmarks/scale_store.py [--sizes 10000 100000 1000000] [--queries 300]
        [--served-seconds 20] [--rate 50] [--no-compact]

Per size, each phase in a process of its own so its peak RSS (ru_maxrss) is that phase's alone:
- build: ingest throughput with precomputed vectors (``save_many`` in batches of ``--batch``:
  validation, chunking, commits; the vectors are computed before the clock starts), the index
  build (hnswlib + bm25s) and the snapshot save;
- library: opening the store and loading the namespace's snapshot (index and array view), then
  search latency in the library with the query vectors given (no query embedding): vector-only,
  BM25-only and the fused `lab` preset;
- served: a real `lab serve` over the store, searches paced at ``--rate`` per second (the server
  embeds each query with the real model, as it does in use);
- check: `lab store check`; saves: single saves, then updates and soft deletes, into a copy of the
  store with its index loaded, each followed by a search (what a per-write cost that grows with the
  store shows in); compact: `lab store compact` on that copy.
Growth ratios (figure at one size / figure at the size before) are reported so anything superlinear
stands out (10x the memories should cost at most about 10x).

The memories are LoCoMo turn texts numbered to be unique. Their vectors (``--vectors``) are real
MiniLM vectors, the LongMemEval-S user turns' from that benchmark's embedding cache, and past their
55,115 noisy copies of them (`_common.grown`): a graph index builds and searches real vectors'
neighbourhoods faster than random ones', so these are the costs users meet. ``--vectors random``
gives deterministic random unit vectors (`random_unit_vectors`), the worst case for a graph index.
Embedding a million texts would take a day; the vectors are given under the real model's id. Stores are kept under .lab/bench/scale-SIZE and reused when built with the same
settings (their build figures are then the ones recorded when they were built). Exits 1 when a
correctness check fails: the store's memory count, a stored vector's vector-only top-1 being its
own memory, `lab store check` finding an error, a served search failing.
Results: stdout and benchmarks/results/scale_store.json (the load average at start says whether
anything else was running on the machine).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, REAL_VECTORS, ROOT, grown, percentiles, random_unit_vectors, real_vectors, report  # noqa: E402

BENCH = ROOT / ".lab" / "bench"
NAMESPACE = "bench"
FORMAT = 2  # of the stores this script builds: a change to how they are made bumps it
NOISE = 0.3  # a real vector's noisy copies lie about this far from it (_common.grown)
KIND = {"kind": "real"}  # the vectors' kind (--vectors), set once per process


def peak_gb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 ** 2, 3)


def records(size: int, only: range | None = None) -> list[dict]:
    """LoCoMo's turns, numbered to be unique, repeated to ``size`` memories (``only``: just those)."""
    from lab.eval.locomo import load_conversations

    turns = [t for c in load_conversations(DATASETS / "locomo" / "locomo10-dev.json") for t in c.turns]
    return [{"namespace": NAMESPACE, "content": f"{turns[i % len(turns)]['content']} (#{i})",
             "created_at": turns[i % len(turns)]["created_at"]} for i in (only or range(size))]


def rss_now() -> dict:
    """The process's resident memory now, split into its own (anonymous) pages and pages of mapped
    files (the snapshot's vectors: the OS page cache's, reclaimable and shared between processes)."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    gb = lambda name: round(int(fields[name].split()[0]) / 1024 ** 2, 3)  # noqa: E731
    return {"rss_anon_gb": gb("RssAnon"), "rss_file_gb": gb("RssFile")}


def questions() -> list[str]:
    """LoCoMo's questions, shuffled with a fixed seed."""
    import random

    from lab.eval.locomo import load_conversations

    out = [qa["question"] for c in load_conversations(DATASETS / "locomo" / "locomo10-dev.json") for qa in c.raw["qa"]]
    random.Random(7).shuffle(out)
    return out


def settings(size: int, batch: int) -> dict:
    from lab.config import DEFAULT_MODEL, EmbedConfig, SaveConfig, to_dict

    return {"format": FORMAT, "size": size, "batch": batch, "vectors": KIND["kind"],
            "save_config": to_dict(SaveConfig(embed=EmbedConfig(model=DEFAULT_MODEL, cache=False)))}


def vectors_for(texts: list[str]) -> np.ndarray:
    """Each text's vector, the same in every phase: memory number i (its text ends "(#i)") gets
    real vector i (the LongMemEval-S user turns' MiniLM vectors, then noisy copies of them:
    `_common.grown`) or, with ``--vectors random``, a random unit vector of its text; any other
    text (a query, a fresh save) a random unit vector of its text."""
    import re

    out = random_unit_vectors(texts, 384)
    if KIND["kind"] == "real":
        numbers = [re.search(r"\(#(\d+)\)$", t) for t in texts]
        rows = [(j, int(m.group(1))) for j, m in enumerate(numbers) if m]
        if rows:
            real = grown(real_vectors(REAL_VECTORS), max(i for _, i in rows) + 1, NOISE)
            out[[j for j, _ in rows]] = real[[i for _, i in rows]]
    return out


def precomputed(texts: list[str]):
    """The real model's id and tokenizer; each text's vector looked up from vectors computed before
    the clock started (a chunk of these memories is its memory's whole text)."""
    from lab.embed.base import Symmetric

    class Precomputed(Symmetric):
        dim = 384

        def __init__(self) -> None:
            from lab.embed.st import SentenceTransformerEmbedder

            real = SentenceTransformerEmbedder()
            self.model_id, self.tokenizer = real.model_id, real.tokenizer
            self.row = {t: i for i, t in enumerate(texts)}
            self.vectors = vectors_for(texts)

        def embed(self, batch):
            return self.vectors[[self.row[t] for t in batch]]

    return Precomputed()


def phase_build(size: int, batch: int) -> dict:
    """A fresh store of ``size`` memories: ingest, index build, snapshot save."""
    from lab.config import SaveConfig, from_dict
    from lab.pipeline import Pipeline

    path = BENCH / f"scale-{size}"
    shutil.rmtree(path, ignore_errors=True)
    recs = records(size)
    started = time.perf_counter()
    model = precomputed([r["content"] for r in recs])
    precompute_s = time.perf_counter() - started
    config = from_dict(SaveConfig, settings(size, batch)["save_config"])
    with Pipeline.open(path, config, embedder=model, create=True) as pipe:
        started = time.perf_counter()
        for at in range(0, size, batch):  # one save per batch, as a bulk loader calls it
            pipe.save_many(recs[at:at + batch], batch_size=batch, progress=False)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
        pipe.indexes.build(NAMESPACE)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
    save_s = time.perf_counter() - started  # closing saves the snapshot
    vectors_gb = model.vectors.nbytes / 1024 ** 3
    return {"precompute_vectors_s": round(precompute_s, 1), "ingest_s": round(ingest_s, 2),
            "ingest_memories_per_s": round(size / ingest_s, 1), "index_build_s": round(build_s, 1),
            "snapshot_save_s": round(save_s, 1), "peak_rss_gb": peak_gb(),
            "peak_rss_note": f"includes the {vectors_gb:.2f} GB of precomputed vectors this script holds"}


def phase_library(size: int, n_queries: int) -> dict:
    """Open, load the snapshot, check the count and self-retrieval, time searches."""
    from lab.retriever import Retriever

    started = time.perf_counter()
    retriever = Retriever.open(BENCH / f"scale-{size}", embedder=precomputed([]))
    retriever.index(NAMESPACE)  # the snapshot, loaded
    index_s = time.perf_counter() - started
    snap = retriever.snapshot(NAMESPACE)  # and the array view of the memories (rebuilt after any write)
    load_s = time.perf_counter() - started
    out: dict = {"open_and_load_s": round(load_s, 2), "of_which_index_s": round(index_s, 2),
                 "of_which_view_s": round(load_s - index_s, 2), "peak_rss_after_load_gb": peak_gb(), "failures": []}
    stored = retriever.store.memories(NAMESPACE).height  # the frame the view was built from
    if stored != size or snap.index.n_live != size:
        out["failures"].append(f"store reports {stored} memories and {snap.index.n_live} live chunks, not {size}")
    asked = questions()
    vectors = random_unit_vectors(asked, 384)
    for preset in ("vector", "bm25", "lab"):
        for i in range(10):  # first-use costs (term analysis, masks) paid before the clock
            retriever.search_response(asked[-1 - i], NAMESPACE, 10, preset=preset, query_vector=vectors[-1 - i])
        latencies = []
        for i in range(n_queries):
            q = i % (len(asked) - 10)
            started = time.perf_counter()
            retriever.search_response(asked[q], NAMESPACE, 10, preset=preset, query_vector=vectors[q])
            latencies.append(time.perf_counter() - started)
        out[f"search_{preset}"] = percentiles(latencies)
    # the searches' own peak, before the self-checks below: each exact scan reads every stored
    # vector, so it brings the whole mapped vector file into the process's resident pages
    out["peak_rss_gb"] = peak_gb()
    out["rss_after_searches"] = rss_now()
    # a stored vector must be found as its own memory: exactly (where the index keeps it) and by the
    # vector-only search (hnswlib: approximate, so its share is reported; random vectors in 384
    # dimensions have no neighbourhoods, the hardest case for a graph index; the recall of real
    # vectors is benchmarks/vector_recall.py's)
    probe = [r["content"] for r in records(size, range(0, size, max(1, size // 25)))]
    found = 0
    for text, vector in zip(probe, vectors_for(probe)):
        exact = snap.index.exact_vector(vector, 1)
        if not exact or retriever.get(exact[0][0])["content"] != text:
            out["failures"].append(f"the exact top-1 of the stored vector of {text!r} is not its memory")
        top = retriever.search_response(text, NAMESPACE, 1, preset="vector", query_vector=vector).results
        found += bool(top) and top[0].memory_id == (exact[0][0] if exact else None)
    out["vector_only_top1_is_itself"] = f"{found} of {len(probe)}"
    out["peak_rss_after_exact_scans_gb"] = peak_gb()
    out["rss_at_end"] = rss_now()
    return out


def phase_resave(size: int) -> dict:
    """A reused store's snapshot saved again by this lab (its format may have changed since the
    store was built: snapshots now hold their vectors); the store's tables are not touched."""
    from lab.index.snapshot import save_index
    from lab.pipeline import Pipeline

    with Pipeline.open(BENCH / f"scale-{size}", embedder=precomputed([])) as pipe:
        idx = pipe.index(NAMESPACE)
        started = time.perf_counter()
        save_index(idx, pipe.indexes.directory(NAMESPACE))
        return {"snapshot_save_s": round(time.perf_counter() - started, 1), "peak_rss_gb": peak_gb()}


ASKED_NAMES_PRESET = "mie"  # a preset with the entity signal: its names are matched and memoised per view


def phase_saves(size: int, n_saves: int, n_asked: int) -> dict:
    """Single saves into the store (a copy) with its index loaded and its writes warmed, as a server
    saves; then as many updates (a new content: re-chunked, re-embedded) and soft deletes of
    memories already there, each write followed by a `lab` search (which pays for what the write
    changed in the view). Before the first save, ``n_asked`` questions are answered, as a server
    that has been answering does: the view then holds what those searches memoised (the names they
    asked about, under a preset that matches names), which a save must carry over."""
    from lab.pipeline import Pipeline
    from lab.store.store import warm_writes

    fresh = [f"a new note {i} about the weekend plans, number {size + i}" for i in range(n_saves)]
    changed = [f"a changed note {i} about the weekday plans, number {size + i}" for i in range(n_saves)]
    asked = questions()[:n_asked]
    texts = fresh + changed + [r["content"] for r in records(size, range(1))] + asked
    with Pipeline.open(BENCH / f"scale-{size}-copy", embedder=precomputed(texts)) as pipe:
        started = time.perf_counter()
        pipe.index(NAMESPACE)
        load_s = time.perf_counter() - started
        pipe.retriever.search_response(fresh[0], NAMESPACE, 10, query_vector=pipe.embedder.embed(fresh[:1])[0])
        for query in asked:  # by the default and by the preset that matches names (what a view memoises)
            for preset in ("lab", ASKED_NAMES_PRESET):
                pipe.retriever.search_response(query, NAMESPACE, 10, preset=preset,
                                               query_vector=pipe.embedder.embed([query])[0])
        memoised = pipe.retriever.view(NAMESPACE).matches_memoised
        started = time.perf_counter()
        warm_writes(pipe.store)  # as `lab serve` warms up: the first save is then like the others
        warm_writes_s = time.perf_counter() - started
        gc.collect()  # and as it ends its warm-up (MemoryService.warm): the loaded view and indexes
        gc.freeze()  # out of the collector's full passes, which otherwise stop a search now and then

        def timed(write, query: str) -> tuple[float, float]:
            started = time.perf_counter()
            write()
            wrote = time.perf_counter() - started
            vector = pipe.embedder.embed([query])[0]
            started = time.perf_counter()
            pipe.retriever.search_response(query, NAMESPACE, 10, query_vector=vector)
            return wrote, time.perf_counter() - started

        saved = [timed(lambda t=text: pipe.save(t, namespace=NAMESPACE), text) for text in fresh]
        # memories of the built store, spread over its ids (every position of the view moves)
        targets = pipe.store.memories(NAMESPACE)["id"].sort().gather_every(max(1, size // n_saves))[:n_saves].to_list()
        updated = [timed(lambda m=m, t=t: pipe.update(m, content=t), t) for m, t in zip(targets, changed)]
        deleted = [timed(lambda m=m: pipe.delete(m), fresh[0]) for m in targets]
        started = time.perf_counter()
    column = lambda pairs, i: percentiles([p[i] for p in pairs])  # noqa: E731
    return {"load_s": round(load_s, 2), "asked_before": n_asked, "matches_memoised_before": memoised,
            "warm_writes_s": round(warm_writes_s, 3), "single_save": column(saved, 0),
            "lab_search_right_after_a_save": column(saved, 1),
            "single_update": column(updated, 0), "lab_search_right_after_an_update": column(updated, 1),
            "single_soft_delete": column(deleted, 0), "lab_search_right_after_a_delete": column(deleted, 1),
            "close_s": round(time.perf_counter() - started, 2), "peak_rss_gb": peak_gb()}


def run_phase(name: str, size: int, args: argparse.Namespace) -> dict:
    """One phase in a child process (its own peak RSS); its result is its last stdout line."""
    cmd = [sys.executable, __file__, "--phase", name, "--vectors", args.vectors, "--sizes", str(size), "--queries", str(args.queries),
           "--batch", str(args.batch), "--saves", str(args.saves), "--asked", str(args.asked)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"phase {name} at {size:,} failed with exit code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_command(args: list[str], log: Path) -> dict:
    """A `lab` command: its wall time, exit code and peak RSS (the child's own rusage, by wait4)."""
    started = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "lab", *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    return {"seconds": round(time.perf_counter() - started, 2), "exit_code": os.waitstatus_to_exitcode(status),
            "peak_rss_gb": round(usage.ru_maxrss / 1024 ** 2, 3)}


def served(size: int, seconds: float, rate: float, more_rates: tuple[float, ...] = ()) -> dict:
    """Searches paced at ``rate`` per second against a real `lab serve` (query embedding included);
    then, one after another against the same server, at each of ``more_rates`` (``by_rate``)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from serve_load import paced
    from serving import Server, write_bundle

    from lab.config import DEFAULT_MODEL

    bundle = write_bundle(BENCH / "scale-bundle", model=DEFAULT_MODEL)
    asked = questions()
    srv = Server(bundle, BENCH / f"scale-{size}", "--rate", "1000000", "--burst", "1000000",
                 log=BENCH / f"scale-{size}-serve.log")
    started = time.perf_counter()
    srv.start(timeout=1800)
    try:
        ready_s = time.perf_counter() - started

        def ask(i: int):
            return "POST", "/v1/search", {"namespace": NAMESPACE, "query": asked[i % len(asked)], "k": 10}

        asyncio.run(paced(srv.url, rate, 3, lambda i: ask(i + 5000)))  # warm-up, not counted
        steady = asyncio.run(paced(srv.url, rate, seconds, ask))
        by_rate = {}
        for more in more_rates:
            time.sleep(2)  # the queue of the rate before drained
            by_rate[f"{more:g}"] = asyncio.run(paced(srv.url, more, seconds, lambda i: ask(i + 10_000)))
        status = Path(f"/proc/{srv.proc.pid}/status").read_text()
        hwm_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
    finally:
        srv.stop()
    out = {"start_to_ready_s": round(ready_s, 1), "search_paced": steady,
           "server_peak_rss_gb": round(hwm_kb / 1024 ** 2, 3)}
    return {**out, "by_rate": by_rate} if more_rates else out


def built(size: int, args: argparse.Namespace) -> dict:
    """The store of ``size`` memories: reused when built before with the same settings (its build
    figures are the ones recorded then), else built now."""
    marker = BENCH / f"scale-{size}.json"
    wanted = settings(size, args.batch)
    recorded = json.loads(marker.read_text()) if marker.is_file() else {}
    if recorded.get("settings") == wanted and (BENCH / f"scale-{size}" / "lab-store.json").is_file():
        build = {**recorded["build"], "reused": f"built {recorded['built_at']}"}
        if not (BENCH / f"scale-{size}" / "indexes" / NAMESPACE / "vectors.npy").is_file():
            build["snapshot_resaved"] = run_phase("resave", size, args)
    else:
        build = run_phase("build", size, args)
        marker.write_text(json.dumps({"settings": wanted, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                      "build": build}, indent=2))
    print(size, "build", build, file=sys.stderr)
    return build


def one_size(size: int, args: argparse.Namespace) -> dict:
    out: dict = {"build": built(size, args)}
    out["check"] = run_command(["store", "check", "--store", str(BENCH / f"scale-{size}")], BENCH / f"scale-{size}-check.log")
    print(size, "check", out["check"], file=sys.stderr)
    out["library"] = run_phase("library", size, args)
    print(size, "library", out["library"], file=sys.stderr)
    out["served"] = served(size, args.served_seconds, args.rate)
    print(size, "served", out["served"], file=sys.stderr)
    return out


def saves_and_compact(size: int, args: argparse.Namespace, compact: bool) -> dict:
    """Single saves into a copy of the store, then `lab store compact` of that copy (the store
    itself stays as built, for the next run to reuse)."""
    copy = BENCH / f"scale-{size}-copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(BENCH / f"scale-{size}", copy)
    os.sync()  # the copy's gigabytes written out first: the saves' own writes are timed, not its writeback
    try:
        out = {"saves": run_phase("saves", size, args)}
        print(size, "saves", out["saves"], file=sys.stderr)
        out["compact"] = (run_command(["store", "compact", "--store", str(copy)], BENCH / f"scale-{size}-compact.log")
                          if compact else {"skipped": f"above --compact-max {args.compact_max}"})
        print(size, "compact", out["compact"], file=sys.stderr)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return out


FIGURES = {  # name -> path in a size's results
    "ingest_s": ("build", "ingest_s"), "index_build_s": ("build", "index_build_s"),
    "snapshot_save_s": ("build", "snapshot_save_s"), "open_and_load_s": ("library", "open_and_load_s"),
    "search_vector_p99_ms": ("library", "search_vector", "p99_ms"), "search_bm25_p99_ms": ("library", "search_bm25", "p99_ms"),
    "search_lab_p50_ms": ("library", "search_lab", "p50_ms"), "search_lab_p99_ms": ("library", "search_lab", "p99_ms"),
    "served_p99_ms": ("served", "search_paced", "p99_ms"), "served_ready_s": ("served", "start_to_ready_s"),
    "check_s": ("check", "seconds"), "single_save_p50_ms": ("saves", "single_save", "p50_ms"),
    "search_after_save_p50_ms": ("saves", "lab_search_right_after_a_save", "p50_ms"),
    "search_after_update_p50_ms": ("saves", "lab_search_right_after_an_update", "p50_ms"),
    "search_after_delete_p50_ms": ("saves", "lab_search_right_after_a_delete", "p50_ms"),
    "compact_s": ("compact", "seconds"), "library_peak_rss_gb": ("library", "peak_rss_gb"),
    "build_peak_rss_gb": ("build", "peak_rss_gb"), "server_peak_rss_gb": ("served", "server_peak_rss_gb"),
}


def growth(results: dict, sizes: list[int]) -> dict:
    """Each figure at a size over the same figure at the size before (with the size ratio beside it)."""
    def figure(size: int, path: tuple):
        value = results[f"memories_{size}"]
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        return value

    out: dict = {}
    for before, after in zip(sizes, sizes[1:]):
        step = {"memories_x": round(after / before, 1)}
        for name, path in FIGURES.items():
            a, b = figure(before, path), figure(after, path)
            if a and b:
                step[name] = round(b / a, 2)
        out[f"{after}/{before}"] = step
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--queries", type=int, default=300, help="timed library searches per preset")
    parser.add_argument("--served-seconds", type=float, default=20)
    parser.add_argument("--rate", type=float, default=50, help="served searches offered per second")
    parser.add_argument("--batch", type=int, default=5000, help="memories per save while building")
    parser.add_argument("--saves", type=int, default=30, help="single saves timed into the copy")
    parser.add_argument("--asked", type=int, default=200,
                        help="questions answered before the timed saves (what they memoise, a save carries over)")
    parser.add_argument("--no-compact", action="store_true", help="skip the saves and compact phases")
    parser.add_argument("--compact-max", type=int, default=10 ** 9,
                        help="compact only stores of at most this size (compact rebuilds the index: 40 min at 1M)")
    parser.add_argument("--vectors", choices=["real", "random"], default="real",
                        help="real: MiniLM vectors of the LongMemEval-S user turns and noisy copies of them "
                             "(run benchmarks/longmemeval_s.py --granularity turn first); random: random unit vectors")
    parser.add_argument("--build-only", action="store_true", help="build (or find) the stores, measure nothing else")
    parser.add_argument("--saves-only", action="store_true",
                        help="only single saves and the search right after each, into a copy of each store "
                             "(written to benchmarks/results/scale_store_saves.json)")
    parser.add_argument("--results", default=None,
                        help="the results file's name (default scale_store, with --saves-only scale_store_saves): "
                             "a run of another shape is kept apart from the full one")
    parser.add_argument("--served-only", action="store_true",
                        help="only the served searches, at --rate and then at each of --more-rates, against one "
                             "server (written to benchmarks/results/scale_store_served.json)")
    parser.add_argument("--more-rates", type=float, nargs="*", default=[],
                        help="with --served-only: more paced rates, each for --served-seconds")
    parser.add_argument("--phase", choices=["build", "library", "saves", "resave"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, rate in [("--rate", args.rate)] + [("--more-rates", r) for r in args.more_rates]:
        if not 0 < rate < float("inf"):  # a rate of 0 paces nothing; NaN fails this too
            parser.error(f"{name} {rate:g}: searches per second must be a positive number")
    if args.asked < 0:
        parser.error(f"--asked {args.asked}: the questions answered before the saves cannot be fewer than 0")
    KIND["kind"] = args.vectors
    BENCH.mkdir(parents=True, exist_ok=True)
    if args.phase:  # a child: one phase at one size, its figures as the last line
        size = args.sizes[0]
        run = {"build": lambda: phase_build(size, args.batch), "library": lambda: phase_library(size, args.queries),
               "saves": lambda: phase_saves(size, args.saves, args.asked), "resave": lambda: phase_resave(size)}[args.phase]
        print(json.dumps(run()))
        return
    if args.build_only:
        for size in args.sizes:
            built(size, args)
        return
    if args.saves_only:
        saved: dict = {"sizes": args.sizes, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                       "vectors": args.vectors, "saves": args.saves}
        for size in args.sizes:
            measured = saves_and_compact(size, args, compact=False)
            measured.pop("compact")  # not asked for here
            saved[f"memories_{size}"] = {"build": built(size, args), **measured}
            saved["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            report(args.results or "scale_store_saves", saved)
        return
    if args.served_only:
        out: dict = {"sizes": args.sizes, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                     "vectors": args.vectors, "seconds_per_rate": args.served_seconds}
        for size in args.sizes:
            out[f"memories_{size}"] = {"build": built(size, args),
                                       "served": served(size, args.served_seconds, args.rate, tuple(args.more_rates))}
            out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            report(args.results or "scale_store_served", out)
        return
    results: dict = {"sizes": args.sizes, "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
                     "vectors": ({"real": f"memory i: real MiniLM vector i of the LongMemEval-S user turns "
                                          f"({REAL_VECTORS.relative_to(ROOT)}), past their count noisy copies at "
                                          f"distance {NOISE} (_common.grown); queries and fresh saves: random unit vectors",
                                  "random": "deterministic random unit vectors (random_unit_vectors)"}[args.vectors]
                                 + ", under all-MiniLM-L6-v2's id"),
                     "batch": args.batch, "served_rate_per_s": args.rate}
    failures: list[str] = []
    for done, size in enumerate(args.sizes, start=1):
        figures = results[f"memories_{size}"] = one_size(size, args)
        failures += [f"{size:,}: {f}" for f in figures["library"].pop("failures")]
        if figures["check"]["exit_code"]:
            failures.append(f"{size:,}: `lab store check` exited {figures['check']['exit_code']}")
        if figures["served"]["search_paced"]["errors"]:
            failures.append(f"{size:,}: served searches failed: {figures['served']['search_paced']['errors']}")
        for last in (False, True):  # written before and after the long compact: an interrupted run keeps the rest
            if last and not args.no_compact:
                figures.update(saves_and_compact(size, args, compact=size <= args.compact_max))
            results["growth"] = growth(results, args.sizes[:done])
            results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
            results["failures"] = failures
            report(args.results or "scale_store", results)
    if failures:
        print("correctness checks failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
