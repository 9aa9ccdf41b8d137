"""The champion a newcomer meets after `lab demo`: one registered version however often the demo
runs, loadable with MLflow from another folder using only the line `lab demo` prints (its store
packed inside it, a signature and input example, requirements that name where lab came from),
and served over REST with one flag (`lab serve --demo`) on the demo data it was judged on."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.serving import free_port

BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow


FRESH_TEST = "test_the_champion_rebuilds_in_a_fresh_environment_from_its_own_requirements"


@pytest.fixture(scope="module")
def demo_twice(tmp_path_factory, request):
    """`lab demo` run twice in a folder of its own (real model, MLflow under its .lab/). When the
    fresh-environment test is to run, its install of the model's requirements starts once the first
    run has logged the model (the second run registers no new one) and goes on beside the tests
    before it: minutes of unpacking wheels that would otherwise be waited for alone."""
    root = tmp_path_factory.mktemp("champion")
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("LAB_") and k != "LAB_DATASETS") and k != "MLFLOW_TRACKING_URI"}
    outs, fresh = [], None
    try:
        for run in range(2):
            got = subprocess.run([str(BIN / "lab"), "demo"], cwd=root, env=env, capture_output=True, text=True,
                                 timeout=900)
            assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-3000:]
            outs.append(got.stdout)
            if run == 0 and any(item.name == FRESH_TEST for item in request.session.items):
                fresh = FreshInstall.start(model_folder(root), tmp_path_factory.mktemp("fresh-env"))
        yield root, env, outs, fresh
    finally:
        if fresh is not None:
            fresh.stop()


class FreshInstall:
    """A new virtual environment and, running in the background, pip installing into it nothing but
    a model folder's requirements.txt (from the package index pip is configured with)."""

    def __init__(self, folder: Path, venv: Path, proc: subprocess.Popen, log: Path):
        self.folder, self.venv, self.proc, self.log = folder, venv, proc, log

    @classmethod
    def start(cls, folder: Path, where: Path) -> "FreshInstall":
        venv = where / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        log = where / "pip.log"
        with log.open("w") as out:
            # (--no-compile: byte-compiling torch's and the rest's sources is a minute here, and proves nothing)
            proc = subprocess.Popen([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                     "--disable-pip-version-check", "--no-compile",
                                     "-r", str(folder / "requirements.txt")], stdout=out, stderr=subprocess.STDOUT)
        return cls(folder, venv, proc, log)

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:  # the test was not reached (or failed before waiting): end pip, by its PID
            self.proc.kill()
            self.proc.wait(timeout=60)
        # the environment holds torch and the rest (GBs): CI's disk is not ours to fill for the session
        shutil.rmtree(self.venv, ignore_errors=True)


def test_lab_demo_twice_registers_one_version(demo_twice):
    root, env, (first, second), _ = demo_twice
    assert "registered models:/lab-memory-demo@champion (version 1)" in first
    assert "registered models:/lab-memory-demo@champion (version 1: the same bundle as before" in second
    runs = subprocess.run([str(BIN / "lab"), "runs", "-n", "1"], cwd=root, env=env, capture_output=True, text=True)
    assert runs.returncode == 0, runs.stderr
    # `lab runs` names every champion; the demo's is its own, not the user's lab-memory
    assert re.findall(r"champion: (\S+) \(version (\d+)", runs.stdout) == [("models:/lab-memory-demo@champion", "1")]


def test_the_champion_loads_from_another_folder_with_only_what_lab_demo_prints(demo_twice, tmp_path):
    root, env, (_, second), _ = demo_twice
    line = re.search(r"export (MLFLOW_TRACKING_URI)=(\S+)", second)
    assert line, second[-1500:]
    # the store it was judged on moved away: the model carries its own copy
    stores = root / ".lab" / "eval" / "stores"
    shutil.move(stores, root / "moved-stores")
    try:
        code = ("import json, mlflow, pandas as pd\n"
                "m = mlflow.pyfunc.load_model('models:/lab-memory-demo@champion')\n"
                "sig = m.metadata.signature\n"
                "out = m.predict(pd.DataFrame({'query': ['why did billing fail?'], 'namespace': ['atlas'], 'k': [3]}))\n"
                "many = m.predict({'query': ['why did billing fail?', 'who owns the roadmap?'], 'namespace': ['atlas'] * 2})\n"
                "print(json.dumps({'inputs': sig.inputs.input_names(), 'outputs': sig.outputs.input_names(),\n"
                "                  'ids': out.iloc[0]['memory_ids'], 'rows': len(many),\n"
                "                  'source': m.metadata.get_model_info().model_uri}))\n")
        clean = {k: v for k, v in env.items() if k != "LAB_DATASETS"}
        got = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**clean, line[1]: line[2]},
                             capture_output=True, text=True, timeout=300)
    finally:
        shutil.move(root / "moved-stores", stores)
    assert got.returncode == 0, got.stderr[-3000:]
    answer = json.loads(got.stdout.strip().splitlines()[-1])
    assert answer["inputs"] == ["query", "namespace", "k", "budget"]
    assert answer["outputs"][:3] == ["query", "namespace", "memory_ids"]
    assert len(answer["ids"]) == 3 and all(i.startswith("atlas-") for i in answer["ids"])
    assert answer["rows"] == 2
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "mlruns").exists()  # nothing stray left behind

    # the logged model: an input example, lab's own code, and requirements that name no path of
    # this machine (lab travels as code inside the model)
    folder = model_folder(root)
    example = json.loads((folder / "input_example.json").read_text())
    assert "atlas" in json.dumps(example) or "namespace" in json.dumps(example)
    requirements = (folder / "requirements.txt").read_text()
    assert "file://" not in requirements and not re.search(r"^lab\b", requirements, re.M), requirements
    assert re.search(r"^mlflow==", requirements, re.M) and re.search(r"^hnswlib==", requirements, re.M)
    assert (folder / "code" / "lab" / "track" / "model.py").is_file()
    assert (folder / "artifacts" / "bundle" / "store" / "lab-store.json").is_file()


def model_folder(root: Path) -> Path:
    model_dirs = list((root / ".lab" / "mlflow" / "artifacts").rglob("MLmodel"))
    assert len(model_dirs) == 1, model_dirs  # one version, logged once
    return model_dirs[0].parent


def test_the_printed_load_line_runs_as_printed_and_shows_ids_and_context(demo_twice, tmp_path):
    root, env, (_, second), _ = demo_twice
    exported = re.search(r"export (MLFLOW_TRACKING_URI)=(\S+)", second)
    line = re.search(r"^ +(\S+) -c '(.+)'$", second, re.M)
    assert exported and line, second[-1500:]
    assert line[1] == sys.executable  # the project's own interpreter, by its path
    clean = {k: v for k, v in env.items() if k != "LAB_DATASETS"}
    got = subprocess.run([line[1], "-c", line[2]], cwd=tmp_path, env={**clean, exported[1]: exported[2]},
                         capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    ids, context = got.stdout.split("\n", 1)
    assert ids.startswith("['atlas-") and "..." not in ids  # the whole list, not a truncated frame
    assert len(context.strip()) > 100 and "memory_ids" not in context


def test_the_champion_rebuilds_in_a_fresh_environment_from_its_own_requirements(demo_twice, tmp_path):
    """A virtual environment with nothing but the model's requirements.txt installed (from the
    package index pip is configured with; the install began after the first `lab demo`, see
    demo_twice) loads the model from its folder alone and answers."""
    root, env, _, fresh = demo_twice
    folder = model_folder(root)
    assert fresh is not None and fresh.folder == folder  # the one logged model's own requirements
    assert fresh.wait(timeout=1500) == 0, fresh.log.read_text()[-5000:]
    python = fresh.venv / "bin" / "python"
    # nothing of this checkout is importable there: lab comes from the model's own code folder
    assert subprocess.run([str(python), "-c", "import lab"], cwd=tmp_path, capture_output=True).returncode != 0
    code = ("import json, sys, mlflow\n"
            f"m = mlflow.pyfunc.load_model({str(folder)!r})\n"
            "import lab\n"
            "r = m.predict({'query': ['why did billing fail?'], 'namespace': ['atlas'], 'k': [3]}).iloc[0]\n"
            "print(json.dumps({'ids': list(r.memory_ids), 'lab': lab.__file__, 'context': r.context}))\n")
    clean = {k: v for k, v in env.items() if not k.startswith(("LAB_", "MLFLOW_", "PYTHON", "VIRTUAL_ENV"))}
    got = subprocess.run([str(python), "-c", code], cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    answer = json.loads(got.stdout.strip().splitlines()[-1])
    assert len(answer["ids"]) == 3 and all(i.startswith("atlas-") for i in answer["ids"])
    assert answer["lab"].startswith(str(folder / "code" / "lab"))
    assert answer["context"]


def test_lab_serve_demo_answers_a_search_on_the_demo_data(demo_twice):
    root, env, _, _ = demo_twice
    port = free_port()
    server = subprocess.Popen([str(BIN / "lab"), "serve", "--demo", "--port", str(port)], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline, ready = time.monotonic() + 180, False
        while time.monotonic() < deadline and server.poll() is None:
            try:
                ready = httpx.get(f"http://127.0.0.1:{port}/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                pass
            if ready:
                break
            time.sleep(0.5)
        assert ready, server.stdout.read() if server.poll() is not None else "not ready in 180 s"
        hits = httpx.post(f"http://127.0.0.1:{port}/v1/search", timeout=30,
                          json={"query": "why did the billing service fail in February?", "namespace": "atlas", "k": 3})
        assert hits.status_code == 200, hits.text
        ids = [r["memory_id"] for r in hits.json()["results"]]
        # the demo data: the February billing incident and its replayed charges
        assert len(ids) == 3 and {"atlas-0085", "atlas-0092"} <= set(ids), ids
    finally:
        server.terminate()
        out = server.communicate(timeout=30)[0]
    # it said which model version and which store it serves
    assert "serving models:/lab-memory-demo@champion (version 1)" in out, out[-2000:]
    assert "from store .lab/serve/demo (version" in out and "atlas" in out
    assert "seeded from the store the champion was judged on" in out
    assert (root / ".lab" / "serve" / "demo" / "lab-store.json").is_file()


def test_serve_demo_refuses_a_second_model_choice(demo_twice):
    root, env, _, _ = demo_twice
    got = subprocess.run([str(BIN / "lab"), "serve", "--demo", "--model", "models:/x@champion"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 2 and "--demo serves models:/lab-memory-demo@champion" in got.stderr
