"""The fault suite: scripted, bounded, loopback-only runs a maintainer repeats before a release.

    .venv/bin/python benchmarks/faults/run.py            # the full form (about 10 minutes here)
    .venv/bin/python benchmarks/faults/run.py --short    # the short form CI runs (tests/test_fault_suite.py)

Parts (``--only`` picks some): ``kills`` (SIGKILL of `lab serve` during creates, updates and
deletes with cut-off requests resent, and of `lab ingest`), ``writers`` (a server and the CLI on
one namespace), ``damage`` (each table's data file, a torn last log file, each index file),
``input`` (bad ingest, preset, sweep, gate and settings files, bad HTTP bodies) and ``security``
(auth on: every operation without a key, cross-namespace access, scopes, traversal, rate limits).
It prints one table (case, expected, observed), writes benchmarks/results/faults.json, and exits
1 on any failed case: a crash, a traceback, a 5xx, a lost or duplicated write, or a check that
fails after recovery. Servers use the fake embedder: what is probed is the store and the server.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent.parent / "tests"))

from outcome import Outcome, print_table  # noqa: E402

from serving import Server, write_bundle  # noqa: E402

PARTS = ("kills", "writers", "damage", "input", "security")


def input_part(tmp: Path, bundle: Path) -> list[Outcome]:
    from bad_input import file_cases, http_cases

    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    out = []
    with Pipeline.open(tmp / "input-store", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("a memory stored before the bad input", "bad")
        out += file_cases(tmp, pipe)
        kept = pipe.store.memories().height
    out.append(Outcome("input", "nothing stored is lost", "1 memory", f"{kept} memories", kept == 1))
    with Server(bundle, tmp / "http-store", "--rate", "1000000", "--burst", "1000000",
                "--max-body-bytes", "1048576") as srv:
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "bad"})
            out += http_cases(c)
            ok = c.get("/v1/namespaces").status_code == 200  # still serving after all of it
        log = srv.log()
    out.append(Outcome("input", "server alive, no traceback", "200, no Traceback",
                       f"{'alive' if ok else 'DOWN'}, {'Traceback' if 'Traceback' in log else 'no traceback'}",
                       ok and "Traceback" not in log))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="one round of each kill, fewer damage cases")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--rounds", type=int, help="kill rounds (default 1 short, 6 full)")
    parser.add_argument("--out", default=str(HERE.parent / "results" / "faults.json"))
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.short else 6)
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lab-faults-") as tmp_name:
        tmp = Path(tmp_name)
        bundle = write_bundle(tmp / "bundle")
        for part in args.only:
            t0, n0 = time.perf_counter(), len(outcomes)
            print(f"[{time.perf_counter() - started:6.1f} s] {part} ...", flush=True)
            work = tmp / part
            work.mkdir()
            if part == "kills":
                from kills import ingest_kills, serve_kills

                outcomes += serve_kills(work, bundle, rounds)
                outcomes += ingest_kills(work, rounds)
            elif part == "writers":
                from kills import two_writers

                outcomes += two_writers(work, bundle)
            elif part == "damage":
                from damage import damage_cases

                outcomes += damage_cases(work, short=args.short)
            elif part == "input":
                outcomes += input_part(work, bundle)
            elif part == "security":
                from security import security_cases

                outcomes += security_cases(work, bundle)
            done = outcomes[n0:]
            print(f"[{time.perf_counter() - started:6.1f} s] {part}: {sum(o.ok for o in done)} of {len(done)} ok "
                  f"in {time.perf_counter() - t0:.0f} s", flush=True)
    print()
    print_table(outcomes)
    failed = [o for o in outcomes if not o.ok]
    by_group = {g: sum(o.group == g for o in outcomes) for g in PARTS}
    summary = {"form": "short" if args.short else "full", "cases": len(outcomes), "failed": len(failed),
               "by_group": by_group, "seconds": round(time.perf_counter() - started, 1),
               "bad_input_cases": by_group["input"], "outcomes": [o.row() for o in outcomes]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{len(outcomes)} cases ({', '.join(f'{g} {n}' for g, n in by_group.items() if n)}), "
          f"{len(failed)} failed, {summary['seconds']} s -> {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
