"""The main job on the embedded demo data, end to end: ingest the demo memories into a store,
evaluate the `lab` preset on the demo goldens, run a small sweep, put the sweep's best
configuration through the gate, and on GO export it as the champion. Every step is an MLflow run
in the workspace's tracking store.

`run_demo` yields a `DemoStep` as each step starts (``done`` False) and as it ends (with what it
made, a typed value), so a shell can say what is happening before the slow part and print the result
after. The evaluate and gate steps are the flow's own stages (`lab.flow.evaluate`, `gate_candidate`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Union

from lab import track
from lab.store.layout import info_path
from lab.tune.spec import load_spec
from lab.tune.sweep import run_sweep
from lab.workspace import current, use

if TYPE_CHECKING:
    from lab.flow.evaluate import Evaluated
    from lab.gate.report import GateReport
    from lab.tune.sweep import SweepResult
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
class Swept:
    sweep: SweepResult


@dataclass(frozen=True)
class Gated:
    report: GateReport


@dataclass(frozen=True)
class Finished:
    report: GateReport  # its export on GO, what was refused on NO-GO
    ui: str  # the command that opens the MLflow UI on these runs


DemoResult = Union["Ingested", "Evaluated", "Swept", "Gated", "Finished"]


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


def demo_files() -> DemoFiles:
    """The demo's data, sweep and gate files, in the workspace's project."""
    project = current().project
    return DemoFiles(project / "datasets" / "demo", project / "goldens" / "sweeps" / "demo.yaml",
                     project / "goldens" / "gate-demo.yaml")


def run_demo(store: str | Path, data: str | Path, out: str | Path, uri: str | None = None) -> Iterator[DemoStep]:
    """Run the five steps, yielding each as it starts and as it ends."""
    from lab.eval.runner import EvalOptions  # heavy: numba
    from lab.flow.evaluate import EvalCandidate, EvalData, Overrides, evaluate  # heavy: numba
    from lab.flow.stages import gate_candidate  # heavy: numba
    from lab.pipeline import Pipeline  # heavy: numba
    from lab.retriever import Retriever  # heavy: numba

    if current().embed_cache is None:
        # the demo store and the evaluation store embed the same texts: one cache, embedded once
        use(embed_cache=current().eval_embeddings)
    files, store, out = demo_files(), Path(store), Path(out)
    verb = "reusing" if info_path(store).exists() else "creating"
    yield DemoStep(1, "ingest", f"{verb} store at {store}")
    with Pipeline.open(store, create=True) as pipe:
        ingested = pipe.ingest(data, progress=True)
        embedder = pipe.embedder
    with Retriever.open(store, embedder=embedder) as retriever:
        namespace, query = DEMO_QUERY
        sample = retriever.search(query, namespace, k=3)
    yield DemoStep(1, "ingest", "", True, Ingested(ingested, namespace, query, sample))

    yield DemoStep(2, "evaluate", "the lab preset on the demo goldens")
    [evaluated] = evaluate(EvalCandidate(("lab",)), Overrides(), EvalData("demo"), EvalOptions(), out=out, uri=uri,
                           progress=True, embedder=embedder)
    yield DemoStep(2, "evaluate", "", True, evaluated)

    yield DemoStep(3, "sweep", str(files.sweep.relative_to(current().project)))
    sweep = run_sweep(load_spec(files.sweep), out_root=out / "sweeps", progress=True, embedder=embedder,
                      tracking_uri=uri)
    yield DemoStep(3, "sweep", "", True, Swept(sweep))

    yield DemoStep(4, "gate", "the sweep's best configuration")
    report = gate_candidate(files.gate, sweep.folder / "best.yaml", out_root=out / "gate", uri=uri, export=True,
                            embedder=embedder)
    yield DemoStep(4, "gate", "", True, Gated(report))

    yield DemoStep(5, "export", "")
    yield DemoStep(5, "export", "", True, Finished(report, track.ui_command(uri)))
