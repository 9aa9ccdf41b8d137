"""Every page lab offers a person renders with no network: the four marimo apps (`marimo run`),
`lab serve`'s /docs, the DVC plots page and an exported notebook opened as a file. Chromium runs with every request that is not to
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


def test_an_exported_notebook_renders_from_a_file_with_no_network(notebook_workspace):
    """`lab export-notebook`: marimo's own export loads its frontend from a CDN, and a page whose
    modules sit in files beside it is blank from file:// (Chromium refuses module scripts there).
    The page carries its frontend: opened as a file with every request refused, even to localhost,
    it reads nothing but itself, draws its charts and table, and shows no code until asked."""
    root, env = notebook_workspace
    out = root / "exported"
    got = subprocess.run([str(BIN / "lab"), "export-notebook", "sweep", "--out", str(out), "--args", "--sweep demo-small"],
                         env=env, cwd=root, capture_output=True, text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-3000:]
    page_file = out / "sweep.html"
    assert f"{page_file} (" in got.stdout and "MB" in got.stdout and "localhost" not in got.stdout, got.stdout
    assert sorted(p.name for p in out.iterdir()) == ["sweep.html"]  # one file, nothing beside it
    with OfflineBrowser(local=False) as b:
        page = b.page()
        read: list[str] = []
        page.on("request", lambda r: read.append(r.url) if not r.url.startswith(("data:", "blob:")) else None)
        page.goto(page_file.as_uri())
        page.get_by_text("Top configurations").first.wait_for(timeout=120_000)
        chart = page.locator(".vega-embed svg, .vega-embed canvas").first
        chart.wait_for(timeout=60_000)
        box = chart.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 100, box
        assert page.get_by_text("validation/recall@10").first.is_visible()  # the top-configurations table
        body = page.inner_text("body")
        assert "views.top_configurations" not in body and page.locator(".cm-editor").count() == 0  # code hidden
        assert b.outside == [], b.outside
        assert [u.split("?")[0] for u in read] == [page_file.as_uri()], read
