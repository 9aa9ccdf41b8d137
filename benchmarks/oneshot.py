"""One-shot `lab search` / `lab context` wall time on the demo store, as a person at a shell sees
it (a new process each time: imports, model and store load, the answer), and how fast a bad
argument is refused.

    .venv/bin/python benchmarks/oneshot.py [--runs 10]

The demo store is built once in a scratch folder with the real model. Results go to stdout and
benchmarks/results/oneshot.json. The target (issue 34): a one-shot search on the demo store
answers in <= 1.5 s; a refused argument costs no model or store load.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, report  # noqa: E402

LAB = str(Path(sys.executable).parent / "lab")
QUERY = "why did the billing service fail in February?"


def _wall(cmd: list[str], expect: int) -> float:
    start = time.perf_counter()
    got = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if got.returncode != expect:
        raise SystemExit(f"{' '.join(cmd)} exited {got.returncode}, expected {expect}: {got.stderr[-500:]}")
    return seconds


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median_s": round(statistics.median(ordered), 3), "min_s": round(ordered[0], 3),
            "max_s": round(ordered[-1], 3), "n": len(ordered)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "demo")
        subprocess.run([LAB, "init", "--store", store], check=True, capture_output=True)
        subprocess.run([LAB, "ingest", str(ROOT / "datasets" / "demo"), "--store", store, "--quiet"], check=True,
                       capture_output=True)
        base = ["--store", store, "--namespace", "atlas"]
        cases = {
            "search": ([LAB, "search", QUERY, *base], 0),
            "search --explain": ([LAB, "search", QUERY, *base, "--explain"], 0),
            "context": ([LAB, "context", QUERY, *base, "--budget", "800"], 0),
            "search --k -3 (refused)": ([LAB, "search", QUERY, *base, "--k", "-3"], 2),
            "context --ratios 30/30/30 (refused)": ([LAB, "context", QUERY, *base, "--ratios", "30/30/30"], 2),
            "search, missing store (refused)": ([LAB, "search", QUERY, "--store", str(Path(tmp) / "none"),
                                                 "--namespace", "atlas"], 3),
        }
        _wall(cases["search"][0], 0)  # the first run after ingest warms the file cache, as any later one finds it
        results = {name: _summary([_wall(cmd, code) for _ in range(args.runs)]) for name, (cmd, code) in cases.items()}
    results["target_s"] = 1.5
    results["meets_target"] = results["search"]["median_s"] <= 1.5
    report("oneshot", results)


if __name__ == "__main__":
    main()
