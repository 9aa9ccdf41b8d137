"""A tracking server that fails under `lab sweep` and `lab gate --export`: silent, erroring, killed,
frozen, refusing artifacts. Each case checks the one error line (the server's URI without its
credentials, the reason, no traceback, exit code 5), the time from the fault to the exit, and what
the server holds once it is back: no registered model without a version, and the command's run
FAILED or named in the error as left RUNNING with the line that removes it. The baseline checks
that artifacts (run folders, the model's bundle) reach the server's --artifacts-destination and
none lands in the client's working folder.

The short form runs in this process against loopback stand-ins (a server that answers its health
check and then nothing, one that answers HTTP 500): seconds, no `mlflow server`. The full form
starts a real `mlflow server` (SQLite backend, --artifacts-destination) and kills it by its PIDs,
each kill placed by an observed event (the first file of an upload appearing at the destination).
"""
from __future__ import annotations

import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

from outcome import Outcome
from servers import ENV
from tracking_server import Tracking, command, finish

from serving import ROOT, free_port

GROUP = "tracking"
TIMEOUT_S = 3  # LAB_TRACKING_TIMEOUT for every command here: each call fails within (1 + 2) * 3 + 2 s
STAND_IN_TIMEOUT_S = 1  # the stand-ins: a silent one costs (1 + 2) * 1 + 2 s
SLACK_S = 45  # and the command has that much more to end (a run to mark, the interpreter to stop)
SWEEP = "name: {name}\ndataset: demo\nbase: rrf-k60\nspace:\n  fusion.k: [2, 60]\n"


def cases(work: Path, bundles: Any, short: bool, seed: int) -> list[Outcome]:
    work.mkdir(parents=True, exist_ok=True)
    out = stand_in_cases()
    if not short:
        out += real_server_cases(work / "tracking")
    return out


# --------------------------------------------------------------------------- stand-ins (short form)
class _StandIn(BaseHTTPRequestHandler):
    """Answers /health; every other request: silence (``mode`` "silent") or HTTP 500 ("error")."""
    mode = "silent"

    def do_GET(self):  # noqa: N802
        if self.path == "/health":
            self._answer(200, b"OK")
        elif self.mode == "silent":
            time.sleep(STAND_IN_TIMEOUT_S * 10)
        else:
            self._answer(500, b'{"error_code": "INTERNAL_ERROR", "message": "boom"}')

    do_POST = do_GET  # noqa: N815

    def _answer(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def stand_in_cases() -> list[Outcome]:
    from lab import track

    out = []
    for mode, reason in (("silent", f"no answer within {STAND_IN_TIMEOUT_S} s"), ("error", "it kept answering HTTP 500")):
        handler = type(f"StandIn{mode}", (_StandIn,), {"mode": mode})
        stand_in = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        stand_in.daemon_threads = True
        threading.Thread(target=stand_in.serve_forever, daemon=True).start()
        shown = f"http://127.0.0.1:{stand_in.server_address[1]}"
        uri = shown.replace("http://", "http://alice:s3cret@")
        started = time.monotonic()
        try:
            track.recent_runs(5, track.Tracking(uri, STAND_IN_TIMEOUT_S))  # as an edge hands its workspace's
            observed, ok = "answered", False
        except track.TrackingError as exc:
            took = time.monotonic() - started
            line = str(exc)
            observed = f"{took:.1f} s: {line[:200]}"
            ok = (took < track.call_bound_s(STAND_IN_TIMEOUT_S) + 5 and f"store {shown} failed" in line and reason in line
                  and "s3cret" not in line and "\n" not in line and exc.exit_code == 5)
        except Exception as exc:  # noqa: BLE001 - a crash, not lab's error
            observed, ok = f"CRASH {type(exc).__name__}: {str(exc)[:150]}", False
        finally:
            stand_in.shutdown()
            stand_in.server_close()
        what = "silent" if mode == "silent" else "answering HTTP 500"
        out.append(Outcome(GROUP, f"a tracking server {what} after its health check (lab runs)",
                           f"one TrackingError line within the deadline naming {shown} (no credentials), "
                           f"{reason!r}", observed, ok))
    gone = f"http://127.0.0.1:{free_port()}"
    out.append(_refused_before_work(track, gone))
    return out


def _refused_before_work(track: Any, uri: str) -> Outcome:
    from lab.errors import ValidationError

    started = time.monotonic()
    try:
        track.require_reachable(uri)
        observed, ok = "accepted", False
    except ValidationError as exc:
        observed = f"{time.monotonic() - started:.1f} s: {str(exc)[:160]}"
        ok = f"cannot reach the MLflow tracking server at {uri}" in str(exc) and exc.field == "tracking_uri"
    return Outcome(GROUP, "nobody listening at the tracking URI", "refused before any work, naming the URI",
                   observed, ok)


# --------------------------------------------------------------------------- a real mlflow server (full form)
def _gate_argv(tracking: Tracking, work: Path, model: str) -> list[str]:
    config = work / f"gate-{model}.yaml"
    config.write_text((ROOT / "goldens" / "gate-demo.yaml").read_text().replace("model: lab-memory-demo",
                                                                                 f"model: {model}"))
    return ["gate", "--config", str(config), "--export", "--tracking-uri", tracking.uri, "--out", str(work / "gate"),
            "--quiet"]


def _sweep_argv(tracking: Tracking, work: Path, name: str) -> list[str]:
    spec = work / f"{name}.yaml"
    spec.write_text(SWEEP.format(name=name))
    return ["sweep", str(spec), "--tracking-uri", tracking.uri, "--out", str(work / "sweeps"), "--quiet"]


def _server_state(uri: str) -> dict[str, Any]:
    """Runs by status, and registered models without a version, as the server holds them now."""
    from mlflow import MlflowClient

    c = MlflowClient(uri)
    runs = [r for e in c.search_experiments() for r in c.search_runs([e.experiment_id], max_results=1000)]
    empty = [m.name for m in c.search_registered_models() if not c.search_model_versions(f"name = '{m.name}'")]
    return {"status": {r.info.run_id: r.info.status for r in runs}, "empty_models": empty}


def real_server_cases(work: Path) -> list[Outcome]:
    work.mkdir(parents=True, exist_ok=True)
    tracking = Tracking(work / "server")
    client = work / "client-a"
    client.mkdir(exist_ok=True)
    env = {**ENV, "LAB_PROJECT": str(ROOT), "LAB_EVAL_ROOT": str(work / "eval"), "LAB_TRACKING_TIMEOUT": str(TIMEOUT_S)}
    env.pop("MLFLOW_TRACKING_URI", None)
    out: list[Outcome] = []
    try:
        tracking.start()
        out.append(_baseline(tracking, work, client, env))
        faults: list[tuple[str, list[str], Callable[[str], bool], int]] = [
            ("lab gate --export, killed at the bundle's upload", _gate_argv(tracking, work, "lab-memory-kill-bundle"),
             lambda f: "/models/" in f, signal.SIGKILL),
            ("lab gate --export, killed at the gate run's upload", _gate_argv(tracking, work, "lab-memory-kill-gate"),
             lambda f: "/artifacts/gate/" in f, signal.SIGKILL),
            ("lab gate --export, frozen (SIGSTOP) at the bundle's upload",
             _gate_argv(tracking, work, "lab-memory-frozen"), lambda f: "/models/" in f, signal.SIGSTOP),
            ("lab sweep, killed at the sweep run's upload", _sweep_argv(tracking, work, "killed-sweep"),
             lambda f: "/artifacts/sweep/" in f, signal.SIGKILL),
        ]
        for case, argv, event, sig in faults:
            out += _fault(tracking, case, argv, event, sig, client, env)
        out += _refusing(tracking, work, client, env)
    finally:
        tracking.stop()
    return out


def _baseline(tracking: Tracking, work: Path, client: Path, env: dict[str, str]) -> Outcome:
    from mlflow import MlflowClient

    rc, stdout, stderr = finish(command(_gate_argv(tracking, work, "lab-memory-team"), client, env), 900)
    kept = tracking.files()
    location = (MlflowClient(tracking.uri).get_experiment_by_name("lab") or object())
    where = getattr(location, "artifact_location", None)
    bundle = any(f.endswith("/artifacts/bundle/manifest.json") for f in kept)
    gate = any("/artifacts/gate/" in f for f in kept)
    local = sorted(str(p.relative_to(client)) for p in (client / ".lab" / "mlflow").rglob("*")) \
        if (client / ".lab" / "mlflow").exists() else []
    return Outcome(GROUP, "lab gate --export through a real mlflow server (baseline)",
                   "rc 0; experiment at mlflow-artifacts:, the gate folder and the bundle under the server's "
                   "--artifacts-destination, nothing under the client's .lab/mlflow",
                   f"rc {rc}; experiment at {where}; {len(kept)} files at the destination (bundle {bundle}, "
                   f"gate folder {gate}); client .lab/mlflow {local[:3]}" + (f"; {stderr.strip()[-200:]}" if rc else ""),
                   rc == 0 and str(where).startswith("mlflow-artifacts:") and bundle and gate and not local)


def _fault(tracking: Tracking, case: str, argv: list[str], event: Callable[[str], bool], sig: int, client: Path,
           env: dict[str, str]) -> list[Outcome]:
    from lab.track import call_bound_s

    before = tracking.files()
    proc = command(argv, client, env)
    seen, deadline = None, time.monotonic() + 900
    while proc.poll() is None and time.monotonic() < deadline:
        new = [f for f in tracking.files() - before if event(f)]
        if new:
            seen = new[0]
            break
        time.sleep(0.05)
    alive = proc.poll() is None
    tracking.signal(sig)
    faulted = time.monotonic()
    rc, stdout, stderr = finish(proc, call_bound_s(TIMEOUT_S) * 4 + SLACK_S)
    took = time.monotonic() - faulted
    if sig == signal.SIGSTOP:
        tracking.stop()
    tracking.start()
    lines = [x for x in stderr.splitlines() if x.strip()]
    last = lines[-1] if lines else ""
    bound = call_bound_s(TIMEOUT_S) * 3 + SLACK_S  # the failing call, ending its run, removing a model
    ok = (seen is not None and alive and rc == 5 and len(lines) == 1 and "Traceback" not in stdout + stderr
          and f"MLflow tracking store {tracking.uri} failed while" in last and took < bound)
    first = Outcome(GROUP, case, f"one error line naming {tracking.uri}, exit 5, within {bound:.0f} s of the fault",
                    f"fault at {seen} (command running: {alive}); rc {rc} {took:.0f} s after; {len(lines)} line(s): "
                    f"{last[:260]}", ok)
    state = _server_state(tracking.uri)
    named = sorted(set(re.findall(r"run ([0-9a-f]{32})", last)))
    left = [r for r in named if state["status"].get(r) == "RUNNING"]
    unnamed = [r for r in left if f"run {r} is left RUNNING" not in last]
    after = Outcome(GROUP, f"{case}: the server once back",
                    "no registered model without a version; the command's run FAILED, or named as left RUNNING "
                    "with the line that deletes it",
                    f"runs named {[(r[:8], state['status'].get(r)) for r in named]}; models without a version "
                    f"{state['empty_models']}",
                    bool(named) and not state["empty_models"] and not unnamed and
                    all(state["status"].get(r) in ("FAILED", "RUNNING") for r in named))
    return [first, after]


def _refusing(tracking: Tracking, work: Path, client: Path, env: dict[str, str]) -> list[Outcome]:
    """The server reachable but refusing artifacts (its destination a file): the sweep's run ends FAILED."""
    tracking.stop()
    blocker = work / "blocker"
    blocker.write_text("not a folder")
    tracking.start(artifacts=blocker / "artifacts")
    try:
        rc, stdout, stderr = finish(command(_sweep_argv(tracking, work, "refused-sweep"), client, env), 900)
        lines = [x for x in stderr.splitlines() if x.strip()]
        last = lines[-1] if lines else ""
        named = sorted(set(re.findall(r"run ([0-9a-f]{32})", last)))
        state = _server_state(tracking.uri)
        return [Outcome(GROUP, "lab sweep, the server refusing artifacts (HTTP 500)",
                        "exit 5, one line: HTTP 500 and where the sweep's results are; its run FAILED on the server",
                        f"rc {rc}; {len(lines)} line(s): {last[:220]}; runs {[(r[:8], state['status'].get(r)) for r in named]}",
                        rc == 5 and len(lines) == 1 and "it kept answering HTTP 500" in last
                        and "the sweep's results are in" in last and bool(named)
                        and all(state["status"].get(r) == "FAILED" for r in named) and "left RUNNING" not in last)]
    finally:
        tracking.stop()
