"""Where the DVC pipeline's stages read and write (`Layout`, the paths dvc.yaml names), how a stage
runs (`StageOptions`: the workspace it runs in), and how a stage writes its outputs: folders
emptied first, metrics files, SVG plots."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from lab.workspace import Workspace


@dataclass(frozen=True)
class Layout:
    """Where the stages read and write (dvc.yaml names the same paths)."""
    out: Path = Path(".lab/dvc")

    @property
    def prepared(self) -> Path:
        return self.out / "prepared"

    @property
    def eval_root(self) -> Path:  # the index stage's stores and the candidates stage's tables
        return self.out / "eval"

    @property
    def gate_root(self) -> Path:  # the gate's own stores: its suites may name other datasets
        return self.out / "gate-eval"

    @property
    def sweep(self) -> Path:
        return self.out / "sweep"

    @property
    def best(self) -> Path:  # the sweep's best configuration: the candidate the gate judges
        return self.sweep / "best.yaml"

    @property
    def gate(self) -> Path:
        return self.out / "gate"

    @property
    def bundle(self) -> Path:
        return self.out / "bundle"

    @property
    def metrics(self) -> Path:
        return self.out / "metrics"

    @property
    def plots(self) -> Path:
        return self.out / "plots"

    @property
    def embeddings(self) -> Path:
        return self.out / "embeddings"

    def embedding_cache(self, workspace: Workspace) -> Path:
        """The one embedding cache every stage shares, outside the stages' outputs, so nothing is
        embedded twice (the index and the gate stores live under different roots): the
        workspace's when it names one, else the layout's own."""
        return workspace.embed_cache or self.embeddings


@dataclass(frozen=True)
class StageOptions:
    """How a stage runs: in which workspace (its datasets root, project, tracking store and
    embedding cache), whether it logs to MLflow, whether it shows progress."""
    workspace: Workspace
    track: bool = True  # log sweep and gate runs to MLflow (export needs them)
    progress: bool = True


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def fresh(folder: Path) -> Path:
    """An output folder emptied first: a stage's outputs are exactly what this run wrote."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return folder


def write_metrics(layout: Layout, name: str, details: dict[str, Any], headline: tuple[str, ...]) -> None:
    """A stage's few headline numbers in ``metrics/NAME.json`` (what `dvc metrics show` tabulates:
    one short row per stage, not every key of every stage) and everything in ``metrics/details/``."""
    write_json(layout.metrics / "details" / f"{name}.json", details)
    write_json(layout.metrics / f"{name}.json", {k: details[k] for k in headline if k in details})


def svg(path: Path, title: str, draw: Callable[[Any], Any]) -> None:
    """One plot as an SVG file: `dvc plots show` embeds it as an image, so its page needs no
    script from a CDN (a vega plot's does) and reads offline."""
    import matplotlib

    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    # no timestamp, and clip-path ids from a fixed salt rather than a random one: the same data,
    # the same bytes, so `dvc repro` in another checkout leaves dvc.lock as committed
    with matplotlib.rc_context({"svg.hashsalt": "lab"}):
        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        draw(ax)
        ax.set_title(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
