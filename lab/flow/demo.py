"""The main job on the embedded demo data, end to end: ingest the demo memories into a store,
evaluate the `lab` preset on the demo goldens, run a small sweep, put the sweep's best
configuration through the gate, and on GO export it as the champion. The evaluation, the sweep,
the gate and the export are MLflow runs in the workspace's tracking store.

`run_demo` yields a `DemoStep` as each step starts (``done`` False) and as it ends (with what it
made, a typed value), so a shell can say what is happening before the slow part and print the result
after. The evaluate step is `lab eval`'s (`lab.flow.evaluate`); the sweep, gate and export steps are
the DVC stages' own steps (`gate_candidate`, `export_champion`) and make the same typed results
(`Swept`, `Gated`, `ExportedModel`).

Why the demo is not the DVC stage graph run over a demo profile: the stages write DVC outputs under
their `Layout` (each folder emptied first, the index-time parameters pinned into the sweep, the
gate's stores apart from the index stage's, the export reading the gate's report back from disk),
while the demo writes the user's run folders under ``runs/`` beside the ones `lab eval`, `lab
sweep` and `lab gate` write, shares the workspace's evaluation stores with `lab eval`, ingests
into a store of the user's own, and loads the embedding model once for every step.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Union

from lab.eval.dataset_ref import DatasetRef
from lab.eval.runner import EvalOptions
from lab.flow.evaluate import EvalCandidate, Evaluated, Overrides, evaluate
from lab.flow.results import ExportedModel, Gated, Swept
from lab.flow.stages import export_champion, gate_candidate, judging_in
from lab.gate.checks import load_gate
from lab.gate.report import GateReport, write_report
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.store.layout import info_path
from lab.store.settings import StoreSettings
from lab.track.connect import Tracking
from lab.tune.spec import load_spec
from lab.tune.sweep import run_sweep
from lab.workspace import Workspace

if TYPE_CHECKING:
    from lab.track.connect import Where
    from lab.write.writer import IngestReport

DEMO_QUERY = ("atlas", "why did the billing service fail in February?")  # a sample search after ingest
STEPS = 5


@dataclass(frozen=True)
class Ingested:
    report: IngestReport
    namespace: str  # the sample search after ingest
    query: str
    hits: list[Any]


@dataclass(frozen=True)
class ExportRefused:
    """NO-GO: the export refused, with each failed check in one line."""
    failed: tuple[str, ...]


DemoResult = Union[Ingested, Evaluated, Swept, Gated, ExportedModel, ExportRefused]


@dataclass(frozen=True)
class DemoStep:
    number: int  # 1..STEPS
    name: str  # ingest | evaluate | sweep | gate | export
    title: str  # what the step does, said as it starts
    done: bool = False
    result: DemoResult | None = None  # what the step made (when done)


@dataclass(frozen=True)
class DemoFiles:
    data: Path
    sweep: Path
    gate: Path


def demo_files(workspace: Workspace) -> DemoFiles:
    """The demo's data, sweep and gate files, in the workspace's project."""
    project = workspace.project
    return DemoFiles(project / "datasets" / "demo", project / "goldens" / "sweeps" / "demo.yaml",
                     project / "goldens" / "gate-demo.yaml")


def run_demo(workspace: Workspace, store: str | Path, data: str | Path, out: str | Path) -> Iterator[DemoStep]:
    """Run the five steps in ``workspace``, yielding each as it starts and as it ends."""
    # the demo store and the evaluation stores embed the same texts: one cache, embedded once
    embeddings = workspace.eval_embeddings
    files, store, out, uri = demo_files(workspace), Path(store), Path(out), Tracking.of(workspace)
    verb = "reusing" if info_path(store).exists() else "creating"
    yield DemoStep(1, "ingest", f"{verb} store at {store}")
    stores = StoreSettings.of(workspace)
    with Pipeline.open(store, create=True, cache_dir=embeddings, settings=stores) as pipe:
        ingested = pipe.ingest(data, progress=True)
        embedder = pipe.embedder
    with Retriever.open(store, embedder=embedder, settings=stores) as retriever:
        namespace, query = DEMO_QUERY
        sample = retriever.search(query, namespace, k=3)
    yield DemoStep(1, "ingest", "", True, Ingested(ingested, namespace, query, sample))

    yield DemoStep(2, "evaluate", "the lab preset on the demo goldens")
    [evaluated] = evaluate(EvalCandidate(("lab",)), Overrides(), DatasetRef("demo"), EvalOptions(), workspace, out=out,
                           progress=True, embedder=embedder)
    yield DemoStep(2, "evaluate", "", True, evaluated)

    yield DemoStep(3, "sweep", str(files.sweep.relative_to(workspace.project)))
    sweep = run_sweep(load_spec(files.sweep), datasets=workspace.datasets_root, project=workspace.project,
                      out_root=out / "sweeps", progress=True,
                      embedder=embedder, root=workspace.eval_root, tracking_uri=uri, embeddings=embeddings)
    swept = Swept.of(sweep)
    yield DemoStep(3, "sweep", "", True, swept)

    yield DemoStep(4, "gate", "the sweep's best configuration")
    report = gate_candidate(files.gate, swept.best, judging_in(workspace, embedder=embedder), out_root=out / "gate",
                            uri=uri)
    yield DemoStep(4, "gate", "", True, Gated(report))

    yield DemoStep(5, "export", "")
    yield DemoStep(5, "export", "", True, _export(report, swept.best, files.gate, uri))


def _export(report: GateReport, candidate: Path, gate_file: Path, uri: Where) -> ExportedModel | ExportRefused:
    """On GO the champion exported (its bundle in the gate report's folder, over the store the gate
    judged it on), else the refusal; the report's gate.json then records which, as `lab gate
    --export` writes it."""
    if report.verdict != "GO":
        write_report(replace(report, refused=tuple(report.failed)))
        return ExportRefused(tuple(report.failed))
    judged_store = Path(next(iter(report.suites.values())).store)
    done = export_champion(report, candidate, load_gate(gate_file), judged_store, report.folder / "bundle", uri)
    write_report(replace(report, export=done.export))
    return done
