"""The layer contract in pyproject.toml holds, and would catch a new upward import."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

LINT = Path(sys.executable).parent / "lint-imports"


def lint(cwd: Path) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(cwd), "PATH": str(Path(sys.executable).parent), "NO_COLOR": "1"}
    return subprocess.run([str(LINT), "--config", str(cwd / "pyproject.toml")], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_the_layers_contract_is_kept():
    proc = lint(ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 kept, 0 broken" in proc.stdout


def test_an_upward_import_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    view = tmp_path / "lab" / "search" / "view.py"
    # the search layer reaching up into the facade: what the architecture exists to prevent
    view.write_text(view.read_text() + "\nfrom lab.pipeline import Pipeline  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    assert "lab.search.view -> lab.pipeline" in proc.stdout, proc.stdout


def test_the_mcp_face_reaching_into_the_rest_face_breaks_the_contract(tmp_path):
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    server = tmp_path / "lab" / "mcp" / "server.py"
    # a tool restating a route's helper instead of deriving from the operation table
    server.write_text(server.read_text() + "\nfrom lab.serve.routes import known_fields  # noqa\n")
    proc = lint(tmp_path)
    assert proc.returncode != 0
    assert "lab.mcp.server -> lab.serve.routes" in proc.stdout, proc.stdout


# the edges: the command line and the server resolve their settings from the environment; the
# workspace module is where that resolution lives
EDGES = ("lab/cli/", "lab/serve/", "lab/workspace.py")
# a module's own location, used to find lab's own code (never the project's folders): the code
# digest that keys the candidate cache, and the git commit a run records
OWN_CODE = ("lab/eval/candidate_cache.py", "lab/track/code.py")


def _below_the_edges():
    for path in sorted((ROOT / "lab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(EDGES):
            yield rel, path.read_text(encoding="utf-8")


def test_no_layer_below_the_edges_reads_the_environment_or_locates_the_project():
    env = [rel for rel, text in _below_the_edges() if "os.environ" in text or "getenv(" in text]
    assert env == [], f"read the environment below the edges (take it from the workspace an edge hands down): {env}"
    located = [rel for rel, text in _below_the_edges() if "__file__" in text and rel not in OWN_CODE]
    assert located == [], f"paths from __file__ below the edges (use the workspace's project): {located}"


# the installed workspace is asked for only by the shells; everything below is handed what it needs
WORKSPACE_READERS = ("lab/cli/", "lab/workspace.py")
_ASKS_FOR_THE_WORKSPACE = re.compile(r"(?<![\w.])current\(\)|workspace\.current\(")


def _workspace_readers(root: Path) -> list[str]:
    found = []
    for path in sorted((root / "lab").rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if not rel.startswith(WORKSPACE_READERS) and _ASKS_FOR_THE_WORKSPACE.search(path.read_text(encoding="utf-8")):
            found.append(rel)
    return found


def test_only_the_shells_ask_for_the_installed_workspace(tmp_path):
    assert _workspace_readers(ROOT) == [], "hand the workspace (or its values) down from lab/cli instead"
    # and the check would catch a library module asking for it
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    stores = tmp_path / "lab" / "eval" / "stores.py"
    stores.write_text(stores.read_text() + "\nfrom lab.workspace import current\nROOT = current().eval_root\n")
    assert _workspace_readers(tmp_path) == ["lab/eval/stores.py"]


def test_the_environment_check_would_catch_a_new_read(tmp_path):
    planted = ROOT / "lab" / "search" / "_planted_for_test.py"
    planted.write_text('import os\nROOT = os.environ.get("X")\n', encoding="utf-8")
    try:
        found = [rel for rel, text in _below_the_edges() if "os.environ" in text]
    finally:
        planted.unlink()
    assert found == ["lab/search/_planted_for_test.py"]


CYCLES = """
import json, sys
import grimp

graph = grimp.build_graph("lab", cache_dir=None)
index, low, stack, on_stack, found = {}, {}, [], set(), []
sys.setrecursionlimit(10000)

def visit(v):  # Tarjan's strongly connected components
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.find_modules_directly_imported_by(v)):
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            component.append(w)
            if w == v:
                break
        if len(component) > 1:
            found.append(sorted(component))

for module in sorted(graph.modules):
    if module not in index:
        visit(module)
print(json.dumps(found))
"""


def _cycles(package_root: Path) -> list[list[str]]:
    """Import cycles among lab's modules (function-local imports included): strongly connected
    components of more than one module, in the lab package found under ``package_root``."""
    import json

    env = {"PYTHONPATH": str(package_root), "PATH": str(Path(sys.executable).parent)}
    got = subprocess.run([sys.executable, "-c", CYCLES], cwd=package_root, env=env, capture_output=True, text=True,
                         timeout=120)
    assert got.returncode == 0, got.stderr
    return json.loads(got.stdout)


def test_no_import_cycles_anywhere_in_lab():
    assert _cycles(ROOT) == []


def test_a_new_cycle_is_found(tmp_path):
    shutil.copytree(ROOT / "lab", tmp_path / "lab", ignore=shutil.ignore_patterns("__pycache__"))
    types = tmp_path / "lab" / "assemble" / "render.py"
    # render reaching back into the module that imports it: the kind of cycle this test exists for
    types.write_text(types.read_text() + "\n\ndef _planted():\n    from lab.assemble.types import Context  # noqa\n")
    assert _cycles(tmp_path) == [["lab.assemble.render", "lab.assemble.types"]]


def test_function_local_imports_of_lab_say_why():
    """Below the shells a lab module is imported at the top, unless importing it would pull a heavy
    dependency into a module that is light without it: then the import says so (# heavy: ...)."""
    silent = []
    for path in sorted((ROOT / "lab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("lab/cli/"):
            continue
        in_type_checking = False
        for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
            if line.startswith("if TYPE_CHECKING"):
                in_type_checking = True
                continue
            if line and not line.startswith(" "):
                in_type_checking = False
            stripped = line.strip()
            if (line.startswith(" ") and not in_type_checking and (stripped.startswith("from lab") or stripped.startswith("import lab"))
                    and "# heavy:" not in line):
                silent.append(f"{rel}:{number}: {stripped}")
    assert silent == []


def _contract_layers() -> list[str]:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["id"] == "layers")["layers"]


def _pictured_layers(text: str) -> list[str]:
    """The layers the manual's picture draws, top down, written as the contract writes them."""
    picture = text[text.index("```\n shells"):]
    picture = picture[:picture.index("\n```")]
    layers = []
    for line in picture.splitlines():
        names = re.findall(r"lab\.[a-z_]+", line)
        if names:  # siblings joined by | or : in the picture are joined the same way in the contract
            joiner = " | " if re.search(r"lab\.[a-z_]+\s+\|\s+lab\.", line) else " : "
            layers.append(joiner.join(names))
    return layers


def test_the_manuals_layer_picture_and_the_package_list_are_the_contract():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert _pictured_layers(text) == _contract_layers()
    import lab
    from pkgutil import iter_modules

    contracted = {name.removeprefix("lab.") for layer in _contract_layers() for name in re.split(r" [|:] ", layer)}
    on_disk = {m.name for m in iter_modules(lab.__path__) if not m.name.startswith("_")}
    assert on_disk == contracted, f"in lab/ but in no layer: {on_disk - contracted}; in a layer, not in lab/: {contracted - on_disk}"
    assert lab._SUBPACKAGES == on_disk
    layout = text[text.index("lab/            the package"):text.index("datasets/demo/")]
    listed = {part.strip().rstrip("/").removesuffix(".py") for part in re.split(r"[,:\n]", layout.split("above:", 1)[1].split("(tests/")[0]) if part.strip()}
    assert listed == on_disk, f"the Layout section misses {on_disk - listed} / lists {listed - on_disk}"


def test_the_picture_check_would_catch_a_layer_drawn_out_of_order():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    swapped = text.replace(" judge       lab.gate", " judge       lab.TMP").replace(" sweeps      lab.tune", " sweeps      lab.gate").replace("lab.TMP", "lab.tune")
    assert _pictured_layers(swapped) != _contract_layers()
