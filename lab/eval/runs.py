"""Evaluate one configuration on one dataset and write its run folder, named by what was measured."""
from __future__ import annotations

from pathlib import Path

from lab.config import DEFAULT_MODEL, ENCODERS, ChunkConfig, SearchConfig, to_dict
from lab.embed.registry import lookup
from lab.eval.dataset import EvalDataset
from lab.eval.dataset_ref import DatasetOptions
from lab.eval.longmemeval_log import write_official_log
from lab.eval.report import write_run
from lab.eval.run_folder import maker, publish
from lab.eval.runner import EvalOptions, EvalResult, evaluate
from lab.eval.stores import index_suffix
from lab.retriever import Retriever


def run_name(dataset: str, chunk: ChunkConfig, config: str, options: EvalOptions,
             loaded: DatasetOptions = DatasetOptions(), models: str = "") -> str:
    """The run folder's name: the dataset, every lever that differs from the default, the config.

    Runs of other settings never overwrite each other (e.g. ``locomo+ctx0-lab``, ``locomo+obs+credit-lab``,
    ``locomo+e5-lab``).
    """
    extras = "".join(tag for flag, tag in ((loaded.observations, "+obs"), (loaded.summaries, "+sum"),
                                           (options.credit_derived, "+credit")) if flag)
    return f"{dataset}{index_suffix(chunk)}{models}{extras}-{config}"


def _model_tag(model_id: str) -> str:
    spec = lookup(model_id)
    return spec.alias if spec is not None else "local-" + model_id.rsplit("#", 1)[-1]


def models_suffix(store_model: str, query_model: str, encoders: tuple[str, ...] = ()) -> str:
    """``+ALIAS`` for a store of another model than the default, ``+q-ALIAS`` for queries
    encoded by another model than the store's, ``+with-ALIAS`` per extra encoder ranked."""
    ranked = [alias for alias, name in ENCODERS.items() if name in encoders]
    return (("" if store_model == DEFAULT_MODEL else f"+{_model_tag(store_model)}")
            + ("" if query_model == store_model else f"+q-{_model_tag(query_model)}")
            + "".join(f"+with-{alias}" for alias in ranked))


def evaluate_to_folder(retriever: Retriever, dataset: EvalDataset, config: SearchConfig, options: EvalOptions,
                       out_root: str | Path, loaded: DatasetOptions = DatasetOptions(), *,
                       root: Path | None = None) -> tuple[EvalResult, Path]:
    """Evaluate ``config`` (its candidate lists cached under the evaluation ``root``) and write its
    run folder under ``out_root``; returns (result, folder)."""
    result = evaluate(retriever, dataset, config, options, root=root)
    return result, write_run_folder(result, retriever, dataset, out_root, loaded)


def record_models(result: EvalResult, retriever: Retriever) -> tuple[str, str]:
    """Record in ``result``'s metrics (metrics.json ``models``) the models its ranking used: the
    store's, the one encoding the questions and the extra encoders; returns (store, query)."""
    store_model, query_model = retriever.embedder.model_id, retriever.query_embedder.model_id
    result.metrics["models"] = {"store": store_model, "query": query_model, "encoders": list(result.config.encoders)}
    return store_model, query_model


def write_run_folder(result: EvalResult, retriever: Retriever, dataset: EvalDataset, out_root: str | Path,
                     loaded: DatasetOptions = DatasetOptions(), engine_log: str = "") -> Path:
    """Write the run folder of ``result`` (evaluated here or on a worker over the same store);
    ``engine_log``: what the engine's own libraries printed for this command (its ``engine.log``)."""
    config, options = result.config, result.options
    chunk = retriever.store.recorded_config().chunk
    store_model, query_model = record_models(result, retriever)
    out = Path(out_root) / run_name(dataset.name, chunk, config.name, options, loaded,
                                    models_suffix(store_model, query_model, config.encoders))
    made = maker("search configuration", config.name, dataset.name, dataset.source, to_dict(chunk))
    return publish(out, made, lambda folder: _write(result, dataset, folder, engine_log))


def _write(result: EvalResult, dataset: EvalDataset, folder: Path, engine_log: str = "") -> None:
    write_run(result, dataset.qrels, folder)
    if engine_log:
        (folder / "engine.log").write_text(engine_log, encoding="utf-8")
    if "longmemeval" in dataset.report:  # the official retrieval log beside lab's files
        write_official_log(folder, result.run, dataset.report["longmemeval"], dataset.source)
