"""LongMemEval-S at its real size (issue 57): the shared development half, the official protocol.

    .venv/bin/python benchmarks/longmemeval_s.py [--granularity turn session] [--model minilm-int8]

For each granularity (user-turn corpus, the official default), in fresh processes of `lab eval`
exactly as a user runs it (`--dataset longmemeval-s-dev --no-track`), each timed with its peak
resident memory (the child's own ``ru_maxrss``):

- ``cold``: an empty evaluation root and an empty embedding cache, presets lab, bm25, vector and
  rrf-k2 (the issue's targets: turn <= 30 min, session <= 15 min, peak RSS <= 4 GB);
- ``warm``: the evaluation store deleted, the embedding cache kept (the store rebuilt from cached
  vectors; target <= 5 min). Its run files must equal the cold run's: the script exits 1 when a
  ranking or a figure differs;
- ``all``: every preset (the baselines and the seed systems' presets) on the warm store.

Embedding speed: the texts the cold run embedded (the cache's rows) over the cold run's extra wall
time against the warm run (so it holds only the embedding, not the loading or the search).

Per preset: the official headline (`lab.eval.longmemeval_metrics`) and per question type each
official figure with a 95% bootstrap interval over that type's questions (seed 0), from the run's
own official retrieval log; lab's recall@10 beside it. Abstention (the 15 ``_abs`` questions of the
half against the answerable ones) under ``lab``: AUROC of the best cosine with a stratified bootstrap
interval, and what the threshold fitted on LoCoMo dev (`benchmarks/results/abstention.json`) does
here. Written to benchmarks/results/longmemeval_s.json; the docs' results page shows it beside the
published anchors. Take the figures with nothing else running.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, ROOT, report  # noqa: E402

TIMED = ("lab", "bm25", "vector", "rrf-k2")
EVERY = ("lab", "bm25", "vector", "rrf-k60", "rrf-k2", "maia", "maia-code", "brainbridge", "lma", "mie",
         "stackmemory")
BENCH = ROOT / ".lab" / "bench" / "longmemeval-s"
DATASET = os.environ.get("LAB_LME_DATASET", "longmemeval-s-dev")  # the oracle file: a quick try of this script
# published retrieval-only figures on LongMemEval-S (../shared/datasets/longmemeval/README.md)
ANCHORS = {"bm25 session recall@5": [0.86, 0.89], "bm25 session recall@5 on preference questions": 0.47,
           "all-MiniLM-L6-v2 raw sessions recall_any@5": 0.966, "all-MiniLM-L6-v2 raw sessions recall_all@5": 0.870}


def lab_eval(granularity: str, model: str, presets: tuple[str, ...], out: Path, log: Path,
             extra: tuple[str, ...] = ()) -> dict:
    """One `lab eval` in a fresh process: its wall time and peak RSS (the child's own)."""
    env = {**os.environ, "LAB_EVAL_ROOT": str(BENCH / granularity / "eval"),
           "LAB_EMBED_CACHE": str(BENCH / granularity / "embeddings"), "LAB_DATASETS": str(DATASETS)}
    cmd = [str(ROOT / ".venv" / "bin" / "lab"), "eval", "--dataset", DATASET, "--granularity", granularity,
           "--preset", *presets, "--model", model, "--no-track", "--out", str(out), *extra]
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    with open(log, "w") as f:
        child = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed (exit {os.waitstatus_to_exitcode(status)}); its output: {log}")
    return {"wall_s": round(wall, 1), "peak_rss_gb": round(usage.ru_maxrss / 1024 ** 2, 3),
            "command": "lab " + " ".join(cmd[1:]).replace(str(ROOT) + "/", "")}


def cached_texts(granularity: str) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(p).metadata.num_rows for p in (BENCH / granularity / "embeddings").rglob("part-*.parquet"))


def run_folders(out: Path) -> dict[str, Path]:
    """Preset name -> its run folder (config.yaml's name is the folder's suffix)."""
    found = {}
    for folder in sorted(out.iterdir()):
        meta = json.loads((folder / "metrics.json").read_text())
        found[meta["config"]] = folder
    return found


def same_runs(a: Path, b: Path) -> list[str]:
    """The presets whose ranking or figures differ between two runs of the same presets."""
    differ = []
    for name, folder in run_folders(a).items():
        other = run_folders(b)[name]
        if (folder / "run.trec").read_bytes() != (other / "run.trec").read_bytes():
            differ.append(f"{name}: run.trec")
        ma, mb = (json.loads((f / "metrics.json").read_text()) for f in (folder, other))
        if (ma["metrics"], ma["longmemeval"]) != (mb["metrics"], mb["longmemeval"]):
            differ.append(f"{name}: metrics.json")
    return differ


def with_cis(folder: Path) -> dict:
    """The official headline and per question type each headline figure as [mean, low, high]
    (95% bootstrap over the questions, seed 0), from the run's official retrieval log."""
    from lab.eval.longmemeval_metrics import HEADLINE
    from lab.eval.metrics import bootstrap_cis

    meta = json.loads((folder / "metrics.json").read_text())
    lme = meta["longmemeval"]
    level = lme["protocol"]["granularity"]
    rows = [json.loads(line) for line in open(folder / "longmemeval_retrievallog.jsonl", encoding="utf-8")]
    # the headline's figures, and recall_any@5 (the published MiniLM anchor's)
    names = [(lv, n) for lv in ("session", "turn") if lv == "session" or level == "turn"
             for n in ("recall_any@5", *HEADLINE[lv])]

    def table(members: list[dict]) -> dict:
        values = np.array([[r["retrieval_results"]["metrics"][lv][n] for lv, n in names] for r in members])
        out: dict = {"n": len(members)}
        for (lv, n), (mean, low, high) in zip(names, bootstrap_cis(values)):
            out.setdefault(lv, {})[n] = [round(mean, 4), round(low, 4), round(high, 4)]
        return out

    by_type = {}
    for qtype in sorted({r["question_type"] for r in rows}):
        by_type[qtype] = table([r for r in rows if r["question_type"] == qtype])
    lab_ci = meta["ci95"]["recall@10"]
    return {"questions_scored": lme["questions"], "excluded": lme["excluded"], "headline": lme["headline"],
            "all": table(rows), "by_type": by_type,
            "lab_recall@10": [round(meta["metrics"]["recall@10"], 4), *lab_ci], "questions_lab": meta["questions"]}


def warm_store(granularity: str, model: str) -> tuple:
    """(dataset, retriever, evaluation root) of the store the runs above left, opened once for the
    in-process parts (abstention, levers)."""
    from dataclasses import replace

    from lab.eval.dataset_ref import DatasetOptions, DatasetRef
    from lab.eval.stores import eval_retriever, save_config

    dataset = DatasetRef(DATASET, DATASETS, options=DatasetOptions(granularity=granularity)).load()
    save = save_config()
    save = replace(save, embed=replace(save.embed, model=model))
    root = BENCH / granularity / "eval"
    return dataset, eval_retriever(dataset, save, root=root, embeddings=BENCH / granularity / "embeddings"), root


def abstention(store: tuple) -> dict:
    """The ``_abs`` questions against the answerable ones under ``lab``: AUROC with a stratified
    bootstrap interval, the threshold fitted here (in sample: 15 negatives hold no held-out split)
    and what LoCoMo dev's fitted threshold does here."""
    import polars as pl

    from lab.eval.abstention import AbstentionOptions, auroc_interval, figures, measure
    from lab.eval.runner import EvalOptions, evaluate
    from lab.search.presets import preset

    dataset, retriever, root = store
    config = preset("lab")
    result = evaluate(retriever, dataset, config, EvalOptions(), root=root)
    everything = pl.concat([dataset.questions.select("qid"), dataset.unanswerable.select("qid")])
    parts = everything.with_columns(pl.lit("tune").alias("part"))
    table, summary = measure(retriever, dataset, config, result.per_query, AbstentionOptions(), root=root, parts=parts)
    scores = table["score"].fill_null(-np.inf).to_numpy()
    answerable = table["answerable"].to_numpy()
    area, low, high = auroc_interval(scores[answerable], scores[~answerable])
    locomo = json.loads((ROOT / "benchmarks" / "results" / "abstention.json").read_text())
    locomo_threshold = locomo["locomo_dev_cross_haystack"]["presets_seed0"]["lab"]["threshold"]
    return {"preset": "lab", "answerable": int(answerable.sum()), "unanswerable": int((~answerable).sum()),
            "auroc": [round(area, 4), round(low, 4), round(high, 4)],
            "fitted_here_in_sample": {"threshold": summary["threshold"], **summary["tune"]},
            "locomo_dev_threshold": {"threshold": locomo_threshold, "source": "benchmarks/results/abstention.json "
                                     "(locomo_dev_cross_haystack, lab, seed 0; all-MiniLM-L6-v2)",
                                     **figures(table, locomo_threshold, "recall@10")},
            "note": "no target: 15 unanswerable questions hold an AUROC only to the interval shown"}


def lever_variants() -> dict:
    """``lab`` with one lever off at a time (search time: the same store)."""
    from dataclasses import replace

    from lab.search.presets import preset

    lab = preset("lab")
    w = dict(lab.fusion.weights)
    return {"lab": lab,
            "no temporal list": replace(lab, signals=("vector", "lexical"), fusion=replace(lab.fusion, weights={**w, "temporal": 0.0})),
            "no coverage bonus": replace(lab, fusion=replace(lab.fusion, coverage_bonus=0.0)),
            "no neighbour boost": replace(lab, fusion=replace(lab.fusion, neighbour_boost=0.0)),
            "no plain view": replace(lab, views=(), fusion=replace(lab.fusion, weights={
                k: v for k, v in {**w, "vector": 1.0, "lexical": 1.0}.items() if "@" not in k}))}


def ablation(store: tuple, granularity: str) -> dict:
    """Which of ``lab``'s levers costs it where: the official session recall_all@5 (and turn
    ndcg_any@10 at turn granularity) overall and per question type, each lever off in turn."""
    from lab.eval.runner import EvalOptions, evaluate

    dataset, retriever, root = store
    out = {}
    for name, config in lever_variants().items():
        lme = evaluate(retriever, dataset, config, EvalOptions(budget=None), root=root).metrics["longmemeval"]
        row = {"session recall_all@5": round(lme["session"]["recall_all@5"], 4),
               "by_type": {t: round(v["session"]["recall_all@5"], 4) for t, v in lme["by_type"].items()}}
        if granularity == "turn":
            row["turn ndcg_any@10"] = round(lme["turn"]["ndcg_any@10"], 4)
        out[name] = row
    return out


def granularity_part(granularity: str, model: str, skip_cold: bool) -> dict:
    where = BENCH / granularity
    out: dict = {}
    if not skip_cold:
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        print(f"[{granularity}] cold: {', '.join(TIMED)}", flush=True)
        out["cold"] = lab_eval(granularity, model, TIMED, where / "runs-cold", where / "cold.log")
        out["cold"]["texts_embedded"] = cached_texts(granularity)
    shutil.rmtree(where / "eval", ignore_errors=True)
    print(f"[{granularity}] warm (cached vectors, store rebuilt)", flush=True)
    out["warm"] = lab_eval(granularity, model, TIMED, where / "runs-warm", where / "warm.log")
    if not skip_cold:
        spent = out["cold"]["wall_s"] - out["warm"]["wall_s"]
        out["embedding_texts_per_s"] = round(out["cold"]["texts_embedded"] / spent, 1) if spent > 0 else None
        out["cold_equals_warm"] = not (differ := same_runs(where / "runs-cold", where / "runs-warm"))
        if differ:
            print(f"[{granularity}] cold and warm runs differ: {differ}", file=sys.stderr)
    print(f"[{granularity}] every preset on the warm store", flush=True)
    out["all"] = lab_eval(granularity, model, EVERY, where / "runs-all", where / "all.log")
    out["presets"] = {name: with_cis(folder) for name, folder in run_folders(where / "runs-all").items()}
    store = warm_store(granularity, model)
    print(f"[{granularity}] abstention", flush=True)
    out["abstention"] = abstention(store)
    print(f"[{granularity}] lab's levers, one off at a time", flush=True)
    out["levers"] = ablation(store, granularity)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--granularity", nargs="+", choices=("turn", "session"), default=["session", "turn"])
    ap.add_argument("--model", default="minilm-int8", help="the store's embedding model (default: MiniLM as int8 ONNX)")
    ap.add_argument("--skip-cold", action="store_true", help="keep the embedding cache (no cold figures)")
    ap.add_argument("--levers-only", action="store_true",
                    help="only the lever ablation, on the stores an earlier run left (its other figures kept)")
    args = ap.parse_args()
    path = ROOT / "benchmarks" / "results" / "longmemeval_s.json"
    results = json.loads(path.read_text()) if path.is_file() else {}
    results = {k: v for k, v in results.items() if k not in ("benchmark", "machine")}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    results.update(dataset=DATASET, model=args.model, timed_presets=list(TIMED), anchors=ANCHORS,
                   conditions="nothing else running on the machine")
    differ = False
    for granularity in args.granularity:
        if args.levers_only:
            results[granularity]["levers"] = ablation(warm_store(granularity, args.model), granularity)
            report("longmemeval_s", results)
            continue
        before = results.get(granularity) or {}
        results[granularity] = {**granularity_part(granularity, args.model, args.skip_cold), "commit": commit}
        if args.skip_cold and "cold" in before:  # the cold figures an earlier run measured, kept and dated
            results[granularity].update({k: before[k] for k in ("cold", "embedding_texts_per_s", "cold_equals_warm")
                                         if k in before})
            results[granularity]["cold"].setdefault("commit", before.get("commit"))
        differ |= results[granularity].get("cold_equals_warm") is False
        report("longmemeval_s", results)  # written after each granularity: a long run keeps what it measured
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
