"""A real MLflow tracking server (`mlflow server`, SQLite backend, local artifacts) as teams share
one: lab eval, lab sweep, lab gate --export and lab serve work through --tracking-uri http://...; an
unreachable one is named in seconds, before any work."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from serving import free_port

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _wait(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read()[-3000:] if proc.stderr else "exited"
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer")


@pytest.fixture
def tracking_server(tmp_path):
    port = free_port()
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen([mlflow, "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                             "--artifacts-destination", str(tmp_path / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def _lab(*argv: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *argv], capture_output=True, text=True, timeout=900,
                          cwd=cwd, env=env)


def test_eval_gate_export_and_serve_through_a_tracking_server(tmp_path, tracking_server):
    """A team's use (T2/F18): one folder logs and exports through the server, a second folder whose
    .lab holds nothing serves the champion from what the server keeps."""
    from mlflow import MlflowClient

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update({"LAB_PROJECT": str(ROOT), "LAB_EVAL_ROOT": str(first / ".lab" / "eval")})
    done = _lab("eval", "--dataset", "demo", "--preset", "lab", "--tracking-uri", tracking_server, "--quiet",
                "--out", str(first / "runs"), env=env, cwd=first)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_server)
    experiment = client.get_experiment_by_name("lab")
    # the server chose where artifacts go (its --artifacts-destination, proxied), not this machine's disk
    assert experiment.artifact_location.startswith("mlflow-artifacts:"), experiment.artifact_location
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].data.metrics["recall_at_10"] > 0.8
    spec = tmp_path / "sweep.yaml"
    spec.write_text("name: served-sweep\ndataset: demo\nbase: rrf-k60\nspace:\n  fusion.k: [2, 60]\n")
    swept = _lab("sweep", str(spec), "--tracking-uri", tracking_server, "--quiet", "--out", str(first / "sweeps"),
                 env=env, cwd=first)
    assert swept.returncode == 0, swept.stderr[-3000:]
    sweep_runs = client.search_runs([experiment.experiment_id], "tags.mlflow.runName = 'sweep served-sweep'")
    assert len(sweep_runs) == 1  # the parent run, its best configurations as child runs beside it
    children = client.search_runs([experiment.experiment_id],
                                  f"tags.mlflow.parentRunId = '{sweep_runs[0].info.run_id}'")
    assert len(children) == 2
    gated = _lab("gate", "--config", str(ROOT / "goldens" / "gate-demo.yaml"), "--candidate", "lab", "--export",
                 "--tracking-uri", tracking_server, "--quiet", "--out", str(first / "gate"), env=env, cwd=first)
    assert gated.returncode == 0, gated.stderr[-3000:]
    champion = client.get_model_version_by_alias("lab-memory-demo", "champion")
    assert champion.version == "1"
    # every artifact is under the server's destination: run folders, the sweep, the model's bundle
    kept = {p.relative_to(tmp_path / "artifacts").as_posix() for p in (tmp_path / "artifacts").rglob("*") if p.is_file()}
    assert any(k.endswith("/artifacts/run/metrics.json") for k in kept), sorted(kept)[:20]
    assert any(k.endswith("/artifacts/sweep/summary.json") for k in kept), sorted(kept)[:20]
    assert any(k.endswith("/artifacts/bundle/manifest.json") for k in kept), sorted(kept)[:20]
    assert not (first / ".lab" / "mlflow").exists()  # no artifact, store or lock on the first client's disk
    assert not (second / ".lab").exists()
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--model", "models:/lab-memory-demo@champion",
                              "--tracking-uri", tracking_server, "--port", str(port)], cwd=second, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait(f"http://127.0.0.1:{port}/ready", serve, 300)
        base = f"http://127.0.0.1:{port}"
        assert httpx.post(f"{base}/v1/namespaces", json={"name": "team"}, timeout=60).status_code == 201
        saved = httpx.post(f"{base}/v1/memories", timeout=120, json={
            "namespace": "team", "content": "The billing service failed because its card processor key expired."})
        assert saved.status_code == 201, saved.text
        hits = httpx.post(f"{base}/v1/search", timeout=60,
                          json={"query": "why did the billing service fail?", "namespace": "team"}).json()
        assert [r["memory_id"] for r in hits["results"]] == [saved.json()["id"]], hits
    finally:
        os.killpg(serve.pid, 15)
        out = serve.communicate(timeout=60)[0]
    # the configuration served is the champion's, read from the bundle the server keeps
    assert "serving models:/lab-memory-demo@champion (version 1)" in out, out[-2000:]
    assert not (second / ".lab" / "mlflow").exists()


def test_an_unreachable_tracking_server_is_named_before_any_work(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    port = free_port()  # nobody listens there
    started = time.monotonic()
    done = _lab("eval", "--dataset", "demo", "--preset", "lab", "--tracking-uri", f"http://127.0.0.1:{port}",
                "--out", str(tmp_path / "runs"), env=env, cwd=ROOT)
    assert time.monotonic() - started < 60
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: cannot reach the MLflow tracking server at http://127.0.0.1:{port} ([Errno 111] Connection refused); "
        f"start it (`{ROOT / '.venv' / 'bin' / 'mlflow'} server --backend-store-uri sqlite:///mlflow.db "
        "--artifacts-destination DIR`), give another "
        "--tracking-uri, or --no-track"]
    assert not (tmp_path / "runs").exists()  # refused before any work: no run folder, no half-registered run


class _Silent(BaseHTTPRequestHandler):
    """A tracking server that answers its health check and then nothing: every API call hangs."""

    def do_GET(self):  # noqa: N802
        if self.path == "/health":
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"OK")
        else:
            time.sleep(30)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args):
        pass


def test_a_silent_tracking_server_fails_in_one_line_within_the_deadline(tmp_path):
    """F17: every tracking call has a deadline (LAB_TRACKING_TIMEOUT); the error names the server
    without its credentials. MLflow's own client waits 120 s a try, 8 tries."""
    silent = ThreadingHTTPServer(("127.0.0.1", 0), _Silent)
    silent.daemon_threads = True
    threading.Thread(target=silent.serve_forever, daemon=True).start()
    port = silent.server_address[1]
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["LAB_TRACKING_TIMEOUT"] = "1"
    started = time.monotonic()
    try:
        done = _lab("runs", "--tracking-uri", f"http://alice:s3cret@127.0.0.1:{port}", env=env, cwd=tmp_path)
    finally:
        silent.shutdown()
    # 3 tries of 1 s and 2 s of backoff, after the import of mlflow
    assert time.monotonic() - started < 60
    assert done.returncode == 5, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"error: MLflow tracking store http://127.0.0.1:{port} failed while opening experiment 'lab': "
        "no answer within 1 s (setting tracking_timeout)"]
    assert "s3cret" not in done.stdout + done.stderr
    assert not (tmp_path / ".lab").exists()  # nothing of a server's kept on this disk


def test_an_old_experiment_keeping_artifacts_on_a_client_disk_is_named(tmp_path, tracking_server):
    """T2: an experiment an older lab made on a server with a file:// location (one client's disk)
    is named in one line with the command that retires it."""
    from mlflow import MlflowClient

    old = (tmp_path / "laptop" / ".lab" / "mlflow" / "artifacts").as_uri()
    exp_id = MlflowClient(tracking_server).create_experiment("lab", artifact_location=old)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    done = _lab("runs", "--tracking-uri", tracking_server, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    warned = [line for line in done.stderr.splitlines() if line.startswith("warning:")]
    assert warned == [
        f"warning: experiment 'lab' on {tracking_server} keeps its artifacts at {old}, the disk of the machine that "
        "created it (an older lab did): run folders and bundles logged there are out of other machines' reach; "
        f"rename it (`MLFLOW_TRACKING_URI={tracking_server} mlflow experiments rename --experiment-id {exp_id} "
        "--new-name lab-local-artifacts`) and lab makes a new one whose artifacts the server keeps"], done.stderr


@pytest.fixture
def refusing_server(tmp_path):
    """A real tracking server whose artifact destination cannot be written (a file where its folder
    should be): every artifact upload is answered HTTP 500, everything else works."""
    (tmp_path / "blocker").write_text("not a folder")
    port = free_port()
    mlflow = str(Path(sys.executable).with_name("mlflow"))
    proc = subprocess.Popen([mlflow, "server", "--backend-store-uri", f"sqlite:///{tmp_path / 'mlflow.db'}",
                             "--artifacts-destination", str(tmp_path / "blocker" / "artifacts"), "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], cwd=tmp_path, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(f"http://127.0.0.1:{port}/health", proc)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
            proc.wait(timeout=30)


def test_a_failed_export_ends_its_run_failed_and_leaves_no_model_without_a_version(tmp_path, refusing_server):
    """F17: an export the server fails ends the run FAILED and registers nothing (the bundle is
    uploaded before the registered model is made); a server gone for good is named with the run
    it left RUNNING and how to remove it."""
    from mlflow import MlflowClient

    from lab import track

    uri, proc = refusing_server
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text("{}")
    where = track.Tracking(uri, timeout=5)  # handed down, as an edge hands its workspace's
    _, c, exp_id = track.client(where)
    run_id = c.create_run(exp_id).info.run_id
    with pytest.raises(track.TrackingError) as refused:
        track.export_model(run_id, bundle, "team-model", config_json="{}", assemble_json="{}", verdict="GO", uri=where)
    assert str(refused.value) == (f"MLflow tracking store {uri} failed while uploading the model of run {run_id} "
                                  "(its bundle): it kept answering HTTP 500")
    assert refused.value.exit_code == 5
    server = MlflowClient(uri)
    assert server.get_run(run_id).info.status == "FAILED"
    assert server.search_registered_models() == []  # no registered model without a version
    second = c.create_run(exp_id).info.run_id
    with pytest.raises(track.TrackingError) as ended:
        with track.run("cut short", "eval", uri=where) as (_, _, killed):
            os.killpg(proc.pid, 9)  # the server gone: the runs cannot be ended, and the errors say so
            proc.wait(timeout=30)
    assert str(ended.value) == (
        f"MLflow tracking store {uri} failed while ending run {killed} (cut short): connection refused; "
        f"run {killed} is left RUNNING: when the server is back, "
        f"`MLFLOW_TRACKING_URI={uri} mlflow runs delete --run-id {killed}`")
    started = time.monotonic()
    with pytest.raises(track.TrackingError) as gone:
        track.export_model(second, bundle, "team-model", config_json="{}", assemble_json="{}", verdict="GO",
                           uri=where)
    assert time.monotonic() - started < 30
    assert str(gone.value) == (
        f"MLflow tracking store {uri} failed while uploading the model of run {second} (its bundle): "
        f"connection refused; run {second} is left RUNNING: when the server is back, "
        f"`MLFLOW_TRACKING_URI={uri} mlflow runs delete --run-id {second}`")


def test_the_printed_ui_and_env_lines_never_carry_a_database_password():
    from lab.track import env_line, ui_command

    for line in (ui_command("postgresql://lab:DBPASS@db.example/mlflow"),
                 env_line("postgresql://lab:DBPASS@db.example/mlflow")):
        assert "DBPASS" not in line and "db.example/mlflow" in line


def test_the_printed_ui_line_names_this_environments_mlflow_and_works_as_printed(tmp_path):
    import shlex
    import subprocess
    import sys

    from lab.track import ui_command

    line = ui_command(f"sqlite:///{tmp_path / 'mlflow.db'}")
    program = shlex.split(line)[0]
    assert program == str(Path(sys.executable).parent / "mlflow")  # the venv's, not whatever PATH holds
    got = subprocess.run([program, "ui", "--help"], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and "--backend-store-uri" in got.stdout


def test_a_run_whose_end_could_not_be_told_is_said_beside_the_bodys_own_error(tmp_path, monkeypatch, caplog):
    import logging

    from lab import track
    from lab.track import runs

    monkeypatch.setattr(runs, "end_run", lambda c, run_id, status, uri=None: f"run {run_id} is left RUNNING: delete it")
    caplog.set_level(logging.WARNING, logger="lab.track")
    with pytest.raises(ZeroDivisionError):
        with track.run("body fails", "eval", uri=f"sqlite:///{tmp_path / 'mlflow.db'}"):
            1 / 0
    assert any("is left RUNNING: delete it" in r.getMessage() for r in caplog.records)


def test_the_tracking_store_and_its_deadline_are_handed_down_not_read_from_the_installed_workspace():
    """Issue 56: lab.track takes the edge's ``Tracking`` (its workspace's URI and timeout); the
    installed workspace is not read below the edges, and a bare URI or None has the built-in defaults."""
    from lab import track, workspace
    from lab.track.connect import failure, timeout_of

    installed = workspace.use(tracking_uri="http://127.0.0.1:9/installed", tracking_timeout=7)
    assert track.tracking_uri(None) == f"sqlite:///{(track.DEFAULT_DIR / 'mlflow.db').resolve()}"
    handed = track.Tracking.of(installed)
    assert (track.tracking_uri(handed), timeout_of(handed)) == ("http://127.0.0.1:9/installed", 7)
    assert timeout_of("http://x") == timeout_of(None) == workspace.Workspace().tracking_timeout
    import requests

    assert failure(requests.exceptions.ReadTimeout(), timeout_of(handed)) == (
        "no answer within 7 s (setting tracking_timeout)")


def test_a_store_named_by_one_call_does_not_become_the_environments(tmp_path):
    """MLflow writes the URI it is given into $MLFLOW_TRACKING_URI (for its subprocesses): a library
    call naming one store left it there, and a notebook server started later by the same process
    logged into that store instead of the one its environment named (a CI run failed on it)."""
    import mlflow

    from lab import track

    before = os.environ.get("MLFLOW_TRACKING_URI")
    named = f"sqlite:///{tmp_path / 'named' / 'mlflow.db'}"
    _, c, exp_id = track.client(named)
    assert os.environ.get("MLFLOW_TRACKING_URI") == before, "the named store leaked into the environment"
    # this process's own runs still go where the call said
    assert mlflow.get_tracking_uri() == named and c.get_experiment(exp_id).name == track.EXPERIMENT
    child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('MLFLOW_TRACKING_URI'))"],
                           capture_output=True, text=True, timeout=60)
    assert child.stdout.strip() == str(before)
