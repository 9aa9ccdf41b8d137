"""Acknowledged writes lost when `lab serve` is killed with SIGKILL mid-load (target: 0).

    .venv/bin/python benchmarks/serve_durability.py [--rounds 10] [--writers 8] [--kill-after 100]

Each round: ``writers`` concurrent clients create memories; once ``kill-after`` creates are
acknowledged the server gets SIGKILL (no shutdown, no flush); it is started again on the same
store and every acknowledged memory must be readable by id and found by a search for its own text.
The server uses the fake embedder (what is measured is the store and the restart, not the model).
Results go to stdout and benchmarks/results/serve_durability.json.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _common import report  # noqa: E402
from serving import Server, acknowledged_survive_sigkill, write_bundle  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--writers", type=int, default=8)
    parser.add_argument("--kill-after", type=int, default=100)
    args = parser.parse_args()
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        bundle = write_bundle(Path(tmp) / "bundle")
        srv = Server(bundle, Path(tmp) / "store", "--rate", "1000000", "--burst", "1000000").start()
        try:
            for r in range(args.rounds):
                started = time.perf_counter()
                got = acknowledged_survive_sigkill(srv, writers=args.writers, kill_after=args.kill_after)
                rounds.append({"acknowledged": got["acknowledged"], "lost": len(got["lost"]),
                               "seconds": round(time.perf_counter() - started, 1)})
                print(f"round {r + 1}: {rounds[-1]}", file=sys.stderr)
        finally:
            srv.stop()
    report("serve_durability", {
        "rounds": len(rounds), "kills": len(rounds), "acknowledged": sum(r["acknowledged"] for r in rounds),
        "lost": sum(r["lost"] for r in rounds), "per_round": rounds,
    })


if __name__ == "__main__":
    main()
