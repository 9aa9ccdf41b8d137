"""The Ray engine under faults. Short form: `lab eval --ray-address` at addresses where something
else answers (an HTTP server, a listener that hangs up, a gRPC server without Ray's services, a
closed port, ray:// to them, an http:// URL), run in one child process. Full form: the same, each
as its own command, plus a two-node loopback cluster with Ray's token authentication on: a lab job
with the token alone, a missing or wrong token, a worker SIGKILLed during `lab eval` and during
`lab sweep` (each completes, equal to a clean run), and the head SIGKILLed mid-`lab eval`."""
from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

from outcome import Outcome
from ray_cluster import Cluster, not_ray, two_node_cluster
from servers import ENV, LAB

from serving import ROOT

G = "ray"
LIMIT_S = 30.0  # every refusal within this, in one line
# (address label, scheme, what the one line must say about what answers there)
ADDRESSES = [("an HTTP server", "", "found an HTTP server"), ("an HTTP server", "ray://", "found an HTTP server"),
             ("a listener that closes at once", "", "closed the connection without an answer"),
             ("a gRPC server that is not Ray", "", "not Ray's GCS"),
             ("a gRPC server that is not Ray", "ray://", "not Ray Client's"),
             ("a closed port", "", "nobody listens there"), ("a closed port", "ray://", "nobody listens there"),
             ("an HTTP server", "http://", "is not a Ray address")]
SLOW_ADDRESSES = [("a silent TCP listener", "", "said nothing"), ("a silent TCP listener", "ray://", "said nothing")]
EVAL = ["eval", "--dataset", "demo", "--no-track", "--quiet"]
# the short form's child: each address through lab's own main, its fds 1 and 2 caught whole (Ray's C++ too)
CHILD = r'''
import json, os, sys, tempfile, time
from lab.cli import main
out = []
for address, runs in json.loads(sys.argv[1]):
    with tempfile.TemporaryFile() as f:
        saved = [os.dup(1), os.dup(2)]
        os.dup2(f.fileno(), 1); os.dup2(f.fileno(), 2)
        t0 = time.monotonic()
        try:
            code = main(["eval", "--dataset", "demo", "--preset", "lab", "--model", "fake-hash-256", "--no-track",
                         "--quiet", "--out", runs, "--ray-address", address])
        except BaseException as exc:
            code = f"raised {type(exc).__name__}"
        seconds = time.monotonic() - t0
        sys.stdout.flush(); sys.stderr.flush()
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        f.seek(0)
        out.append({"address": address, "code": code, "seconds": seconds, "output": f.read().decode(errors="replace")})
print(json.dumps(out))
'''


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in ENV.items() if not k.startswith("RAY_AUTH")}
    env.update({"RAY_ADDRESS": "", "LAB_ENGINE": "", "RAY_USAGE_STATS_ENABLED": "0"})
    return {**env, **(extra or {})}


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def one_line(case: str, address: str, says: str, code: Any, lines: list[str], seconds: float, want_code: int = 2,
             absent: tuple[str, ...] = (), runs: Path | None = None) -> Outcome:
    """A refusal: lab's exit code, one ``error:`` line naming the address and ``says``, in time,
    none of ``absent`` (tokens) anywhere, no run folder."""
    leaked = [a for a in absent if any(a in line for line in lines)]
    folder = runs is not None and runs.exists() and any(runs.iterdir())
    ok = (code == want_code and len(lines) == 1 and lines[0].startswith("error: ") and address in lines[0]
          and says in lines[0] and seconds < LIMIT_S and not leaked and not folder)
    observed = (f"exit {code} in {seconds:.1f} s, {len(lines)} line(s): {(lines[-1] if lines else '')[:170]}"
                + (f"; LEAKED {len(leaked)} token(s)" if leaked else "") + ("; a run folder was written" if folder else ""))
    return Outcome(G, case, f"exit {want_code}, one line naming it and {says!r}, < {LIMIT_S:.0f} s", observed, ok)


def lab_run(args: list[str], env: dict[str, str] | None = None, timeout: float = 120) -> tuple[Any, list[str], float]:
    t0 = time.monotonic()
    try:
        proc = subprocess.run([*LAB, *args], capture_output=True, text=True, cwd=ROOT, env=_env(env), timeout=timeout)
        return proc.returncode, _lines(proc.stdout + proc.stderr), time.monotonic() - t0
    except subprocess.TimeoutExpired as exc:
        return "timeout", _lines(str(exc.stdout or "") + str(exc.stderr or "")), time.monotonic() - t0


def address_cases(work: Path, short: bool) -> list[Outcome]:
    out: list[Outcome] = []
    with not_ray() as found:
        todo = [(scheme + found[label], f"{label} ({scheme or 'host:port'})", says)
                for label, scheme, says in ADDRESSES + ([] if short else SLOW_ADDRESSES)]
        if short:  # one child process for all of them: a process start per case would cost seconds each
            runs = [(address, str(work / f"runs-{i}")) for i, (address, _, _) in enumerate(todo)]
            proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(runs)], capture_output=True, text=True,
                                  cwd=ROOT, env=_env(), timeout=120)
            try:
                got = json.loads(_lines(proc.stdout)[-1])
            except (ValueError, IndexError):
                return [Outcome(G, "address cases (one child process)", "a JSON report", proc.stderr[-300:], False)]
            for (address, case, says), (_, folder), row in zip(todo, runs, got):
                out.append(one_line(f"--ray-address at {case}", address, says, row["code"], _lines(row["output"]),
                                    row["seconds"], runs=Path(folder)))
        else:
            for i, (address, case, says) in enumerate(todo):
                folder = work / f"runs-{i}"
                code, lines, seconds = lab_run([*EVAL, "--preset", "lab", "--model", "fake-hash-256", "--out",
                                                str(folder), "--ray-address", address], timeout=90)
                out.append(one_line(f"lab eval --ray-address at {case}", address, says, code, lines, seconds,
                                    runs=folder))
    return out


def kill_when(cluster: Cluster, markers: tuple[str, ...], what: Callable[[int], None], busy_s: float,
              timeout: float = 300) -> tuple[threading.Thread, list[str]]:
    """A thread that waits for a cluster process whose command names one of ``markers``, lets it
    work ``busy_s``, then calls ``what(pid)``; the list gets the process's command once done."""
    killed: list[str] = []

    def watch() -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [(pid, args) for pid, args in cluster.pids("ray::") if any(m in args for m in markers)]
            if found:
                time.sleep(busy_s)
                pid, args = found[-1]
                try:
                    what(pid)
                    killed.append(args.split()[0][:60])
                    return
                except ProcessLookupError:
                    continue
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread, killed


def same_files(a: Path, b: Path, names: tuple[str, ...]) -> list[str]:
    """The run folders under ``a`` and ``b`` whose ``names`` differ (or are missing)."""
    folders = sorted(p.name for p in a.iterdir()) if a.exists() else []
    if not folders or folders != (sorted(p.name for p in b.iterdir()) if b.exists() else []):
        return [f"folders {folders} vs {sorted(p.name for p in b.iterdir()) if b.exists() else []}"]
    return [f"{f}/{n}" for f in folders for n in names
            if not (a / f / n).is_file() or (a / f / n).read_bytes() != (b / f / n).read_bytes()]


def on_token_cluster(work: Path, cluster: Cluster, token: str, seed: int) -> list[Outcome]:
    out: list[Outcome] = []
    address, wrong = cluster.address, secrets.token_hex(16)
    evals = ["--preset", "lab", "maia", "bm25", "--model", "all-MiniLM-L6-v2-int8", "--ray-address", address]

    def roots(name: str) -> dict[str, str]:
        return {"RAY_AUTH_TOKEN": token, "LAB_EVAL_ROOT": str(work / name / "eval"),
                "LAB_EMBED_CACHE": str(work / name / "cache")}

    code, lines, seconds = lab_run([*EVAL, *evals, "--out", str(work / "clean" / "runs")], roots("clean"), 600)
    made = sorted(p.name for p in (work / "clean" / "runs").iterdir()) if (work / "clean" / "runs").exists() else []
    ok = code == 0 and f"engine: ray ({address}, 2 workers)" in lines and len(made) == 3
    out.append(Outcome(G, "lab eval with RAY_AUTH_TOKEN alone (3 presets, MiniLM int8)", "exit 0 on 2 workers, 3 run folders",
                       f"exit {code} in {seconds:.0f} s; {[ln for ln in lines if 'engine:' in ln][:1]}; folders {made}", ok))
    token_file = work / "wrong-token"
    token_file.write_text(wrong)
    for case, env, says in (("no token", {}, "requires token authentication and this driver has no token"),
                            ("a wrong RAY_AUTH_TOKEN", {"RAY_AUTH_TOKEN": wrong}, "refused this driver's token"),
                            ("a wrong token file (RAY_AUTH_TOKEN_PATH)", {"RAY_AUTH_TOKEN_PATH": str(token_file)},
                             "refused this driver's token"),
                            ("RAY_AUTH_MODE=token, no token anywhere", {"RAY_AUTH_MODE": "token", "HOME": str(work)},
                             "no token was found")):
        runs = work / "refused"
        code, lines, seconds = lab_run([*EVAL, "--preset", "lab", "--model", "fake-hash-256", "--out", str(runs),
                                        "--ray-address", address], env, 90)
        out.append(one_line(f"token auth: {case}", address, says, code, lines, seconds, absent=(token, wrong), runs=runs))

    def sigkill(pid: int) -> None:
        os.kill(pid, signal.SIGKILL)

    # a worker running an evaluation unit (a Ray task: retried), killed once it has worked a moment
    thread, killed = kill_when(cluster, ("run_eval_unit",), sigkill, 0.5)
    code, lines, seconds = lab_run([*EVAL, *evals, "--out", str(work / "killed" / "runs")], roots("killed"), 600)
    thread.join(timeout=1)
    diff = same_files(work / "clean" / "runs", work / "killed" / "runs", ("run.trec", "per_question.parquet"))
    out.append(Outcome(G, "SIGKILL a worker running a `lab eval` unit", "exit 0; run files equal a clean run's",
                       f"killed {killed or 'nothing (ended first)'}; exit {code} in {seconds:.0f} s; differ {diff[:3]}",
                       bool(killed) and code == 0 and not diff))
    out += sweep_kill(work, cluster, token, sigkill)
    # last: the head itself, while the driver waits on its workers (the cluster is gone after)
    done_at: list[float] = []

    def kill_head(_pid: int) -> None:
        cluster.kill_node(0)
        done_at.append(time.monotonic())

    thread, killed = kill_when(cluster, ("MapWorker",), kill_head, 1.0)
    runs = work / "head" / "runs"
    code, lines, seconds = lab_run([*EVAL, *evals, "--out", str(runs)], roots("head"), 300)
    ended = time.monotonic()
    thread.join(timeout=1)
    after = ended - done_at[0] if done_at else float("inf")
    errors = [ln for ln in lines if ln.startswith("error: ")]
    folder = runs.exists() and any(runs.iterdir())
    ok = (bool(done_at) and code == 1 and errors == lines[-1:] and "head went away mid-job" in lines[-1]
          and address in lines[-1] and not any("Traceback" in ln for ln in lines) and len(lines) <= 3
          and after < LIMIT_S and not folder)
    out.append(Outcome(G, "SIGKILL the head mid-`lab eval` (embedding on its workers)",
                       f"exit 1 within {LIMIT_S:.0f} s of the kill, one error line, no traceback, no run folder",
                       f"exit {code} {after:.1f} s after the kill; {len(lines)} line(s); last {lines[-1][:150] if lines else ''}"
                       + ("; a run folder was written" if folder else ""), ok))
    return out


def sweep_kill(work: Path, cluster: Cluster, token: str, sigkill: Callable[[int], None]) -> list[Outcome]:
    """A sweep of two index-time points (each a Ray task building a store), clean and with one
    point's worker SIGKILLed: the same table, the same choice."""
    spec = work / "ray-sweep.yaml"
    spec.write_text("name: ray-kill\ndataset: demo\nbase: lab\nstrategy: grid\nseed: 0\nobjective: recall@10\n"
                    "space:\n  fusion.k: [2, 60]\n  index.context_turns: [0, 1]\n")
    tables = {}
    said: dict[str, Any] = {}
    for name in ("sweep-clean", "sweep-killed"):
        env = {"RAY_AUTH_TOKEN": token, "LAB_EVAL_ROOT": str(work / name / "eval"), "LAB_EMBED_CACHE": str(work / name / "cache")}
        thread, killed = kill_when(cluster, ("build_index_point",), sigkill, 2.0) if name == "sweep-killed" else (None, [])
        code, lines, seconds = lab_run(["sweep", str(spec), "--no-track", "--json", "--out", str(work / name / "out"),
                                        "--ray-address", cluster.address], env, 900)
        if thread is not None:
            thread.join(timeout=1)
        said[name] = (code, killed, seconds, lines[-1][:120] if lines else "")
        found = sorted((work / name / "out").rglob("*.parquet"))
        tables[name] = {p.name: p for p in found}  # one sweep folder each (its name carries a moment)
    code, killed, seconds, last = said["sweep-killed"]
    clean, hit = tables["sweep-clean"], tables["sweep-killed"]
    diff = _table_diff(clean, hit)
    ok = said["sweep-clean"][0] == 0 and code == 0 and bool(killed) and bool(clean) and not diff
    return [Outcome(G, "SIGKILL a worker building a `lab sweep` index point", "exit 0; the clean sweep's tables",
                    f"killed {killed or 'nothing (ended first)'}; exit {code} in {seconds:.0f} s (clean exit "
                    f"{said['sweep-clean'][0]}); tables {len(hit)} of {len(clean)}; differ {diff[:3]}; last {last}", ok)]


def _table_diff(clean: dict[str, Path], hit: dict[str, Path]) -> list[str]:
    """The result tables that differ, timing columns aside."""
    import polars as pl

    if sorted(clean) != sorted(hit):
        return [f"files {sorted(clean)} vs {sorted(hit)}"]
    differ = []
    for name in clean:
        a, b = pl.read_parquet(clean[name]), pl.read_parquet(hit[name])
        timing = [c for c in a.columns if "second" in c or c.endswith("_s") or "time" in c]
        if not a.drop(timing, strict=False).equals(b.drop(timing, strict=False)):
            differ.append(name)
    return differ


def cluster_cases(work: Path, seed: int) -> list[Outcome]:
    out: list[Outcome] = []
    token = secrets.token_hex(16)
    t0 = time.monotonic()
    try:
        with two_node_cluster(token) as cluster:
            out.append(Outcome(G, "two-node cluster, token auth on both `ray start`s", "2 nodes alive",
                               f"2 nodes at {cluster.address} in {time.monotonic() - t0:.0f} s", True))
            out += on_token_cluster(work, cluster, token, seed)
    except RuntimeError as exc:
        out.append(Outcome(G, "two-node cluster, token auth on both `ray start`s", "2 nodes alive", str(exc)[:200], False))
    return out


def cases(work: Path, bundles: Any, short: bool, seed: int) -> list[Outcome]:
    out = address_cases(work, short)
    if not short:
        out += cluster_cases(work, seed)
    return out

