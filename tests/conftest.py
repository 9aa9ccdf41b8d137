"""Shared fixtures: fake-embedder pipelines for fast unit tests, the real data paths."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lab.embed.fake import FakeEmbedder
from lab import workspace
from lab.pipeline import Pipeline

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
SHARED = Path(os.environ.get("LAB_DATASETS", ROOT.parent / "shared" / "datasets"))


def require_dataset(relative: str) -> Path:
    """The path of a shared dataset; skip if absent, except under CI where absence is a failure."""
    path = SHARED / relative
    if not path.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"dataset {path} is missing under CI")
        pytest.skip(f"dataset {path} not present on this machine")
    return path


def demo_questions(n: int):
    """The demo goldens with their first ``n`` questions (by id) only: a third-party system embeds
    each question on its own through its model, so a test that proves it runs through the harness
    asks a third of them (the corpus is the whole demo's)."""
    from dataclasses import replace

    import polars as pl

    from lab.eval.goldens import load_dataset

    dataset = load_dataset("demo")
    kept = dataset.questions.sort("qid").head(n)
    ids = set(kept["qid"].to_list())
    return replace(dataset, questions=kept, qrels=dataset.qrels.filter(pl.col("qid").is_in(list(ids))),
                   saves={q: v for q, v in dataset.saves.items() if q in ids},
                   stale=dataset.stale.filter(pl.col("qid").is_in(list(ids))))


def demo_golden_subset(folder: Path, n: int) -> Path:
    """``demo_questions`` as a golden file (named demo, about the project's demo data) for a
    command line: the first ``n`` questions by id."""
    import yaml

    doc = yaml.safe_load((ROOT / "goldens" / "demo.yaml").read_text(encoding="utf-8"))
    doc["questions"] = sorted(doc["questions"], key=lambda q: str(q["id"]))[:n]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture
def pipe(tmp_path: Path) -> Pipeline:
    p = Pipeline.open(tmp_path / "store", embedder=FakeEmbedder(), create=True)
    yield p
    p.close()


# modules that start Ray clusters and look for Ray's processes machine-wide (test_engine's pgrep):
# under pytest-xdist (`-n 2 --dist loadgroup`, the project's addopts) they run on one worker, one
# after another, never beside each other
ONE_WORKER = {"test_engine.py": "ray", "test_ray_faults.py": "ray", "test_workspace_travels.py": "ray",
              "test_fault_suite.py": "ray"}


def pytest_collection_modifyitems(config, items):
    # every test that loads the real model is slow (model load, real embeddings): marked here once,
    # so a new such test cannot forget it; real-data tests carry the mark themselves
    for item in items:
        if "real_embedder" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
        group = ONE_WORKER.get(item.path.name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def real_embedder():
    from lab.embed.st import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.fixture(autouse=True, scope="session")
def _tracking_store(tmp_path_factory):
    """Every MLflow run the tests make goes to a throwaway SQLite store, never the project's .lab/mlflow
    (subprocesses inherit the variable)."""
    folder = tmp_path_factory.mktemp("mlflow")
    old = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{folder / 'mlflow.db'}"
    # the test process is an edge like the CLI: it resolves its workspace from the environment
    workspace.install(workspace.Workspace.resolve())
    yield
    if old is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = old


@pytest.fixture(autouse=True)
def _workspace_restored():
    """A test that changes the installed workspace (``workspace.use``) leaves the next one as it was."""
    before = workspace.current()
    yield
    workspace.install(before)


@pytest.fixture(scope="session")
def notebook_workspace(tmp_path_factory):
    """An evaluation root of its own and a tracked demo sweep (the sweep notebook's), shared by the
    notebook and offline-page tests."""
    root = tmp_path_factory.mktemp("notebooks")
    env = {**os.environ, "LAB_EVAL_ROOT": str(root / "eval"), "PYTHONUNBUFFERED": "1"}
    subprocess.run([str(BIN / "lab"), "sweep", str(ROOT / "goldens/sweeps/demo.yaml"), "--out", str(root / "sweeps"),
                    "--quiet"], env=env, cwd=root, check=True, capture_output=True, timeout=900)
    return root, env
