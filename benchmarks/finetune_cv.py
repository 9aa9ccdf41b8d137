"""The fine-tuned model judged as lab judges (issue 60 #2): LoCoMo dev, leave one conversation out,
the model fine-tuned without the held-out conversation's questions, every memory embedded again by
it, scored on the held-out questions against the base model, alone and fused in `lab`.

    .venv/bin/python benchmarks/finetune_cv.py [--epochs 1] [--hard-negatives 1]

- **Per fold.** `lab adapt --kind finetune`'s training (lab.tune.finetune: sentence-transformers'
  trainer, MultipleNegativesRankingLoss over question, gold memory and in-namespace hard
  negatives) on the other four conversations' gold; LoCoMo dev's evaluation store built again with
  the fold's model (its own root and embedding cache, so nothing of it is reused); the `vector` and
  `lab` presets evaluated on the held-out conversation's questions.
- **Paired** over every held-out question against the base model's store (bootstrap 95% CI of the
  delta, randomization p: lab.eval.metrics.compare_runs).
- **Timed** (the issue's target: trains and re-embeds LoCoMo dev in <= 45 min on this 2-core
  machine): one training on all of LoCoMo dev's gold, then the store built with it. Take the time
  with nothing else running; the load average at start and end is recorded beside it.

Results: stdout and benchmarks/results/finetune_cv.json.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, report  # noqa: E402

from lab.config import FinetuneConfig  # noqa: E402
from lab.eval.dataset_ref import DatasetRef  # noqa: E402
from lab.eval.metrics import compare_runs  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.search.presets import preset  # noqa: E402
from lab.tune.adapt import gold_vectors  # noqa: E402
from lab.tune.finetune import base_folder, train_finetune, triplets, write_finetuned  # noqa: E402

METRICS = ("recall@10", "ndcg@10")
PRESETS = ("vector", "lab")


def paired(a: pl.DataFrame, b: pl.DataFrame) -> dict:
    out = {}
    for row in compare_runs(a, b, list(METRICS)).iter_rows(named=True):
        out[row["metric"]] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "metric"}
    return out


def scored(retriever, dataset, questions: list[str]) -> dict[str, pl.DataFrame]:
    """Per preset: the per-question metrics of ``questions``."""
    sub = dataset.questions_only(dataset.questions.filter(pl.col("qid").is_in(questions)))
    return {p: evaluate(retriever, sub, preset(p), EvalOptions(ks=(10,))).per_query.select("qid", *METRICS)
            for p in PRESETS}


def tuned_store(dataset, model_id: str, scratch: Path):
    """LoCoMo dev's evaluation store built with ``model_id`` in ``scratch``; (retriever, seconds)."""
    save = save_config()
    save = replace(save, embed=replace(save.embed, model=model_id))
    started = time.perf_counter()
    retriever = eval_retriever(dataset, save, root=scratch / "eval", embeddings=scratch / "embeddings")
    return retriever, time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=FinetuneConfig.epochs)
    parser.add_argument("--hard-negatives", type=int, default=FinetuneConfig.hard_negatives)
    args = parser.parse_args()
    settings = FinetuneConfig(epochs=args.epochs, hard_negatives=args.hard_negatives)
    results: dict = {"benchmark": "finetune_cv", "dataset": "locomo", "settings": settings.__dict__,
                     "load_average_at_start": os.getloadavg()[0]}
    dataset = DatasetRef("locomo", DATASETS).load()
    retriever = eval_retriever(dataset, save_config())
    base = base_folder(retriever.embedder.model_id)
    gold = gold_vectors(retriever, dataset)
    folds = np.asarray(gold.namespaces)
    base_scores = scored(retriever, dataset, gold.qids)
    tuned: dict[str, list[pl.DataFrame]] = {p: [] for p in PRESETS}
    per_fold = []
    for fold in sorted(set(folds.tolist())):
        train, held = np.flatnonzero(folds != fold), np.flatnonzero(folds == fold)
        columns = triplets(gold, dataset, train, settings.hard_negatives)
        started = time.perf_counter()
        model, loss = train_finetune(base, columns, settings)
        train_s = time.perf_counter() - started
        with tempfile.TemporaryDirectory(prefix="finetune-cv-") as tmp:
            model_id = write_finetuned(Path(tmp) / "model", model, {"fold": fold})
            r2, embed_s = tuned_store(dataset, model_id, Path(tmp))
            held_qids = [gold.qids[r] for r in held]
            got = scored(r2, dataset, held_qids)
            r2.close()
        for p in PRESETS:
            tuned[p].append(got[p])
        v = paired(base_scores["vector"].filter(pl.col("qid").is_in(held_qids)), got["vector"])
        per_fold.append({"fold": fold, "questions": len(held), "triplets": len(columns["anchor"]),
                         "train_s": round(train_s, 1), "embed_s": round(embed_s, 1), "final_loss": loss[-1][1],
                         "vector_recall@10": [v["recall@10"]["mean_a"], v["recall@10"]["mean_b"]]})
        print(f"  {fold}: {len(columns['anchor'])} triplets, trained in {train_s:.0f} s, store in {embed_s:.0f} s, "
              f"vector recall@10 {v['recall@10']['mean_a']:.4f} -> {v['recall@10']['mean_b']:.4f}", flush=True)
        results["folds"] = per_fold
        report("finetune_cv", results)  # after each fold: a long run stopped keeps what it measured
    for p in PRESETS:
        results[p] = paired(base_scores[p], pl.concat(tuned[p]))
        for m in METRICS:
            r = results[p][m]
            print(f"  {p} {m}: {r['mean_a']:.4f} -> {r['mean_b']:.4f} ({r['delta']:+.4f}, 95% CI "
                  f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}], p {r['p_value']:.4f}, n {r['n']})", flush=True)
    # the time: one training on all the gold, then every memory embedded again by it
    started = time.perf_counter()
    model, _ = train_finetune(base, triplets(gold, dataset, np.arange(len(gold.qids)), settings.hard_negatives),
                              settings)
    train_all_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="finetune-cv-") as tmp:
        _, embed_all_s = tuned_store(dataset, write_finetuned(Path(tmp) / "model", model, {}), Path(tmp))
    results["timed"] = {"train_on_all_s": round(train_all_s, 1), "re_embed_s": round(embed_all_s, 1),
                        "total_min": round((train_all_s + embed_all_s) / 60, 1)}
    results["load_average_at_end"] = os.getloadavg()[0]
    print(f"  trained on all in {train_all_s:.0f} s, re-embedded in {embed_all_s:.0f} s", flush=True)
    report("finetune_cv", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
