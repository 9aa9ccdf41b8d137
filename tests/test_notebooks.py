"""The marimo notebooks: each runs as a script and exports to HTML on the demo data, and the tune
notebook works in a real browser (headless Chromium driven by Playwright): moving the RRF k slider
changes the recall shown, the log button records an MLflow run, the gate button shows a verdict."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from lab.search.presets import preset

from tests.browser import chromium as find_chromium
from tests.serving import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

# per notebook: its arguments and a text its output must hold (so an empty page cannot pass)
NOTEBOOKS = {
    "tune": ([], "recall-at-10"),
    "sweep": (["--sweep", "demo-small"], "Top configurations"),
    "errors": ([], "gold memories outside the top"),
    "context": ([], "Skipped, and why"),
}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs_as_a_script_and_exports_to_html(notebook_workspace, name):
    root, env = notebook_workspace
    args, marker = NOTEBOOKS[name]
    args = args + ["--out", str(root / "out")] if name == "tune" else args
    script = subprocess.run([sys.executable, str(ROOT / "notebooks" / f"{name}.py"), *args], env=env, cwd=root,
                            capture_output=True, text=True, timeout=600)
    assert script.returncode == 0, script.stderr[-3000:]
    html = root / f"{name}.html"
    export = subprocess.run([str(BIN / "marimo"), "export", "html", str(ROOT / "notebooks" / f"{name}.py"), "-o", str(html),
                             "--", *args], env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert export.returncode == 0, export.stdout[-2000:] + export.stderr[-3000:]
    text = html.read_text(encoding="utf-8")
    assert marker in text and "Traceback" not in text


@pytest.fixture(scope="module")
def clean_checkout(tmp_path_factory):
    """The project's committed files in a folder of their own, with no `.lab/` and an environment
    holding none of lab's switches: what a newcomer has right after `git clone`."""
    root = tmp_path_factory.mktemp("clean-checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, listed.decode().split("\0")):
        if (ROOT / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, root / name)
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("LAB_") and k != "LAB_DATASETS") and k != "MLFLOW_TRACKING_URI"}
    return root, {**env, "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_each_notebook_runs_from_a_clean_checkout_with_the_real_model(clean_checkout, name):
    """Before any `lab demo`: the notebook builds what it needs with the real model (under marimo,
    sentence-transformers pulls transformers' Trainer, which imports IPython), or says how to make
    it (the sweep notebook with no sweep tracked)."""
    root, env = clean_checkout
    script = subprocess.run([sys.executable, f"notebooks/{name}.py"], env=env, cwd=root,
                            capture_output=True, text=True, timeout=900)
    assert script.returncode == 0, script.stderr[-3000:]
    assert "Traceback" not in script.stderr, script.stderr[-3000:]
    if name == "sweep":
        html = root / "sweep.html"
        export = subprocess.run([str(BIN / "marimo"), "export", "html", "notebooks/sweep.py", "-o", str(html)],
                                env=env, cwd=root, capture_output=True, text=True, timeout=600)
        assert export.returncode == 0, export.stderr[-3000:]
        assert "No sweep is tracked yet" in html.read_text(encoding="utf-8")
    else:
        assert (root / ".lab" / "eval").is_dir()  # it built its evaluation store here, not elsewhere


def test_tune_notebook_in_a_real_browser(notebook_workspace):
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    root, env = notebook_workspace
    port = free_port()
    server = subprocess.Popen([str(BIN / "marimo"), "run", str(ROOT / "notebooks" / "tune.py"), "--headless", "--no-token",
                               "--host", "127.0.0.1", "--port", str(port), "--", "--out", str(root / "browser")],
                              env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "marimo run did not answer within 60 s"
            time.sleep(0.3)
        with sync_playwright() as p:
            # the flags keep Chromium off the network this machine does not have
            browser = p.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync"])
            page = browser.new_page(viewport={"width": 1400, "height": 1800})
            page.goto(url)
            recall = page.locator("#recall-at-10").first
            recall.wait_for(timeout=120_000)
            before = recall.inner_text()
            k = page.get_by_role("slider").first  # RRF k: the first slider on the page
            start = float(k.get_attribute("aria-valuenow"))
            assert start == preset("lab").fusion.k  # the notebook opens on lab
            k.focus()
            for _ in range(25):
                page.keyboard.press("ArrowRight")
            page.wait_for_function(
                "before => { const e = document.querySelector('#recall-at-10'); return e && e.innerText !== before; }",
                arg=before, timeout=30_000)
            assert float(k.get_attribute("aria-valuenow")) == start + 25  # one step per key press
            after = recall.inner_text()
            assert float(after) != float(before)
            page.get_by_role("button", name="log this configuration to MLflow").click()
            logged = page.locator("#logged-run").first
            logged.wait_for(timeout=120_000)
            run_id = logged.inner_text().strip()
            page.get_by_role("button", name="run the gate on it").click()
            verdict = page.locator("#gate-verdict").first
            verdict.wait_for(timeout=300_000)
            assert verdict.inner_text() in ("GO", "NO-GO")
            assert page.locator(".marimo-error").count() == 0
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    from lab import track

    uri = env["MLFLOW_TRACKING_URI"]  # the tests' own MLflow store, which the notebook server was given
    _, c, _ = track.client(uri)
    try:
        tags = c.get_run(run_id).data.tags
    except Exception as exc:  # say where the run went instead, if anywhere
        stray = sorted(str(p) for p in root.rglob("mlflow.db"))
        raise AssertionError(f"run {run_id} is not in {uri} ({exc}); other stores under the notebook's folder: "
                             f"{stray}") from None
    assert "notebook" in tags.values() and str(root / "browser") in " ".join(tags.values()), tags


@pytest.mark.parametrize("name, args, message", [
    ("context", ["--question", "demo-q001"], "--question 'demo-q001' is not a question of demo; its questions are demo-001"),
    ("tune", ["--dataset", "nope"], "--dataset 'nope' is not one of ['demo', 'locomo', 'scifact']"),
    ("sweep", ["--sweep", "nope"], "no sweep run 'nope' in MLflow"),
    ("errors", ["--datset", "demo"], "unknown argument(s) --datset; this notebook takes --dataset, --preset, --config"),
])
def test_a_bad_notebook_argument_is_one_line_naming_it(notebook_workspace, name, args, message):
    root, env = notebook_workspace
    got = subprocess.run([sys.executable, str(ROOT / "notebooks" / f"{name}.py"), *args], env=env, cwd=root,
                         capture_output=True, text=True, timeout=600)
    assert got.returncode == 2, got.stderr[-2000:]
    assert message in got.stderr and "Traceback" not in got.stderr
    assert len([line for line in got.stderr.splitlines() if line.startswith("error:")]) == 1
