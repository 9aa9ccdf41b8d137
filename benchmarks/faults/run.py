"""The fault suite: scripted, bounded, loopback-only runs a maintainer repeats before a release.

    .venv/bin/python benchmarks/faults/run.py            # the full form
    .venv/bin/python benchmarks/faults/run.py --short    # the short form CI runs (tests/test_fault_suite.py)

Groups (``--only`` picks some; docs/faults.md says what each proves and what it does not):
``kills`` (SIGKILL of `lab serve`, of its query-embedding worker, of `lab ingest` and of
`lab store compact`, each placed by an observed event), ``writers`` (a server and the CLI on one
namespace), ``damage`` (corrupted data, log and index files), ``input`` (bad files, settings and
HTTP bodies), ``security`` (auth on, REST), ``ids`` (caller-chosen ids at every face), ``mcp``
(MCP over HTTP: keys, sessions, caps), ``proxy`` (the chat proxy against a loopback upstream),
``origin`` (Host, Origin and body type on every route), ``keys`` (keys files) and ``adapters``
(adapter files given to `lab eval --system`).
It prints one table (case, expected, observed), writes benchmarks/results/faults.json, and exits
1 on any failed case. One server of each group runs the real query encoder (the int8 ONNX
MiniLM, in the server's worker process); the others the fake embedder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))  # first: this folder's modules, not a benchmark of the same name
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download weights, here or in a child

from outcome import Outcome, print_table  # noqa: E402
from servers import Bundles, server, real_server  # noqa: E402

BUILT_IN = ("kills", "writers", "damage", "input", "security", "ids", "mcp", "proxy", "origin", "keys", "adapters")
SEED = 20251125


def discovered_groups() -> dict[str, str]:
    """Groups that live in a ``group_<name>.py`` module of this folder, each with a function
    ``cases(work, bundles, short, seed) -> list[Outcome]``: a new group is one file."""
    return {p.stem.removeprefix("group_"): p.stem for p in sorted(HERE.glob("group_*.py"))}


PARTS = BUILT_IN + tuple(discovered_groups())


def kills_part(tmp: Path, bundles: Bundles, short: bool, seed: int) -> list[Outcome]:
    from kills import final_check, serve_kills, worker_kill
    from offline_kills import compact_kills, ingest_kills, minilm_ingest_kill
    from servers import lab, real_encoder_case

    out: list[Outcome] = []
    fake = server(bundles.fake, tmp / "killed-store", "--rate", "1000000", "--burst", "1000000")
    real = real_server(bundles, tmp / "killed-minilm", "--rate", "1000000", "--burst", "1000000")
    try:  # each server is stopped whatever happens (a crash must not leave one running)
        fake.start()
        if not short:
            out += worker_kill(fake, "fake embedder", seed)
        out += serve_kills(tmp, fake, 1 if short else 6, seed, "serve")
        real.start()
        out.append(real_encoder_case("kills", real))
        out += worker_kill(real, "MiniLM", seed + 1)
        out += serve_kills(tmp, real, 1 if short else 2, seed + 1, "serve (MiniLM)", first=2)
    finally:
        fake.stop()
        real.stop()
    out += compact_kills(tmp, tmp / "killed-store", 1 if short else 4)
    compacted = lab("store", "compact", "--store", tmp / "killed-store")
    case = final_check(tmp / "killed-store", "serve rounds' store: compact, then store check")
    case.observed = f"compact exit {compacted.returncode}; {case.observed}"
    case.ok = case.ok and compacted.returncode == 0
    out.append(case)
    out += ingest_kills(tmp, 1 if short else 6)
    if not short:
        out += minilm_ingest_kill(tmp, bundles.real_model)
    return out


def input_part(tmp: Path, bundles: Bundles, short: bool) -> list[Outcome]:
    from bad_input import cli_cases, file_cases, http_cases

    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    from servers import real_encoder_case

    out = []
    with Pipeline.open(tmp / "input-store", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("a memory stored before the bad input", "bad")
        out += file_cases(tmp, pipe)
        kept = pipe.store.memories().height
    out.append(Outcome("input", "nothing stored is lost", "1 memory", f"{kept} memories", kept == 1))
    out += cli_cases(tmp, short)
    with real_server(bundles, tmp / "http-store", "--rate", "1000000", "--burst", "1000000",
                     "--max-body-bytes", "1048576") as srv:
        out.append(real_encoder_case("input", srv))
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "bad"})
            out += http_cases(c)
            ok = c.get("/v1/namespaces").status_code == 200  # still serving after all of it
        log = srv.log()
    out.append(Outcome("input", "server alive, no traceback", "200, no Traceback",
                       f"{'alive' if ok else 'DOWN'}, {'Traceback' if 'Traceback' in log else 'no traceback'}",
                       ok and "Traceback" not in log))
    return out


def run_part(part: str, work: Path, bundles: Bundles, short: bool, seed: int) -> list[Outcome]:
    if part == "kills":
        return kills_part(work, bundles, short, seed)
    if part == "writers":
        from two_writers import two_writers

        srv = real_server(bundles, work / "two-writers", "--rate", "1000000", "--burst", "1000000")
        return two_writers(work, srv, *((60, 150) if short else (120, 300)))
    if part == "damage":
        from damage import damage_cases

        return damage_cases(work, short=short)
    if part == "input":
        return input_part(work, bundles, short)
    if part == "security":
        from security import security_cases

        return security_cases(work, bundles)
    if part == "ids":
        from ids import id_cases

        return id_cases(work, bundles, short)
    if part == "mcp":
        from mcp_cases import mcp_cases

        return mcp_cases(work, bundles, short)
    if part == "proxy":
        from proxy_cases import proxy_cases

        return proxy_cases(work, bundles, short)
    if part == "origin":
        from origin import origin_cases

        return origin_cases(work, bundles, short)
    if part == "keys":
        from keys import key_cases

        return key_cases(work, bundles, short)
    if part == "adapters":
        from adapters import adapter_cases

        return adapter_cases(work, short)
    import importlib

    return importlib.import_module(discovered_groups()[part]).cases(work, bundles, short, seed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--short", action="store_true", help="fewer rounds and cases (what the tests run)")
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--seed", type=int, default=SEED, help="seeds every random kill moment (recorded)")
    parser.add_argument("--real-model", help="the MiniLM store's model (default: all-MiniLM-L6-v2, torch; the "
                        "short form: all-MiniLM-L6-v2-int8, which starts faster); its queries are encoded by the int8 "
                        "ONNX MiniLM either way (--query-model auto)")
    parser.add_argument("--out", default=str(HERE.parent / "results" / "faults.json"))
    args = parser.parse_args(argv)
    args.real_model = args.real_model or ("all-MiniLM-L6-v2-int8" if args.short else "all-MiniLM-L6-v2")
    outcomes: list[Outcome] = []
    seconds: dict[str, float] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lab-faults-") as tmp_name:
        tmp = Path(tmp_name)
        bundles = Bundles.write(tmp, args.real_model)
        for part in args.only:
            t0, n0 = time.perf_counter(), len(outcomes)
            print(f"[{time.perf_counter() - started:6.1f} s] {part} ...", flush=True)
            work = tmp / part
            work.mkdir()
            try:
                outcomes += run_part(part, work, bundles, args.short, args.seed)
            except Exception as exc:  # a group that cannot finish is one failed case, not a lost run
                import traceback

                traceback.print_exc()
                outcomes.append(Outcome(part, f"{part}: the group ran to its end", "no crash",
                                        f"CRASH {type(exc).__name__}: {str(exc)[:300]}", False))
            done = outcomes[n0:]
            seconds[part] = round(time.perf_counter() - t0, 1)
            print(f"[{time.perf_counter() - started:6.1f} s] {part}: {sum(o.ok for o in done)} of {len(done)} ok "
                  f"in {seconds[part]:.0f} s", flush=True)
            for o in done:
                if not o.ok:
                    print(f"    FAIL {o.case}: {o.observed[:400]}", flush=True)
    print()
    print_table(outcomes)
    failed = [o for o in outcomes if not o.ok]
    by_group = {g: sum(o.group == g for o in outcomes) for g in PARTS}
    summary = {"form": "short" if args.short else "full", "seed": args.seed, "real_model": args.real_model,
               "cases": len(outcomes), "failed": len(failed), "by_group": by_group,
               "failed_by_group": {g: sum(o.group == g and not o.ok for o in outcomes) for g in PARTS},
               "seconds": round(time.perf_counter() - started, 1), "seconds_by_group": seconds,
               "bad_input_cases": by_group["input"], "outcomes": [o.row() for o in outcomes]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2) + "\n")
    print(f"\n{len(outcomes)} cases ({', '.join(f'{g} {n}' for g, n in by_group.items() if n)}), "
          f"{len(failed)} failed, {summary['seconds']} s -> {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
