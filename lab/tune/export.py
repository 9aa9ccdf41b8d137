"""A notebook exported as HTML that renders without a network.

`marimo export html` writes a page whose scripts come from a CDN (jsDelivr): offline it is blank.
The same files ship inside the marimo package (``marimo/_static``), so the export points its
script and style URLs at a copy of them beside the page. Browsers do not load module scripts
from a ``file://`` page, so the folder is viewed over HTTP from localhost (any static server:
``python -m http.server -d DIR``), still with no network.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from lab.errors import NotFoundError, ValidationError

ASSETS = "marimo-static"  # the folder beside the page holding marimo's frontend files


def cdn_prefix() -> str:
    import marimo

    return f"https://cdn.jsdelivr.net/npm/@marimo-team/frontend@{marimo.__version__}/dist/"


def marimo_static() -> Path:
    from importlib.resources import files

    return Path(str(files("marimo") / "_static"))


def localise(html: str) -> str:
    """``html`` with marimo's CDN URLs pointing at ``./marimo-static/``; ValidationError when the
    page names none (another marimo release lays its page out otherwise: nothing would be fixed)."""
    prefix = cdn_prefix()
    if prefix not in html:
        raise ValidationError(f"the exported page loads nothing from {prefix}: this marimo release writes its "
                              "pages differently, and the offline rewrite does not apply")
    return html.replace(prefix, f"./{ASSETS}/")


def export_offline(notebook: str | Path, out: str | Path, args: Sequence[str] = ()) -> Path:
    """Run ``notebook`` and write ``out/NAME.html`` with marimo's frontend copied to
    ``out/marimo-static`` (once per folder); returns the page's path."""
    notebook, out = Path(notebook), Path(out)
    if not notebook.is_file():
        raise NotFoundError(f"no notebook at {notebook}")
    out.mkdir(parents=True, exist_ok=True)
    page = out / f"{notebook.stem}.html"
    marimo = Path(sys.executable).parent / "marimo"
    done = subprocess.run([str(marimo if marimo.exists() else "marimo"), "export", "html", str(notebook), "-o",
                           str(page), "--force", "--", *args], capture_output=True, text=True)
    if done.returncode != 0 or not page.is_file():
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ValidationError(f"marimo export of {notebook} failed: {' / '.join(tail)}")
    page.write_text(localise(page.read_text(encoding="utf-8")), encoding="utf-8")
    if not (out / ASSETS / "index.html").is_file():
        shutil.copytree(marimo_static(), out / ASSETS, dirs_exist_ok=True)
    return page
