"""Every page lab offers a person renders with no network: the four marimo apps (`marimo run`),
`lab serve`'s /docs, and the DVC plots page. Chromium runs with every request that is not to
localhost (or a data:/blob:/file: URL) aborted and recorded; a page passes when its content is on
screen and it asked for nothing outside."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser import OfflineBrowser, wait_http
from tests.serving import Server, free_port, write_bundle
from tests.test_notebooks import NOTEBOOKS

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
pytestmark = pytest.mark.slow

@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_each_marimo_app_renders_offline(notebook_workspace, name):
    root, env = notebook_workspace
    args, marker = NOTEBOOKS[name]
    port = free_port()
    server = subprocess.Popen([str(BIN / "marimo"), "run", str(ROOT / "notebooks" / f"{name}.py"), "--headless",
                               "--no-token", "--host", "127.0.0.1", "--port", str(port), "--", *args],
                              env=env, cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_http(url, 60)
        with OfflineBrowser() as b:
            page = b.page()
            page.goto(url)
            shown = page.locator(f"#{marker}") if " " not in marker else page.get_by_text(marker)
            shown.first.wait_for(timeout=180_000)
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
    from lab.flow.layout import svg

    svg(plots / "recall_curve.svg", "recall@k", lambda ax: ax.plot([1, 5, 10], [0.4, 0.7, 0.8], marker="o"))
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


def test_an_exported_notebook_renders_offline(notebook_workspace):
    """`lab export-notebook`: marimo's own export loads its frontend from a CDN (blank offline); this
    page loads it from the copy beside it, served from localhost."""
    root, env = notebook_workspace
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
        wait_http(f"http://127.0.0.1:{port}/sweep.html", 30)
        with OfflineBrowser() as b:
            page = b.page()
            page.goto(f"http://127.0.0.1:{port}/sweep.html")
            page.get_by_text("Top configurations").first.wait_for(timeout=120_000)
            page.locator(".vega-embed").first.wait_for(timeout=60_000)
            assert b.outside == [], b.outside
    finally:
        server.terminate()
        server.wait(30)
