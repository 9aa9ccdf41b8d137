"""A real MLflow tracking server (`mlflow server`, SQLite backend, local artifacts) as teams share
one: lab eval, lab sweep, lab gate --export and lab serve work through --tracking-uri http://...; an
unreachable one is named in seconds, before any work."""
from __future__ import annotations

import os
import subprocess
import sys
import time
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
    from mlflow import MlflowClient

    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update({"LAB_PROJECT": str(ROOT), "LAB_EVAL_ROOT": str(tmp_path / "eval")})
    done = _lab("eval", "--dataset", "demo", "--preset", "lab", "--tracking-uri", tracking_server, "--quiet",
                "--out", str(tmp_path / "runs"), env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_server)
    experiment = client.get_experiment_by_name("lab")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1 and runs[0].data.metrics["recall_at_10"] > 0.8
    spec = tmp_path / "sweep.yaml"
    spec.write_text("name: served-sweep\ndataset: demo\nbase: rrf-k60\nspace:\n  fusion.k: [2, 60]\n")
    swept = _lab("sweep", str(spec), "--tracking-uri", tracking_server, "--quiet", "--out", str(tmp_path / "sweeps"),
                 env=env, cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr[-3000:]
    sweep_runs = client.search_runs([experiment.experiment_id], "tags.mlflow.runName = 'sweep served-sweep'")
    assert len(sweep_runs) == 1  # the parent run, its best configurations as child runs beside it
    children = client.search_runs([experiment.experiment_id],
                                  f"tags.mlflow.parentRunId = '{sweep_runs[0].info.run_id}'")
    assert len(children) == 2
    gated = _lab("gate", "--config", str(ROOT / "goldens" / "gate-demo.yaml"), "--candidate", "lab", "--export",
                 "--tracking-uri", tracking_server, "--quiet", "--out", str(tmp_path / "gate"), env=env, cwd=tmp_path)
    assert gated.returncode == 0, gated.stderr[-3000:]
    champion = client.get_model_version_by_alias("lab-memory-demo", "champion")
    assert champion.version == "1"
    port = free_port()
    serve = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--demo", "--tracking-uri", tracking_server,
                              "--store", str(tmp_path / "served"), "--port", str(port)], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait(f"http://127.0.0.1:{port}/health", serve, 300)
        hits = httpx.post(f"http://127.0.0.1:{port}/v1/search", timeout=60,
                          json={"query": "why did the billing service fail?", "namespace": "atlas"}).json()
        assert hits["results"], hits  # the champion, loaded through the server, serves the demo store
    finally:
        os.killpg(serve.pid, 15)
        serve.wait(timeout=60)


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
        "start it (`mlflow server --backend-store-uri sqlite:///mlflow.db`), give another --tracking-uri, or --no-track"]
    assert not (tmp_path / "runs").exists()  # refused before any work: no run folder, no half-registered run
