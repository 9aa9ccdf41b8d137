"""The main job on the embedded demo data, end to end: ingest the demo memories into a store,
evaluate the `lab` preset on the demo goldens, run a small sweep, put the sweep's best
configuration through the gate, and on GO export it as the champion. Every step is an MLflow run
in the workspace's tracking store.

`run_demo` yields a `DemoStep` as each step starts (``done`` False) and as it ends (with what it
made), so a shell can say what is happening before the slow part and print the result after.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from lab import track
from lab.eval.goldens import load_dataset
from lab.search.presets import preset
from lab.tune.spec import load_spec
from lab.tune.sweep import run_sweep
from lab.workspace import current, use

DEMO_QUERY = ("atlas", "why did the billing service fail in February?")  # a sample search after ingest
STEPS = 5


@dataclass(frozen=True)
class DemoStep:
    number: int  # 1..STEPS
    name: str  # ingest | evaluate | sweep | gate | export
    title: str  # what the step does, said as it starts
    done: bool = False
    result: dict[str, Any] = field(default_factory=dict)


def demo_files() -> dict[str, Path]:
    """The demo's data, sweep and gate files, in the workspace's project."""
    project = current().project
    return {"data": project / "datasets" / "demo", "sweep": project / "goldens" / "sweeps" / "demo.yaml",
            "gate": project / "goldens" / "gate-demo.yaml"}


def run_demo(store: str | Path, data: str | Path, out: str | Path, uri: str | None = None) -> Iterator[DemoStep]:
    """Run the five steps, yielding each as it starts and as it ends."""
    from lab.eval.runner import EvalOptions  # heavy: numba
    from lab.eval.runs import evaluate_to_folder  # heavy: numba
    from lab.eval.stores import eval_retriever  # heavy: numba
    from lab.flow.stages import gate_candidate  # heavy: numba
    from lab.pipeline import Pipeline  # heavy: numba
    from lab.retriever import Retriever  # heavy: numba

    if current().embed_cache is None:
        # the demo store and the evaluation store embed the same texts: one cache, embedded once
        use(embed_cache=current().eval_embeddings)
    files, store, out = demo_files(), Path(store), Path(out)
    verb = "reusing" if (store / "lab-store.json").exists() else "creating"
    yield DemoStep(1, "ingest", f"{verb} store at {store}")
    with Pipeline.open(store, create=True) as pipe:
        ingested = pipe.ingest(data, progress=True).to_dict()
        embedder = pipe.embedder
    with Retriever.open(store, embedder=embedder) as retriever:
        namespace, query = DEMO_QUERY
        sample = retriever.search(query, namespace, k=3)
    yield DemoStep(1, "ingest", "", True, {"ingest": ingested, "namespace": namespace, "query": query, "hits": sample})

    yield DemoStep(2, "evaluate", "the lab preset on the demo goldens")
    dataset = load_dataset("demo")
    retriever = eval_retriever(dataset, embedder=embedder, progress=True)
    result, folder = evaluate_to_folder(retriever, dataset, preset("lab"), EvalOptions(), out)
    run_id = track.log_eval(result, folder, dataset=dataset, store_version=str(retriever.version), uri=uri)
    yield DemoStep(2, "evaluate", "", True, {"metrics": result.metrics["metrics"], "folder": folder, "run_id": run_id})

    yield DemoStep(3, "sweep", str(files["sweep"].relative_to(current().project)))
    sweep = run_sweep(load_spec(files["sweep"]), out_root=out / "sweeps", progress=True, embedder=embedder,
                      tracking_uri=uri)
    yield DemoStep(3, "sweep", "", True, {"sweep": sweep})

    yield DemoStep(4, "gate", "the sweep's best configuration")
    report = gate_candidate(files["gate"], sweep.folder / "best.yaml", out_root=out / "gate", uri=uri, export=True,
                            embedder=embedder)
    yield DemoStep(4, "gate", "", True, {"report": report})

    yield DemoStep(5, "export", "")
    yield DemoStep(5, "export", "", True, {"report": report, "ui": track.ui_command(uri)})
