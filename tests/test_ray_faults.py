"""A Ray address where something else answers, and Ray's token authentication: each a one-line
error naming the problem, in bounded time (issue 55, F9 and F10). A cluster's head lost mid-job is
the fault suite's full form's (group ray)."""
from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ray_cluster import not_ray, two_node_cluster

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("ray") if not os.environ.get("CI") else None  # the ray extra: CI has it


def lab_eval(address: str, out: Path, env: dict[str, str] | None = None, model: str = "fake-hash-256",
             timeout: float = 60, presets: tuple[str, ...] = ("lab",)) -> tuple[int, list[str], float]:
    """`lab eval --ray-address` as a user runs it: exit code, its non-blank output lines, seconds."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    base.update({"RAY_ADDRESS": "", "LAB_ENGINE": "", "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"})
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", *presets,
                           "--model", model, "--no-track", "--quiet", "--out", str(out), "--ray-address", address],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT, env={**base, **(env or {})})
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    return proc.returncode, lines, time.monotonic() - started


@pytest.fixture(scope="module")
def listeners():
    with not_ray() as found:
        yield found


@pytest.mark.parametrize("label, scheme, says", [
    ("an HTTP server", "", "found an HTTP server"),
    ("an HTTP server", "ray://", "found an HTTP server"),
    ("a silent TCP listener", "", "a TCP listener that said nothing"),
    ("a listener that closes at once", "", "closed the connection without an answer"),
    ("a gRPC server that is not Ray", "", "a gRPC server answers there but not Ray's GCS"),
    ("a gRPC server that is not Ray", "ray://", "a gRPC server answers there but not Ray Client's"),
    ("a closed port", "", "nobody listens there"),
    ("an HTTP server", "http://", "is not a Ray address"),
])
def test_an_address_where_ray_does_not_answer_is_one_line_naming_it(listeners, tmp_path, label, scheme, says):
    address = scheme + listeners[label]
    code, lines, seconds = lab_eval(address, tmp_path / "runs")
    assert code == 2, lines  # lab's code for a bad input or an unreachable service (ValidationError)
    assert len(lines) == 1 and lines[0].startswith("error: ") and address in lines[0] and says in lines[0], lines
    assert seconds < 30 and not (tmp_path / "runs").exists()


def test_a_token_given_alone_turns_token_mode_on_for_the_driver():
    from lab.cli.common import ray_auth

    assert ray_auth({"RAY_AUTH_TOKEN": "t"}) == "token"
    assert ray_auth({"RAY_AUTH_TOKEN_PATH": "/tmp/t"}) == "token"
    assert ray_auth({"RAY_AUTH_TOKEN": "t", "RAY_AUTH_MODE": "disabled"}) is None  # the user's own choice stands
    assert ray_auth({}) is None


@pytest.mark.slow
def test_a_two_node_cluster_with_token_auth_runs_a_lab_job_and_refuses_a_bad_token_in_one_line(tmp_path):
    token, wrong = secrets.token_hex(16), secrets.token_hex(16)
    with two_node_cluster(token) as cluster:
        # the token alone, as docs/scale.md says: lab turns the driver's token mode on
        code, lines, _ = lab_eval(cluster.address, tmp_path / "ok", {"RAY_AUTH_TOKEN": token}, timeout=300)
        assert code == 0, lines[-20:]
        # the engine line also names the log Ray's own start-up output goes to
        assert any(line.startswith(f"engine: ray ({cluster.address}, 2 workers); its own output: ") for line in lines)
        assert (tmp_path / "ok" / "demo+fake-lab" / "run.trec").is_file()
        token_file = tmp_path / "token"
        token_file.write_text(token)
        code, lines, _ = lab_eval(cluster.address, tmp_path / "ok-file", {"RAY_AUTH_TOKEN_PATH": str(token_file)},
                                  timeout=300)
        assert code == 0, lines[-20:]
        cases = [({}, "requires token authentication and this driver has no token"),
                 ({"RAY_AUTH_TOKEN": wrong}, "refused this driver's token"),
                 ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": wrong}, "refused this driver's token"),
                 ({"RAY_AUTH_MODE": "token", "HOME": str(tmp_path)}, "no token was found")]
        for env, says in cases:
            code, lines, seconds = lab_eval(cluster.address, tmp_path / "refused", env)
            assert code == 2 and len(lines) == 1 and says in lines[0] and cluster.address in lines[0], (env, lines)
            assert token not in lines[0] and wrong not in lines[0] and seconds < 30
            assert not (tmp_path / "refused").exists()


# (A cluster's head SIGKILLed mid-job, one line in bounded time and no run folder: the fault suite's
# full form, group ray, case "SIGKILL the head mid-`lab eval` (embedding on its workers)", with the
# same checks: benchmarks/faults/group_ray.py, docs/faults.md.)
