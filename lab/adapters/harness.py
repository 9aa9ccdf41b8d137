"""The one harness every memory system goes through: save a dataset's memories namespace by
namespace, ask every question, map the system's ids back to the dataset's, and score the ranked
lists with the same metrics, CIs and per-category tables as `lab eval`. It also measures ingest
throughput and search latency, and checks that a memory saved now is found by the next search.
"""
from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from lab.adapters.base import AdapterError, Guarded, MemorySystem
from lab.config import DEFAULT_KS
from lab.eval import metrics as M
from lab.eval.dataset import EvalDataset
from lab.eval.longmemeval_log import write_official_log
from lab.eval.longmemeval_metrics import longmemeval_metrics
from lab.eval.metrics import bootstrap_cis
from lab.eval.report import write_trec_qrels, write_trec_run
from lab.eval.run_folder import maker, publish
from lab.progress import progress

SAVE_BATCH = 256
ROUND_TRIP_WAIT_S = 10.0
MEMORY_FIELDS = ("id", "content", "created_at", "title", "tags", "type", "metadata", "source", "importance", "pinned")


@dataclass
class SystemResult:
    system: dict[str, Any]  # the adapter's description: name, what it approximates, settings
    dataset: str
    run: pl.DataFrame  # qid, memory_id (the dataset's ids), rank, score
    per_query: pl.DataFrame  # qid, namespace, category, metric columns
    metrics: dict[str, Any]
    info: dict[str, Any] = field(default_factory=dict)


def _percentiles(seconds: list[float]) -> dict[str, float | None]:
    if not seconds:
        return {"p50_ms": None, "p99_ms": None, "mean_ms": None}
    arr = np.asarray(seconds) * 1000
    return {"p50_ms": round(float(np.percentile(arr, 50)), 3), "p99_ms": round(float(np.percentile(arr, 99)), 3),
            "mean_ms": round(float(arr.mean()), 3)}


def _bar(total: int, desc: str, enabled: bool):
    return progress(total=total, desc=desc, unit="it", enabled=enabled)


def ingest(system: MemorySystem, dataset: EvalDataset, progress: bool) -> tuple[dict[str, dict[str, str]], dict[str, Any]]:
    """Save every memory, namespace by namespace (each reset first); returns per namespace the map
    system id -> dataset id, and the ingest figures."""
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for m in dataset.memories:
        by_ns[str(m["namespace"])].append({k: (v.isoformat() if isinstance(v, datetime) else v)
                                           for k, v in m.items() if k in MEMORY_FIELDS})
    back: dict[str, dict[str, str]] = {}
    bar = _bar(len(dataset.memories), f"{system.name}: saving", progress)
    seconds = 0.0
    for ns in sorted(by_ns):
        system.reset(ns)
        back[ns] = {}
        memories = by_ns[ns]
        for start in range(0, len(memories), SAVE_BATCH):
            batch = memories[start:start + SAVE_BATCH]
            t0 = time.perf_counter()
            ids = system.save(ns, batch)
            seconds += time.perf_counter() - t0
            missing = [m["id"] for m in batch if str(m["id"]) not in ids]
            if missing:
                raise AdapterError(system.name, "save", f"returned no id for {len(missing)} of {len(batch)} memories "
                                                        f"(first: {missing[0]!r})")
            for m in batch:
                back[ns].setdefault(ids[str(m["id"])], str(m["id"]))  # a duplicate keeps the first source id
            bar.update(len(batch))
    bar.close()
    n = len(dataset.memories)
    return back, {"memories": n, "seconds": round(seconds, 3),
                  "memories_per_s": round(n / seconds, 1) if seconds else None}


def ask(system: MemorySystem, dataset: EvalDataset, back: dict[str, dict[str, str]], depth: int,
        progress: bool) -> tuple[pl.DataFrame, dict[str, Any]]:
    """Every question through ``system.search``; the run in the dataset's ids and the latency."""
    rows: list[tuple[str, str, int, float]] = []
    latencies: list[float] = []
    questions = dataset.questions.select("qid", "question", "namespace").iter_rows()
    bar = _bar(dataset.questions.height, f"{system.name}: questions", progress)
    for qid, question, ns in questions:
        t0 = time.perf_counter()
        hits = system.search(ns, question, depth)
        latencies.append(time.perf_counter() - t0)
        known = back.get(ns, {})
        rank = 0
        seen: set[str] = set()
        for system_id, score in hits[:depth]:
            source = known.get(system_id)
            if source is None:
                raise AdapterError(system.name, "search", f"returned id {system_id!r} for question {qid}, which no "
                                                          f"memory saved in namespace {ns!r} was given")
            if source in seen:  # a system returning one memory twice (several chunks): its best place counts
                continue
            seen.add(source)
            rank += 1
            rows.append((qid, source, rank, float(score)))
        bar.update(1)
    bar.close()
    run = pl.DataFrame(rows, schema={"qid": pl.String, "memory_id": pl.String, "rank": pl.Int32, "score": pl.Float64},
                       orient="row")
    return run, {"questions": len(latencies), **_percentiles(latencies)}


def round_trip(system: MemorySystem, namespace: str, k: int = 10, wait_s: float = ROUND_TRIP_WAIT_S) -> dict[str, Any]:
    """Save a fresh memory and search for it at once, then again until found (up to ``wait_s``): is a
    new memory found by the next search, and if not, after how long?"""
    token = uuid.uuid4().hex[:12]
    text = f"Round-trip check {token}: the heron named Quillon{token} nests by the eastern sluice gate"
    source = f"roundtrip-{token}"
    t0 = time.perf_counter()
    ids = system.save(namespace, [{"id": source, "content": text,
                                   "created_at": datetime.now(timezone.utc).isoformat(), "metadata": {}}])
    saved_at = time.perf_counter()
    target = ids.get(source)
    if target is None:
        raise AdapterError(system.name, "save", "the round-trip memory got no id")
    tries = 0
    while True:
        tries += 1
        found = [i for i, _ in system.search(namespace, f"heron Quillon{token} sluice gate", k)]
        if target in found:
            delay = time.perf_counter() - saved_at
            return {"found": True, "next_search": tries == 1, "delay_ms": round(delay * 1000, 1), "searches": tries,
                    "save_ms": round((saved_at - t0) * 1000, 1)}
        if time.perf_counter() - saved_at > wait_s:
            return {"found": False, "next_search": False, "delay_ms": None, "searches": tries,
                    "save_ms": round((saved_at - t0) * 1000, 1), "waited_s": wait_s}
        time.sleep(0.1)


def evaluate_system(system: MemorySystem, dataset: EvalDataset, *, ks: tuple[int, ...] = DEFAULT_KS,
                    progress: bool = True, check_round_trip: bool = True) -> SystemResult:
    """``system`` on ``dataset``: metrics with CIs and categories, ingest and search speed, round trip."""
    system = system if isinstance(system, Guarded) else Guarded(system)
    back, ingest_info = ingest(system, dataset, progress)
    run, search_info = ask(system, dataset, back, max(ks), progress)
    per_query = M.retrieval_metrics(run, dataset.qrels, ks=ks) if run.height else None
    base = dataset.questions.select("qid", "namespace", "category")
    per_query = base.join(per_query, on="qid", how="left") if per_query is not None else base
    metric_cols = M.metric_columns(ks)
    per_query = per_query.with_columns([(pl.col(c).fill_null(0.0) if c in per_query.columns else pl.lit(0.0)).alias(c)
                                        for c in metric_cols])
    means = M.mean_metrics(per_query.select("qid", *metric_cols))
    cis = dict(zip(metric_cols, bootstrap_cis(per_query.select(metric_cols).to_numpy())))
    cats = M.by_category(per_query.select("qid", *metric_cols), per_query.select("qid", "category"))
    trip = None
    if check_round_trip and back:
        namespace = sorted(back)[0]
        trip = round_trip(system, namespace)
    metrics = {"dataset": dataset.name, "config": system.name, "system": system.describe(),
               "questions": per_query.height, "metrics": means,
               "ci95": {c: [round(lo, 4), round(hi, 4)] for c, (_, lo, hi) in cis.items()},
               "by_category": cats.to_dicts(), "speed": {"ingest": ingest_info, "search": search_info},
               "round_trip": trip, "options": {"ks": list(ks)}}
    if "longmemeval" in dataset.report:  # the benchmark's own retrieval metrics, beside lab's
        metrics["longmemeval"] = longmemeval_metrics(run, dataset.report["longmemeval"])
    return SystemResult(system.describe(), dataset.name, run, per_query, metrics)


def system_run_name(dataset: str, system: str, index_suffix: str = "") -> str:
    """A harness run's folder name: the dataset (and lab's index-time settings, as a preset run
    names them), then ``system-`` and the system's name, so it never meets a search
    configuration's run of the same name (``demo-lab`` beside ``demo-system-lab``)."""
    return f"{dataset}{index_suffix}-system-{system}"


def write_system_run(result: SystemResult, dataset: EvalDataset, out_root: Path,
                     index: dict[str, Any] | None = None, index_suffix: str = "", log: str = "") -> Path:
    """The system's run folder under ``out_root``, written whole (lab.eval.run_folder), which
    `lab compare` reads like any other: metrics.json, per_question.parquet, the run (parquet and
    TREC), the qrels and a short report; ``log``: what the system printed, warned and logged
    (``system.log``). ``index``: the index-time settings, when lab set them."""
    name = result.system["system"]
    made = maker("memory system", name, dataset.name, dataset.source, index)

    def write(folder: Path) -> None:
        _write_system_files(result, dataset.qrels, folder, log)
        if "longmemeval" in dataset.report:  # the official retrieval log, as a preset's run folder has it
            write_official_log(folder, result.run, dataset.report["longmemeval"], dataset.source)

    return publish(Path(out_root) / system_run_name(dataset.name, name, index_suffix), made, write)


def _write_system_files(result: SystemResult, qrels: pl.DataFrame, out: Path, log: str = "") -> None:
    if log:
        (out / "system.log").write_text(log, encoding="utf-8")
    meta = {**result.metrics, "written_at": datetime.now(timezone.utc).isoformat()}
    (out / "metrics.json").write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
    result.per_query.write_parquet(out / "per_question.parquet")
    result.run.write_parquet(out / "run.parquet")
    write_trec_run(result.run, out / "run.trec", result.system["system"])
    write_trec_qrels(qrels, out / "qrels.trec")
    m, speed, trip = result.metrics["metrics"], result.metrics["speed"], result.metrics.get("round_trip")
    lines = [f"# {result.system['system']} on {result.dataset}", ""]
    if result.system.get("approximates"):
        lines += [f"Approximates: {result.system['approximates']}", ""]
    lines += ["| metric | value | 95% CI |", "|---|---|---|"]
    lines += [f"| {k} | {m[k]:.4f} | {result.metrics['ci95'][k][0]:.4f} – {result.metrics['ci95'][k][1]:.4f} |"
              for k in ("recall@5", "recall@10", "ndcg@10", "mrr") if k in m]
    lines += ["", f"Ingest: {speed['ingest']['memories']} memories, {speed['ingest']['memories_per_s']} per second. "
              f"Search: p50 {speed['search']['p50_ms']} ms, p99 {speed['search']['p99_ms']} ms."]
    if trip:
        lines.append("Round trip: " + (f"a new memory was found by the next search ({trip['delay_ms']} ms after its "
                                       "save)" if trip["next_search"] else
                                       f"found after {trip['delay_ms']} ms" if trip["found"] else
                                       f"not found within {trip.get('waited_s')} s"))
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
