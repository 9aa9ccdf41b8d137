"""Many small namespaces in one store (issue 58 item 3): the shape most deployments have, one
namespace per user or agent. Default 10,000 namespaces x 100 memories.

    .venv/bin/python benchmarks/many_namespaces.py [--namespaces 10000] [--per 100]
        [--caps 64 100000] [--touch 10000] [--no-compact]

Phases, each in a process of its own (its peak RSS its own):
- build (once, reused while its settings are the same): ``save_many`` in batches of 5,000 memories
  (50 namespaces a batch), vectors precomputed as `scale_store.py` gives them (real MiniLM vectors
  of the LongMemEval-S user turns); closing the writer saves every namespace's index snapshot;
- shape: the files and folders the store holds, and their bytes;
- list: `lab stats` (a subprocess: start-up included) and ``Store.namespaces()`` in the library;
- library: the first search in a namespace not opened before (cold: its snapshot loaded and its
  view built), then warm searches in namespaces already open, query vectors given; `lab` preset;
- saves: into a copy of the store, a save into a small namespace, then a search in it;
- compact: `lab store compact` on that copy, and its shape afterwards;
- served: `lab serve` over the store with ``LAB_OPEN_NAMESPACES`` set to each of ``--caps`` (64, and
  the default 1,024); one search in each of ``--touch`` namespaces, the server's resident memory
  sampled as they are touched: it should level off once the cap is reached, at a height set by
  the cap, not by the namespaces touched.
Results: stdout and benchmarks/results/many_namespaces.json. Take them with nothing else running.
Exits 1 when a correctness check fails (a namespace's memory count, a search answering nothing,
a served search failing).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, ROOT, percentiles, report  # noqa: E402
from scale_store import BENCH, peak_gb, precomputed, questions, run_command, vectors_for  # noqa: E402

FORMAT = 1
BATCH = 5000


def store_path(args: argparse.Namespace) -> Path:
    return BENCH / f"many-{args.namespaces}x{args.per}"


def namespace(i: int) -> str:
    return f"user-{i:05d}"


def records(n_ns: int, per: int) -> list[dict]:
    """LoCoMo's turns, numbered to be unique ("(#i)": the vector `scale_store.vectors_for` gives),
    ``per`` to a namespace."""
    from lab.eval.locomo import load_conversations

    turns = [t for c in load_conversations(DATASETS / "locomo" / "locomo10-dev.json") for t in c.turns]
    return [{"namespace": namespace(i // per), "content": f"{turns[i % len(turns)]['content']} (#{i})",
             "created_at": turns[i % len(turns)]["created_at"]} for i in range(n_ns * per)]


def phase_build(args: argparse.Namespace) -> dict:
    from lab.config import DEFAULT_MODEL, EmbedConfig, SaveConfig
    from lab.pipeline import Pipeline

    path = store_path(args)
    shutil.rmtree(path, ignore_errors=True)
    recs = records(args.namespaces, args.per)
    model = precomputed([r["content"] for r in recs])
    started = time.perf_counter()
    with Pipeline.open(path, SaveConfig(embed=EmbedConfig(model=DEFAULT_MODEL, cache=False)), embedder=model,
                       create=True) as pipe:
        for at in range(0, len(recs), BATCH):
            pipe.save_many(recs[at:at + BATCH], batch_size=BATCH, progress=False)
        ingest_s = time.perf_counter() - started
        started = time.perf_counter()
    close_s = time.perf_counter() - started  # every namespace's index built and its snapshot saved
    return {"ingest_s": round(ingest_s, 1), "ingest_memories_per_s": round(len(recs) / ingest_s, 1),
            "close_with_snapshots_s": round(close_s, 1), "peak_rss_gb": peak_gb()}


def shape(path: Path) -> dict:
    files = folders = size = 0
    for _, dirs, names in os.walk(path):
        folders += len(dirs)
        files += len(names)
    for p in path.rglob("*"):
        if p.is_file():
            size += p.stat().st_size
    return {"files": files, "folders": folders, "gb": round(size / 1024 ** 3, 3)}


def phase_library(args: argparse.Namespace) -> dict:
    from lab.retriever import Retriever

    asked = questions()
    started = time.perf_counter()
    reader = Retriever.open(store_path(args), embedder=precomputed([]))
    open_s = time.perf_counter() - started
    started = time.perf_counter()
    names = reader.namespaces()
    listing_s = time.perf_counter() - started
    vectors = vectors_for(asked)
    rng = random.Random(5)
    cold_ns = rng.sample(range(args.namespaces), min(args.cold, args.namespaces))
    cold, failures = [], []
    for j, i in enumerate(cold_ns):
        started = time.perf_counter()
        got = reader.search_response(asked[j], namespace(i), 10, query_vector=vectors[j]).results
        cold.append(time.perf_counter() - started)
        if not got:
            failures.append(f"{namespace(i)} answered nothing")
    warm_ns = cold_ns[-min(50, len(cold_ns)):]  # opened above, within the cap
    warm = []
    for j in range(args.queries):
        i = warm_ns[j % len(warm_ns)]
        started = time.perf_counter()
        reader.search_response(asked[j % len(asked)], namespace(i), 10, query_vector=vectors[j % len(asked)])
        warm.append(time.perf_counter() - started)
    counts = reader.store.memories(namespace(cold_ns[0])).height
    if counts != args.per:
        failures.append(f"{namespace(cold_ns[0])} holds {counts} memories, not {args.per}")
    if len(names) != args.namespaces:
        failures.append(f"{len(names)} namespaces listed, not {args.namespaces}")
    return {"open_s": round(open_s, 2), "namespaces_listing_s": round(listing_s, 3),
            "cold_first_search": percentiles(cold), "warm_search": percentiles(warm),
            "peak_rss_gb": peak_gb(), "failures": failures}


def phase_saves(args: argparse.Namespace, copy: Path) -> dict:
    from lab.pipeline import Pipeline

    fresh = [f"a new note {i} about the weekend plans for user {i}" for i in range(args.saves)]
    saves, searches = [], []
    with Pipeline.open(copy, embedder=precomputed(fresh)) as pipe:
        for i, text in enumerate(fresh):
            ns = namespace((i * 97) % args.namespaces)
            vector = pipe.embedder.embed([text])[0]
            pipe.retriever.search_response(text, ns, 10, query_vector=vector)  # opened, as a user's session has it
            started = time.perf_counter()
            pipe.save(text, namespace=ns)
            saves.append(time.perf_counter() - started)
            started = time.perf_counter()
            top = pipe.retriever.search_response(text, ns, 1, preset="bm25", query_vector=vector).results
            searches.append(time.perf_counter() - started)
            if not top or pipe.get(top[0].memory_id)["content"] != text:
                raise SystemExit(f"the memory just saved in {ns} is not found first by its own words")
        started = time.perf_counter()
    return {"single_save": percentiles(saves), "search_right_after_a_save": percentiles(searches),
            "close_s": round(time.perf_counter() - started, 2), "peak_rss_gb": peak_gb()}


def served(args: argparse.Namespace, cap: int) -> dict:
    """One search in each of ``--touch`` namespaces against `lab serve` capped at ``cap``."""
    sys.path.insert(0, str(ROOT / "tests"))
    import httpx
    from serving import Server, write_bundle

    from lab.config import DEFAULT_MODEL

    bundle = write_bundle(BENCH / "many-bundle", model=DEFAULT_MODEL)
    srv = Server(bundle, store_path(args), "--rate", "1000000", "--burst", "1000000",
                 env={"LAB_OPEN_NAMESPACES": str(cap)}, log=BENCH / f"many-serve-{cap}.log")
    srv.start(timeout=600)
    samples, took, errors = [], [], 0
    order = list(range(args.namespaces))
    random.Random(11).shuffle(order)
    asked = questions()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            for j, i in enumerate(order[:args.touch], start=1):
                started = time.perf_counter()
                answer = client.post("/v1/search", json={"namespace": namespace(i), "query": asked[j % len(asked)], "k": 10})
                took.append(time.perf_counter() - started)
                errors += answer.status_code != 200
                if j % max(1, args.touch // 10) == 0:
                    status = Path(f"/proc/{srv.proc.pid}/status").read_text()
                    rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
                    samples.append({"touched": j, "rss_gb": round(rss_kb / 1024 ** 2, 3)})
                    print(f"cap {cap}: {j} namespaces touched, RSS {samples[-1]['rss_gb']} GB", file=sys.stderr, flush=True)
    finally:
        srv.stop()
    return {"open_namespaces": cap, "touched": args.touch, "first_search_each": percentiles(took),
            "rss_by_touched": samples, "errors": errors}


def run_phase(name: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--phase", name, "--namespaces", str(args.namespaces), "--per", str(args.per),
           "--cold", str(args.cold), "--queries", str(args.queries), "--saves", str(args.saves)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode:
        raise SystemExit(f"phase {name} failed with exit code {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--namespaces", type=int, default=10_000)
    ap.add_argument("--per", type=int, default=100, help="memories per namespace")
    ap.add_argument("--cold", type=int, default=300, help="namespaces searched for the first time (timed)")
    ap.add_argument("--queries", type=int, default=300, help="warm searches (timed)")
    ap.add_argument("--saves", type=int, default=30, help="saves into small namespaces (timed)")
    ap.add_argument("--caps", type=int, nargs="*", default=[64, 1024], help="LAB_OPEN_NAMESPACES of each server run")
    ap.add_argument("--touch", type=int, default=10_000, help="namespaces each server run searches once")
    ap.add_argument("--no-compact", action="store_true")
    ap.add_argument("--served-only", action="store_true",
                    help="only the server runs, added to the results file of an earlier run of the same shape")
    ap.add_argument("--phase", choices=["build", "library", "saves"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    BENCH.mkdir(parents=True, exist_ok=True)
    path = store_path(args)
    if args.phase:
        run = {"build": lambda: phase_build(args), "library": lambda: phase_library(args),
               "saves": lambda: phase_saves(args, Path(str(path) + "-copy"))}[args.phase]
        print(json.dumps(run()))
        return
    if args.served_only:
        results = json.loads((ROOT / "benchmarks" / "results" / "many_namespaces.json").read_text())
        results.pop("benchmark", None), results.pop("machine", None)
        results["served_load_average_at_start"] = [round(x, 2) for x in os.getloadavg()]
        finish(args, results, list(results.get("failures", [])))
    results: dict = {"namespaces": args.namespaces, "memories_per_namespace": args.per,
                     "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    marker = Path(str(path) + ".json")
    wanted = {"format": FORMAT, "namespaces": args.namespaces, "per": args.per}
    recorded = json.loads(marker.read_text()) if marker.is_file() else {}
    if recorded.get("settings") == wanted and (path / "lab-store.json").is_file():
        results["build"] = {**recorded["build"], "reused": f"built {recorded['built_at']}"}
    else:
        results["build"] = run_phase("build", args)
        marker.write_text(json.dumps({"settings": wanted, "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                      "build": results["build"]}))
    print("build", results["build"], file=sys.stderr)
    results["shape"] = shape(path)
    results["lab_stats"] = run_command(["stats", "--store", str(path)], BENCH / "many-stats.log")
    results["library"] = run_phase("library", args)
    print("library", results["library"], file=sys.stderr)
    failures = results["library"].pop("failures")
    report("many_namespaces", results)
    copy = Path(str(path) + "-copy")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(path, copy)
    try:
        results["saves"] = run_phase("saves", args)
        print("saves", results["saves"], file=sys.stderr)
        if not args.no_compact:
            results["compact"] = run_command(["store", "compact", "--store", str(copy)], BENCH / "many-compact.log")
            results["shape_after_compact"] = shape(copy)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    report("many_namespaces", results)
    finish(args, results, failures)


def finish(args: argparse.Namespace, results: dict, failures: list[str]) -> None:
    """The server runs, one per cap (each written as it ends), then the verdict: exit 1 on a failure."""
    results["served"] = []
    for cap in args.caps:
        results["served"].append(served(args, cap))
        if results["served"][-1]["errors"]:
            failures.append(f"cap {cap}: {results['served'][-1]['errors']} served searches failed")
        report("many_namespaces", results)
    results["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    results["failures"] = failures
    report("many_namespaces", results)
    if failures:
        print("correctness checks failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
