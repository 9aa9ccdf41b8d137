"""Slider-to-numbers latency of the tune notebook: `TuneSession.configure` + `numbers`, the call
the notebook's cell makes on every change, on LoCoMo dev (997 questions) by default.

Three kinds of change, each a seeded random walk over the notebook's own slider ranges:
  * fusion: RRF k or one signal's weight (re-fuse, re-score, re-assemble every question);
  * method: the fusion method (the same work, another fuser);
  * assembly: budget or a zone ratio (re-assemble only).
Target: under 100 ms from a change to new numbers. Run from the repository root:

    .venv/bin/python benchmarks/notebook.py [--dataset locomo] [--moves 200]
"""
from __future__ import annotations

import argparse
import random
import time

from _common import percentiles, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="locomo")
    ap.add_argument("--preset", default="lab")
    ap.add_argument("--moves", type=int, default=200, help="changes of each kind")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from lab.tune.session import TuneSession

    t0 = time.perf_counter()
    session = TuneSession.open(args.dataset, args.preset)
    open_s = time.perf_counter() - t0
    rng = random.Random(args.seed)
    knobs = session.knobs()
    samples: dict[str, list[float]] = {"fusion": [], "method": [], "assembly": []}
    recall = []
    for i in range(args.moves * 3):
        kind = ("fusion", "method", "assembly")[i % 3]
        if kind == "fusion":
            if rng.random() < 0.5:
                knobs["fusion.k"] = rng.randrange(0, 101)
            else:
                knobs[f"fusion.weights.{rng.choice(session.signals)}"] = round(rng.randrange(0, 41) * 0.05, 2)
        elif kind == "method":
            knobs["fusion.method"] = rng.choice(session.methods())
        else:
            which = rng.randrange(3)
            if which == 0:
                knobs["assemble.budget"] = rng.randrange(1, 81) * 100
            else:
                crit = rng.randrange(0, 11) * 0.05
                knobs["assemble.critical_ratio"], knobs["assemble.recency_ratio"] = crit, rng.randrange(0, 11) * 0.05
        started = time.perf_counter()
        numbers = session.numbers(*session.configure(knobs))
        samples[kind].append(time.perf_counter() - started)
        recall.append(numbers.means["recall@10"])
    every = [s for v in samples.values() for s in v]
    report("notebook", {
        "dataset": session.dataset.name, "questions": len(session.qids), "preset": args.preset,
        "open_seconds": round(open_s, 2), "moves": len(every),
        "change_to_numbers": percentiles(every),
        **{f"{kind}_change": percentiles(v) for kind, v in samples.items()},
        "target_ms": 100, "recall@10_range": [round(min(recall), 4), round(max(recall), 4)],
    })


if __name__ == "__main__":
    main()
