"""Every page lab offers a person renders with no network: the four marimo apps (`marimo run`),
`lab serve`'s /docs, and the DVC plots page. Chromium runs with every request that is not to
localhost (or a data:/blob:/file: URL) aborted and recorded; a page passes when its content is on
screen and it asked for nothing outside."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest

from tests.serving import Server, free_port, write_bundle

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

# per app: its arguments and a text on screen once its cells ran (so an empty page cannot pass)
APPS = {
    "tune": ([], "recall@10"),
    "sweep": (["--sweep", "demo-small"], "Top configurations"),
    "errors": ([], "gold memories outside the top"),
    "context": ([], "Skipped, and why"),
}


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing under CI: .ci/setup installs Debian's chromium package")
        pytest.skip("no Chromium on this machine (Debian: apt-get install chromium); the browser test needs it")
    return path


class OfflineBrowser:
    """A Chromium page that may reach localhost only; ``outside`` lists what it tried to fetch elsewhere."""

    def __enter__(self) -> "OfflineBrowser":
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=_chromium(), args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync",
            "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1"])
        self.context = self.browser.new_context(viewport={"width": 1400, "height": 1800})
        self.outside: list[str] = []

        def gate(route) -> None:
            url = route.request.url
            if url.startswith(("data:", "blob:", "file:")) or urlparse(url).hostname in ("127.0.0.1", "localhost"):
                route.continue_()
            else:
                self.outside.append(url)
                route.abort()

        self.context.route("**/*", gate)
        return self

    def page(self):
        return self.context.new_page()

    def __exit__(self, *exc) -> None:
        self.browser.close()
        self._pw.stop()


def _wait_http(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, f"{url} did not answer within {seconds:.0f} s"
        time.sleep(0.3)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """An evaluation root of its own and a tracked demo sweep (for the sweep app)."""
    root = tmp_path_factory.mktemp("offline")
    env = {**os.environ, "LAB_EVAL_ROOT": str(root / "eval"), "PYTHONUNBUFFERED": "1",
           "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    subprocess.run([str(BIN / "lab"), "sweep", str(ROOT / "goldens/sweeps/demo.yaml"), "--out", str(root / "sweeps"),
                    "--quiet"], env=env, cwd=root, check=True, capture_output=True, timeout=900)
    return root, env


@pytest.mark.parametrize("name", sorted(APPS))
def test_each_marimo_app_renders_offline(workspace, name):
    root, env = workspace
    args, marker = APPS[name]
    port = free_port()
    server = subprocess.Popen([str(BIN / "marimo"), "run", str(ROOT / "notebooks" / f"{name}.py"), "--headless",
                               "--no-token", "--host", "127.0.0.1", "--port", str(port), "--", *args],
                              env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        _wait_http(url, 60)
        with OfflineBrowser() as b:
            page = b.page()
            page.goto(url)
            page.get_by_text(marker).first.wait_for(timeout=180_000)
            if name in ("sweep", "tune"):  # the charts drew (vega-embed renders from marimo's own files)
                page.locator(".vega-embed").first.wait_for(timeout=60_000)
                box = page.locator(".vega-embed").first.bounding_box()
                assert box and box["width"] > 100 and box["height"] > 100, box
            body = page.inner_text("body")
            assert "Traceback" not in body and "undefined" not in body
            assert b.outside == [], b.outside
    finally:
        server.terminate()
        server.wait(30)


def test_the_api_docs_render_offline(tmp_path):
    bundle = write_bundle(tmp_path / "bundle")
    with Server(bundle, tmp_path / "store") as server, OfflineBrowser() as b:
        page = b.page()
        page.goto(server.url + "/docs")
        page.locator(".swagger-ui .opblock").first.wait_for(timeout=60_000)  # the operations, drawn
        assert page.get_by_text("/v1/search").count() >= 1
        assert b.outside == [], b.outside


def test_the_dvc_plots_page_renders_offline(tmp_path):
    """The plots are SVG images beside their CSV data: the page embeds them and needs no script."""
    plots = tmp_path / "repo" / ".lab" / "dvc" / "plots"
    plots.mkdir(parents=True)
    from lab.flow.stages import _svg

    _svg(plots / "recall_curve.svg", "recall@k", lambda ax: ax.plot([1, 5, 10], [0.4, 0.7, 0.8], marker="o"))
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    dvc = str(BIN / "dvc")
    subprocess.run([dvc, "init", "-q"], cwd=repo, check=True)
    (repo / "dvc.yaml").write_text("plots:\n  - .lab/dvc/plots/recall_curve.svg\n")
    shown = subprocess.run([dvc, "plots", "show", "-o", str(tmp_path / "out")], cwd=repo, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    html = (tmp_path / "out" / "index.html").read_text()
    assert "cdn.jsdelivr" not in html and "<img" in html
    with OfflineBrowser() as b:
        page = b.page()
        page.goto((tmp_path / "out" / "index.html").as_uri())
        img = page.locator("img").first
        img.wait_for(timeout=30_000)
        assert page.evaluate("(i) => i.complete && i.naturalWidth > 0", img.element_handle())
        assert b.outside == [], b.outside


def test_an_exported_notebook_renders_offline(workspace):
    """`lab export-notebook`: marimo's own export loads its frontend from a CDN (blank offline); this
    page loads it from the copy beside it, served from localhost."""
    root, env = workspace
    out = root / "exported"
    got = subprocess.run([str(BIN / "lab"), "export-notebook", "sweep", "--out", str(out), "--args", "--sweep demo-small"],
                         env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    html = (out / "sweep.html").read_text(encoding="utf-8")
    assert "cdn.jsdelivr.net" not in html and "./marimo-static/" in html
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "http.server", "-d", str(out), str(port), "--bind", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_http(f"http://127.0.0.1:{port}/sweep.html", 30)
        with OfflineBrowser() as b:
            page = b.page()
            page.goto(f"http://127.0.0.1:{port}/sweep.html")
            page.get_by_text("Top configurations").first.wait_for(timeout=120_000)
            page.locator(".vega-embed").first.wait_for(timeout=60_000)
            assert b.outside == [], b.outside
    finally:
        server.terminate()
        server.wait(30)
