"""A notebook exported as one HTML file that renders from disk, with no server and no network.

`marimo export html` writes a page whose scripts come from a CDN (jsDelivr): offline it is blank.
The same files ship inside the marimo package (``marimo/_static``), but copying them beside the
page is not enough: a page opened from ``file://`` (double-clicked, or saved from an attachment)
may not load module scripts from files (Chromium refuses them as cross-origin), so it stayed blank.

The page therefore carries marimo's frontend itself: every module and style sheet its entry can
reach, gzip-compressed into one base64 block (about a third of their size). A short script unpacks
the block, gives each file a blob URL and, through an import map, answers the CDN URL the file
would have had with that blob. A relative import cannot resolve against a blob URL, so each
module's relative references (and its ``import.meta.url``) are first rewritten to those CDN URLs.
Style sheets get their fonts and images as data: URIs. Code cells start hidden: the page's menu
(or ``?show-code=true``) shows them.
"""
from __future__ import annotations

import base64
import gzip
import json
import mimetypes
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from lab.errors import NotFoundError, ValidationError

# the frontend's files as the modules name each other: "./cells-0PFKL3SH.css", `./react-DVplv7_D.js`
RELATIVE = re.compile(r"""(["'`])\./([\w.~-]+\.(?:js|css))\1""")
CSS_URL = re.compile(r"""url\((["']?)\./([^)"']+)\1\)""")
# every browser that runs marimo's frontend reads woff2: the woff and ttf fallbacks only add weight
FALLBACK_FONT = re.compile(r""",\s*url\(["']?\./[^)"']+\.(?:woff|ttf)["']?\)\s*format\(["'](?:woff|truetype)["']\)""")

UNPACK = """<script data-lab="unpack">
(async () => {
  const block = document.getElementById("lab-frontend");
  try {
    const text = atob(block.textContent.trim());
    const bytes = new Uint8Array(text.length);
    for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    const files = await new Response(stream).json();
    const base = block.dataset.base, imports = {};
    for (const [name, body] of Object.entries(files)) {
      const css = name.endsWith(".css");
      const url = URL.createObjectURL(new Blob([body], {type: css ? "text/css" : "text/javascript"}));
      // vite's preloader tells a style sheet from a module by how its URL ends, and marimo copies
      // into its widgets' shadow roots only the sheets whose URL ends so and names @marimo-team
      imports[base + name] = css ? url + "#/@marimo-team/" + name : url;
    }
    const map = document.createElement("script");
    map.type = "importmap";
    map.textContent = JSON.stringify({imports});
    document.head.append(map);
    await Promise.all(JSON.parse(block.dataset.styles).map((name) => new Promise((done) => {
      const link = document.createElement("link");
      link.rel = "stylesheet";
      link.href = imports[base + name];
      link.onload = link.onerror = done;
      document.head.append(link);
    })));
    const entry = document.createElement("script");
    entry.type = "module";
    entry.textContent = "import " + JSON.stringify(base + block.dataset.entry) + ";";
    document.head.append(entry);
  } catch (error) {
    document.body.insertAdjacentText("afterbegin", "This page could not unpack marimo's frontend (" + error +
      "); it needs a browser from 2023 or later (DecompressionStream, import maps).");
  }
})();
</script>"""

HIDE_CODE = """<script data-lab="hide-code">
// code cells start hidden; the page's menu, or ?show-code=true, shows them
if (!new URLSearchParams(location.search).has("show-code")) {
  const url = new URL(location.href);
  url.searchParams.set("show-code", "false");
  try { history.replaceState(history.state, "", url); } catch (error) { /* the code stays shown */ }
}
</script>"""


def cdn_prefix() -> str:
    import marimo

    return f"https://cdn.jsdelivr.net/npm/@marimo-team/frontend@{marimo.__version__}/dist/"


def marimo_static() -> Path:
    from importlib.resources import files

    return Path(str(files("marimo") / "_static"))


def data_uri(path: Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or {".woff2": "font/woff2"}.get(path.suffix, "application/octet-stream")
    return f"data:{kind};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def frontend_files(assets: Path, roots: Sequence[str], base: str) -> dict[str, str]:
    """The files under ``assets`` that ``roots`` reach through imports (static, dynamic and vite's
    preload lists), rewritten to load from blob URLs: each relative reference and each
    ``import.meta.url`` becomes the file's URL under ``base``; a style sheet's fonts and images
    become data: URIs."""
    files: dict[str, str] = {}
    todo = list(roots)

    def relink(m: re.Match) -> str:
        if not (assets / m.group(2)).is_file():
            return m.group(0)  # no file of the frontend: a key of a WebAssembly import object, say
        todo.append(m.group(2))
        return f"{m.group(1)}{base}{m.group(2)}{m.group(1)}"

    def inline(m: re.Match) -> str:
        return f"url({data_uri(assets / m.group(2))})" if (assets / m.group(2)).is_file() else m.group(0)

    while todo:
        name = todo.pop()
        if name in files:
            continue
        if not (assets / name).is_file():
            raise ValidationError(f"marimo's frontend has no {name} in {assets}: this marimo release lays its "
                                  "files out otherwise, and the page cannot be made self-contained")
        text = (assets / name).read_text(encoding="utf-8")
        if name.endswith(".css"):
            files[name] = CSS_URL.sub(inline, FALLBACK_FONT.sub("", text))
        else:
            files[name] = RELATIVE.sub(relink, text).replace("import.meta.url", json.dumps(base + name))
    return files


def pack(files: dict[str, str]) -> str:
    """``files`` as base64 of gzip-compressed JSON; the same files give the same text (mtime 0)."""
    raw = json.dumps(files, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return base64.b64encode(gzip.compress(raw, compresslevel=9, mtime=0)).decode("ascii")


def self_contained(html: str, static: Path | None = None) -> str:
    """``html`` (a `marimo export html` page) with marimo's frontend inside it instead of on a CDN,
    and code cells hidden at first; ValidationError when the page does not load its entry module
    from the CDN (another marimo release writes its pages otherwise: nothing would be fixed)."""
    static = static or marimo_static()
    prefix = cdn_prefix()
    base = f"{prefix}assets/"
    at = re.escape(base)
    entry = re.search(rf'<script type="module"[^>]*\bsrc="{at}([^"]+)"[^>]*></script>\s*', html)
    if entry is None:
        raise ValidationError(f"the exported page loads no module from {base}: this marimo release writes its "
                              "pages differently, and the offline rewrite does not apply")
    styles = re.findall(rf'<link rel="stylesheet"[^>]*\bhref="{at}([^"]+\.css)"', html)
    files = frontend_files(static / "assets", [entry.group(1), *styles], base)
    # the entry, module preloads, style sheets (now inline), fonts, icons and manifest from the CDN
    html = html.replace(entry.group(0), "")
    html = re.sub(rf'<link\b[^>]*\bhref="{re.escape(prefix)}[^"]*"[^>]*>\s*', "", html)
    if prefix in html.split("<marimo-code", 1)[0]:
        raise ValidationError(f"the exported page still names {prefix} after the offline rewrite: this marimo "
                              "release writes its pages differently")
    icon = static / "favicon-32x32.png"
    head = HIDE_CODE + (f'<link rel="icon" href="{data_uri(icon)}" />' if icon.is_file() else "")
    block = (f'<script type="application/octet-stream" id="lab-frontend" data-base="{base}" '
             f'data-entry="{entry.group(1)}" data-styles=\'{json.dumps(styles)}\'>{pack(files)}</script>')
    html = html.replace("</head>", head + "</head>", 1)
    page, end, tail = html.rpartition("</body>")  # the last: the notebook's outputs come before it
    return f"{page}{block}\n{UNPACK}\n{end}{tail}"


def export_offline(notebook: str | Path, out: str | Path, args: Sequence[str] = ()) -> Path:
    """Run ``notebook`` and write ``out/NAME.html``, one self-contained page; returns its path."""
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
    page.write_text(self_contained(page.read_text(encoding="utf-8")), encoding="utf-8")
    return page
