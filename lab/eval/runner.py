"""Evaluation runs: an eval store per dataset, the candidate cache, fusion, metrics, run folders.

The candidate cache is the point: each signal's ranked lists for every question are computed
once per (store, candidate-time configuration) and kept as Parquet. Any query-time change (fusion
method, k, weights, post-processing, zone ratios, budget) re-fuses those arrays; nothing is
re-embedded or re-searched.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lab.config import AssembleConfig, SaveConfig, SearchConfig, to_dict
from lab.eval.dataset import EvalDataset
from lab.search.candidates import Query, candidates
from lab.search.fusion import PreparedCandidates, fuse, prepare

DEFAULT_KS = (1, 5, 10, 20, 50, 100)


def eval_root() -> Path:
    return Path(os.environ.get("LAB_EVAL_ROOT") or ".lab/eval")


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def eval_pipeline(dataset: EvalDataset, save_config: SaveConfig | None = None, *, root: Path | None = None,
                  embedder=None, progress: bool = False):
    """The dataset's store under ``root/stores``, built on first use and reused while the data and
    the save configuration are unchanged. The embedding cache is shared by all eval stores."""
    from lab.pipeline import Pipeline

    root = root or eval_root()
    save_config = save_config or SaveConfig()
    model = embedder.model_id if embedder is not None else save_config.embed.model
    key = _digest(dataset.fingerprint(), to_dict(save_config.chunk), model)
    path = root / "stores" / f"{dataset.name}-{key}"
    done = path / "lab-eval-ready.json"
    # one embedding cache for every eval store (unless $LAB_EMBED_CACHE names another)
    cache_dir = os.environ.get("LAB_EMBED_CACHE") or root / "embeddings"
    if done.is_file():
        return Pipeline.open(path, save_config, embedder=embedder, cache_dir=cache_dir)
    if path.exists():
        import shutil

        shutil.rmtree(path)  # a build that did not finish: start over
    pipe = Pipeline.open(path, save_config, embedder=embedder, create=True, cache_dir=cache_dir)
    pipe.save_many(dataset.memories, progress=progress)
    if dataset.edges:
        pipe.add_edges(dataset.edges)
    for ns in pipe.store.namespaces():
        pipe.build_index(ns)
    done.write_text(json.dumps({"dataset": dataset.summary(), "version": str(pipe.store.version())},
                               default=str, indent=2), encoding="utf-8")
    return pipe


def candidate_config(config: SearchConfig, depth: int) -> dict[str, Any]:
    """The parts of a search configuration that change the candidate lists (fusion does not)."""
    d = to_dict(config)
    d.pop("fusion")
    d.pop("name")
    d.pop("description")
    d["depth"] = max(config.depth, depth)
    return d


@lru_cache(maxsize=1)
def _search_code() -> str:
    """A digest of the code that produces candidate lists (search and index packages): a cached
    table made by other code is never reused, so a change to a signal cannot hide behind the cache."""
    import lab

    base = Path(lab.__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted([*base.joinpath("search").rglob("*.py"), *base.joinpath("index").rglob("*.py")]):
        h.update(f.relative_to(base).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def candidate_table(pipe, dataset: EvalDataset, config: SearchConfig, *, depth: int = 0,
                    root: Path | None = None) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every question's candidate lists, from the cache when this (store, config) was seen before.

    Save-then-search questions save their memory first, through the normal save path.
    """
    root = root or eval_root()
    if dataset.saves:
        pipe.save_many([dataset.saves[q] for q in sorted(dataset.saves)], progress=False)
    if dataset.reference_time and not config.reference_time:
        config = replace(config, reference_time=dataset.reference_time)
    cconf = candidate_config(config, depth)
    questions = dataset.questions.sort("qid")
    key = _digest(str(pipe.store.version()), str(Path(pipe.store.root).resolve()), cconf,
                  questions.select("qid", "namespace", "question").rows(), pipe.embedder.model_id, _search_code())
    path = root / "candidates" / f"{dataset.name}-{key}.parquet"
    info: dict[str, Any] = {"cache": str(path), "hit": path.is_file()}
    if str(path) in _loaded:
        _loaded.move_to_end(str(path))
        return _loaded[str(path)].table, info
    if path.is_file():
        return _remember(str(path), pl.read_parquet(path)), info
    started = time.perf_counter()
    run_config = replace(config, depth=cconf["depth"])
    texts = questions["question"].to_list()
    vectors = pipe.cache.embed(pipe.embedder, texts) if pipe.cache is not None else pipe.embedder.embed(texts)
    parts = []
    for ns in sorted(questions["namespace"].unique().to_list()):
        mask = (questions["namespace"] == ns).to_numpy()
        rows = questions.filter(pl.Series(mask))
        qs = [Query(q, t, ns) for q, t in rows.select("qid", "question").iter_rows()]
        parts.append(candidates(pipe, qs, run_config, query_vectors=vectors[mask]))
    table = pl.concat(parts) if parts else pl.DataFrame()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    table.write_parquet(tmp)
    tmp.replace(path)
    if pipe.cache is not None:
        pipe.cache.flush()
    info["seconds"] = round(time.perf_counter() - started, 2)
    return _remember(str(path), table), info


# Candidate tables read (or built) in this process, with their fusion-ready encoding, by cache
# path: presets that share candidate-time settings share one table, so evaluating several in a
# row (``lab eval --preset a b c``, a sweep) reads and encodes it once. The path names the store
# version and the candidate config, so an entry can never be stale.
@dataclass
class _Loaded:
    table: pl.DataFrame
    path: Path | None = None  # None: a table the caller made, not kept
    prepared: PreparedCandidates | None = None
    health: dict[str, Any] | None = None  # per-signal health: depends on the lists only


_loaded: "OrderedDict[str, _Loaded]" = OrderedDict()
_LOADED_MAX = 4


def _remember(path: str, table: pl.DataFrame) -> pl.DataFrame:
    _loaded[path] = _Loaded(table, Path(path))
    while len(_loaded) > _LOADED_MAX:
        _loaded.popitem(last=False)
    return table


def _memo_entry(cands: pl.DataFrame) -> _Loaded:
    return next((e for e in _loaded.values() if e.table is cands), None) or _Loaded(cands)


def _prepared_for(cands: pl.DataFrame) -> PreparedCandidates:
    entry = _memo_entry(cands)
    if entry.prepared is None:
        entry.prepared = _prepare_cached(cands, entry.path.with_suffix(".codes.npz") if entry.path else None)
    return entry.prepared


def _prepare_cached(cands: pl.DataFrame, codes_path: Path | None) -> PreparedCandidates:
    """``prepare``, with the table's string encodings kept beside the cached table: a warm
    evaluation then skips the million-string hashing and only does integer work."""
    encodings = None
    if codes_path is not None and codes_path.is_file():
        try:
            with np.load(codes_path, allow_pickle=False) as z:
                encodings = {name: (pl.Series(name, z[f"{name}.values"].tolist(), dtype=pl.String),
                                    z[f"{name}.codes"].astype(np.int64)) for name in ("qid", "memory_id", "signal")}
        except (OSError, KeyError, ValueError):
            encodings = None  # unreadable: recompute and rewrite
    prepared = prepare(cands, encodings)
    if codes_path is not None and encodings is None:
        arrays = {}
        for name, (values, codes) in prepared.encodings.items():
            arrays[f"{name}.values"] = np.asarray(values.to_list(), dtype=str)
            arrays[f"{name}.codes"] = codes.astype(np.int32 if len(values) < 2**31 else np.int64)
        tmp = codes_path.with_name(codes_path.name + ".tmp.npz")
        np.savez(tmp, **arrays)
        tmp.replace(codes_path)
    return prepared


@dataclass
class EvalOptions:
    ks: tuple[int, ...] = DEFAULT_KS
    respect_top_k: bool = False  # cut at the preset's own top_k (as served) instead of max(ks)
    credit_derived: bool = False  # a hit on a derived fact counts as a hit on its source
    budget: int | None = None  # context metrics: assemble each question's results into this many tokens
    assemble: AssembleConfig = field(default_factory=AssembleConfig)
    ragas: bool = False


@dataclass
class EvalResult:
    dataset: str
    config: SearchConfig
    options: EvalOptions
    run: pl.DataFrame  # qid, memory_id, rank, score
    per_query: pl.DataFrame  # qid, namespace, category, metric columns
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


@lru_cache(maxsize=4)
def _resample_counts(n: int, n_resamples: int, seed: int) -> np.ndarray:
    """The seeded resample-count matrix, drawn once per question count: every metric and every
    preset evaluated on the same questions share it (paired resamples, and no redrawing)."""
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_resamples).astype(np.float64)
    counts.flags.writeable = False
    return counts


def bootstrap_cis(values: np.ndarray, n_resamples: int = 1000, confidence: float = 0.95,
                  seed: int = 0) -> list[tuple[float, float, float]]:
    """Percentile bootstrap CIs of every column's mean at once: one seeded matrix of resample
    counts (resamples x questions) times the values, instead of a resampling pass per metric."""
    n = values.shape[0]
    if n == 0:
        return [(0.0, 0.0, 0.0)] * values.shape[1]
    means = _resample_counts(n, n_resamples, seed) @ values / n  # (resamples, metrics)
    alpha = (1.0 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha], axis=0)
    return [(float(values[:, j].mean()), float(lo[j]), float(hi[j])) for j in range(values.shape[1])]


def fused_run(prepared: PreparedCandidates | pl.DataFrame, config: SearchConfig, options: EvalOptions,
              dataset: EvalDataset | None = None) -> pl.DataFrame:
    top = config.fusion.top_k if options.respect_top_k else max(options.ks)
    run = fuse(prepared, replace(config.fusion, top_k=top))
    if options.credit_derived and dataset is not None and dataset.credit:
        credit = pl.DataFrame({"memory_id": list(dataset.credit), "_src": list(dataset.credit.values())})
        run = (
            run.join(credit, on="memory_id", how="left")
            .with_columns(pl.coalesce("_src", "memory_id").alias("memory_id"))
            .sort("qid", "rank").unique(["qid", "memory_id"], keep="first", maintain_order=True)
            .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int32).over("qid").alias("rank"))
            .select("qid", "memory_id", "rank", "score")
        )
    return run


def evaluate(pipe, dataset: EvalDataset, config: SearchConfig, options: EvalOptions | None = None, *,
             cands: pl.DataFrame | None = None, prepared: PreparedCandidates | None = None) -> EvalResult:
    """Fuse cached candidates under ``config`` and score them against the dataset's gold."""
    from lab.eval import metrics as M
    from lab.eval.health import list_health, signal_health

    options = options or EvalOptions()
    info: dict[str, Any] = {}
    if cands is None:
        cands, info = candidate_table(pipe, dataset, config, depth=max(options.ks))
    prepared = prepared or _prepared_for(cands)
    started = time.perf_counter()
    run = fused_run(prepared, config, options, dataset)
    per_query = M.retrieval_metrics(run, dataset.qrels, ks=options.ks)
    per_query = dataset.questions.select("qid", "namespace", "category").join(per_query, on="qid", how="left")
    metric_cols = [c for c in per_query.columns if c not in ("qid", "namespace", "category")]
    per_query = per_query.with_columns([pl.col(c).fill_null(0.0) for c in metric_cols])
    means = M.mean_metrics(per_query.select("qid", *metric_cols))
    cis = bootstrap_cis(per_query.select(metric_cols).to_numpy())
    cis = dict(zip(metric_cols, cis))
    cats = M.by_category(per_query.select("qid", *metric_cols), per_query.select("qid", "category"))
    entry = _memo_entry(cands)
    if entry.health is None:
        entry.health = list_health(cands, dataset)
    health = signal_health(cands, run, dataset, per_signal=entry.health)
    out: dict[str, Any] = {
        "dataset": dataset.name, "config": config.name, "questions": per_query.height,
        "metrics": means, "ci95": {c: [round(lo, 4), round(hi, 4)] for c, (_, lo, hi) in cis.items()},
        "by_category": cats.to_dicts(), "signal_health": health,
        "options": {"ks": list(options.ks), "respect_top_k": options.respect_top_k,
                    "credit_derived": options.credit_derived, "budget": options.budget},
    }
    if options.budget:
        from lab.eval.context import context_metrics

        ctx = context_metrics(pipe, dataset, run, config, replace(options.assemble, budget=options.budget))
        per_query = per_query.join(ctx, on="qid", how="left")
        out["context"] = {c: float(ctx[c].mean()) for c in ctx.columns if c != "qid"}
    if options.ragas:
        from lab.eval.ragas_adapter import ragas_metrics

        k = 10 if 10 in options.ks else max(options.ks)
        gold = dataset.qrels.group_by("qid").agg(pl.col("memory_id").sort().alias("ref"))
        top = run.filter(pl.col("rank") <= k).sort("qid", "rank").group_by("qid", maintain_order=True).agg(
            pl.col("memory_id").alias("ret"))
        rows = [{"qid": q, "retrieved_ids": r or [], "reference_ids": ref}
                for q, ref, r in gold.join(top, on="qid", how="left").select("qid", "ref", "ret").iter_rows()]
        rg = ragas_metrics(rows)
        out["ragas"] = {f"{c}@{k}": float(rg[c].mean()) for c in rg.columns if c != "qid"}
        per_query = per_query.join(rg, on="qid", how="left")
    info["fuse_and_score_s"] = round(time.perf_counter() - started, 3)
    return EvalResult(dataset.name, config, options, run, per_query, out, info)
