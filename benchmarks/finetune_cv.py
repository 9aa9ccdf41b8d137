"""The fine-tuned model judged as lab judges (issue 60 #2): held-out folds, the model fine-tuned
without the held-out questions, the held-out memories embedded again by it, scored on the held-out
questions against the base model, alone and fused in `lab`.

    .venv/bin/python benchmarks/finetune_cv.py [--datasets locomo longmemeval-s-dev scifact]
                                               [--epochs 1 | --epochs-on-train 1 2 3] [--hard-negatives 1]
                                               [--no-timed] [--fusion-on-train]

- **Folds**, as `benchmarks/adapt_cv.py` draws them: LoCoMo dev, leave one conversation out;
  LongMemEval-S dev (turn granularity, user turns), 5 folds of its haystacks by a hash of the
  namespace; SciFact train, 5 folds of its questions by a hash of the qid.
- **Base model**: the bundled MiniLM (sentence-transformers), the one model here that can be
  fine-tuned. LongMemEval's store is built with it under .lab/bench/longmemeval-s/turn-st (about
  60,000 turns embedded once; `benchmarks/longmemeval_s.py`'s store holds the int8 export, which
  cannot be trained).
- **Per fold.** `lab adapt --kind finetune`'s training (lab.tune.finetune: sentence-transformers'
  trainer, MultipleNegativesRankingLoss over question, gold memory and in-namespace hard
  negatives) on the other folds' gold; an evaluation store built with the fold's model (its own
  root and embedding cache, so nothing of it is reused); the `vector` and `lab` presets evaluated
  on the held-out questions.
  - Where the folds are namespaces (LoCoMo, LongMemEval), that store holds the held-out namespaces
    only: a search never leaves its namespace (BM25 statistics, adjacency and edges are all the
    view's own), so the figures are those of the whole store at a fraction of the embedding. The
    first fold checks this: the base model's store narrowed the same way must give every held-out
    question the metrics the whole store gives; the run exits non-zero if one differs.
- **Paired** over every held-out question against the base model's store (bootstrap 95% CI of the
  delta, randomization p: lab.eval.metrics.compare_runs).
- **Fusion chosen on the training folds** (``--fusion-on-train``): the `lab` preset's weights were
  chosen for the base model's vector list, which fine-tuning makes much stronger. So, as a user would
  sweep them again after adapting (`lab tune sweep` on their own gold), each fold's model also embeds
  the training folds' memories, and the weight of `lab`'s vector lists (times 1, 1.5, 2, 3) is chosen
  by the training folds' questions (mean of recall@10 and nDCG@10; a tie keeps the smaller weight),
  then scored once on the held-out questions. Nothing held out takes part in the choice; the training
  questions were the model's training data, so the choice leans toward the vector list, and the
  held-out figure is what that procedure earns, bias included (``lab_fusion_on_train``).
- **Epochs chosen on the training folds** (``--epochs-on-train 1 2 3 --no-timed``): how long to
  train is a choice too, so it is made without the held-out fold. Per fold, one training fold
  validates (the one after the held-out fold in name order), the rest train a model per count, the
  count whose model gives `lab` the best validation figure trains the fold's model on all training
  folds, and that model alone is scored on the held-out questions (``epochs_on_train`` per fold).
- **Timed** (LoCoMo; the issue's target: trains and re-embeds LoCoMo dev in <= 45 min on this
  2-core machine): one training on all of LoCoMo dev's gold, then the store built with it. Take the
  time with nothing else running; the load average at start and end is recorded beside it.

Results: stdout and benchmarks/results/finetune_cv.json, or ``--results finetune_cv_NAME`` for other
settings (the datasets not run now are kept from the last run under the same settings). Each finished
fold's held-out metrics per question go to benchmarks/results/folds/NAME-DATASET-FOLD.parquet, so
``--resume`` (same settings and name) takes the folds a stopped run finished and runs the rest.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import DATASETS, ROOT, report  # noqa: E402
from adapt_cv import outer_folds  # noqa: E402  (the same folds as the adapter's judgement)

from lab.config import FinetuneConfig  # noqa: E402
from lab.eval.dataset_ref import DatasetRef  # noqa: E402
from lab.eval.longmemeval_metrics import scored_questions  # noqa: E402
from lab.eval.metrics import compare_runs  # noqa: E402
from lab.eval.runner import EvalOptions, evaluate  # noqa: E402
from lab.eval.stores import eval_retriever, save_config  # noqa: E402
from lab.search.presets import preset  # noqa: E402
from lab.tune.adapt import gold_vectors  # noqa: E402
from lab.tune.finetune import (  # noqa: E402
    base_folder, held_out_gold_texts, memory_texts, train_finetune, triplets, write_finetuned,
)

METRICS = ("recall@10", "ndcg@10")
PRESETS = ("vector", "lab")
DATASET_NAMES = ("locomo", "longmemeval-s-dev", "scifact")
LME_ST_ROOT = ROOT / ".lab" / "bench" / "longmemeval-s" / "turn-st"
FOLDS_ARE_NAMESPACES = {"locomo", "longmemeval-s-dev"}
# the LongMemEval targets, by the official code's definitions, and the presets whose best it must reach
OFFICIAL = ("session recall_all@5", "turn ndcg_any@10")
BASELINES = ("bm25", "vector", "rrf-k2", "rrf-k60", "stackmemory", "lma", "maia", "maia-code", "mie", "brainbridge")


# the `lab` preset's vector lists weighted by each factor in turn (--fusion-on-train)
VECTOR_FACTORS = (1.0, 1.5, 2.0, 3.0)


def asked(dataset, qids: list[str]):
    """``dataset`` with the questions ``qids`` only."""
    return dataset.questions_only(dataset.questions.filter(pl.col("qid").is_in(qids)))


def vector_weighted(factor: float):
    """The `lab` preset with its vector lists' weights times ``factor``."""
    lab = preset("lab")
    weights = {k: (w * factor if k.split("@")[0] == "vector" else w) for k, w in lab.fusion.weights.items()}
    return replace(lab, name=f"lab-vector-x{factor:g}", fusion=replace(lab.fusion, weights=weights))


def fusion_on_train(retriever, dataset, train_qids: list[str], held_qids: list[str]) -> tuple[float, dict, pl.DataFrame]:
    """The vector factor the training questions prefer (mean recall@10 and nDCG@10, the smaller
    factor on a tie), each factor's training figure, and the held-out questions' metrics under it."""
    train = asked(dataset, train_qids)
    on_train = {}
    for factor in VECTOR_FACTORS:
        per_q = evaluate(retriever, train, vector_weighted(factor), EvalOptions(ks=(10,))).per_query
        on_train[factor] = round(float((per_q["recall@10"].mean() + per_q["ndcg@10"].mean()) / 2), 4)
    chosen = max(VECTOR_FACTORS, key=lambda f: (on_train[f], -f))
    got = evaluate(retriever, asked(dataset, held_qids), vector_weighted(chosen), EvalOptions(ks=(10,))).per_query
    return chosen, {f"x{f:g}": v for f, v in on_train.items()}, got.select("qid", *METRICS)


def epochs_on_train(dataset, gold, folds: np.ndarray, base: Path, settings: FinetuneConfig, held: np.ndarray,
                    choices: tuple[int, ...], texts: dict[str, str]) -> tuple[int, dict]:
    """The epoch count of ``choices`` the training folds prefer, and what each earned. The training
    fold after the held-out one (in name order, wrapping round) validates; the other training folds
    train one model per count (each with its own learning-rate schedule, as a run of that many
    epochs has); `lab` is scored on the validation questions (mean of recall@10 and nDCG@10; a tie
    keeps fewer epochs). Neither the validation fold's gold nor the held-out one's is a positive."""
    names = sorted(set(folds.tolist()))
    validating = names[(names.index(folds[held[0]]) + 1) % len(names)]
    valid = np.flatnonzero(folds == validating)
    inner = np.flatnonzero((folds != validating) & (folds != folds[held[0]]))
    columns = triplets(gold, dataset, inner, settings.hard_negatives,
                       held_out_gold_texts(gold, dataset, np.concatenate([held, valid]), texts))
    valid_qids = [gold.qids[r] for r in valid]
    scope = narrowed(dataset, {gold.namespaces[r] for r in valid}) if dataset.name in FOLDS_ARE_NAMESPACES else dataset
    figures = {}
    for epochs in choices:
        started = time.perf_counter()
        model, _ = train_finetune(base, columns, replace(settings, epochs=epochs))
        with tempfile.TemporaryDirectory(prefix="finetune-cv-inner-") as tmp:
            retriever, _ = store(scope, write_finetuned(Path(tmp) / "model", model, {"epochs": epochs}), Path(tmp))
            per_q = evaluate(retriever, asked(dataset, valid_qids), preset("lab"), EvalOptions(ks=(10,))).per_query
            retriever.close()
        figures[epochs] = round(float((per_q["recall@10"].mean() + per_q["ndcg@10"].mean()) / 2), 4)
        print(f"    validating on {validating}: {epochs} epoch(s) on {len(columns['anchor'])} triplets, `lab` mean of "
              f"recall@10 and nDCG@10 {figures[epochs]:.4f} ({time.perf_counter() - started:.0f} s)", flush=True)
    chosen = max(choices, key=lambda e: (figures[e], -e))
    return chosen, {"chosen": chosen, "validation_fold": str(validating), "validation_questions": len(valid),
                    "lab_mean_recall_ndcg@10": {str(e): v for e, v in figures.items()}}


def paired(a: pl.DataFrame, b: pl.DataFrame, metrics: tuple[str, ...] = METRICS) -> dict:
    out = {}
    for row in compare_runs(a, b, list(metrics)).iter_rows(named=True):
        out[row["metric"]] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "metric"}
    return out


def official(run: pl.DataFrame, dataset, questions: list[str]) -> pl.DataFrame:
    """The official LongMemEval figures of the issue's targets, per scored question of ``questions``
    (those without a target turn are excluded, as the official code excludes them)."""
    info = dataset.report["longmemeval"]
    _, per_q = scored_questions(run, info)
    excluded = set(info["no_target"])
    kept = [q for q in questions if q in per_q and q not in excluded]
    return pl.DataFrame({"qid": kept, **{name: [float(per_q[q][name.split()[0]][name.split()[1]]) for q in kept]
                                         for name in OFFICIAL}}, schema={"qid": pl.String, **dict.fromkeys(OFFICIAL, pl.Float64)})


def scored(retriever, dataset, questions: list[str], presets: tuple[str, ...] = PRESETS):
    """Per preset: the per-question metrics of ``questions``, and on LongMemEval the official ones."""
    sub = asked(dataset, questions)
    metrics, lme = {}, {}
    for p in presets:
        result = evaluate(retriever, sub, preset(p), EvalOptions(ks=(10,)))
        metrics[p] = result.per_query.select("qid", *METRICS)
        if "longmemeval" in dataset.report:
            lme[p] = official(result.run, dataset, questions)
    return metrics, lme


def against_best_baseline(base_lme: dict[str, pl.DataFrame], tuned_lab: pl.DataFrame) -> dict:
    """Per official target: the best baseline on the base model's store, and `lab` (base, and
    fine-tuned on held-out folds) paired against it."""
    out = {}
    for metric in OFFICIAL:
        means = {b: round(float(base_lme[b][metric].mean()), 4) for b in BASELINES}
        best = max(BASELINES, key=lambda b: (means[b], b))
        out[metric] = {"baselines": means, "best_baseline": best,
                       "lab_base": paired(base_lme[best], base_lme["lab"], (metric,))[metric],
                       "lab_finetuned": paired(base_lme[best], tuned_lab, (metric,))[metric]}
        for what in ("lab_base", "lab_finetuned"):
            r = out[metric][what]
            print(f"  {metric}: best baseline {best} {r['mean_a']:.4f}, {what} {r['mean_b']:.4f} ({r['delta']:+.4f}, "
                  f"95% CI [{r['delta_low']:+.4f}, {r['delta_high']:+.4f}], p {r['p_value']:.4f}, n {r['n']})", flush=True)
    return out


def narrowed(dataset, namespaces: set[str]):
    """``dataset`` with the memories, saves, edges and questions of ``namespaces`` only."""
    return replace(dataset.questions_only(dataset.questions.filter(pl.col("namespace").is_in(sorted(namespaces)))),
                   memories=[m for m in dataset.memories if m["namespace"] in namespaces],
                   saves={k: m for k, m in dataset.saves.items() if m["namespace"] in namespaces},
                   edges=[e for e in dataset.edges if e["namespace"] in namespaces])


def store(dataset, model_id: str | None, scratch: Path | None):
    """``dataset``'s evaluation store built with ``model_id`` (None: the base model) in ``scratch``
    (None: the dataset's own root); (retriever, seconds)."""
    save = save_config()
    if model_id is not None:
        save = replace(save, embed=replace(save.embed, model=model_id))
    if scratch is None and dataset.name == "longmemeval-s-dev":
        scratch = LME_ST_ROOT
    started = time.perf_counter()
    retriever = eval_retriever(dataset, save, root=scratch and scratch / "eval",
                               embeddings=scratch and scratch / "embeddings", progress=True)
    return retriever, time.perf_counter() - started


def narrowing_holds(dataset, namespaces: set[str], base: tuple[dict, dict], held_qids: list[str]) -> bool:
    """The base model's store of ``namespaces`` alone scores each held-out question as the whole store
    does: lab's metrics and, on LongMemEval, the official ones (which read deeper than the top 10)."""
    small, _ = store(narrowed(dataset, namespaces), None, None)
    got = scored(small, dataset, held_qids)
    small.close()
    same = True
    for whole, part in zip(base, got):
        for p, frame in part.items():
            want = whole[p].filter(pl.col("qid").is_in(held_qids)).sort("qid")
            if not frame.sort("qid").equals(want):
                differ = frame.sort("qid").join(want, on="qid", suffix="_whole").filter(pl.any_horizontal(
                    pl.col(c) != pl.col(f"{c}_whole") for c in frame.columns if c != "qid"))
                print(f"  the narrowed store differs from the whole one under {p} on {differ.height} question(s): "
                      f"{differ.head(3).to_dicts()}", flush=True)
                same = False
    return same


FOLD_FILES = ROOT / "benchmarks" / "results" / "folds"  # each finished fold's held-out metrics per question


def fold_file(results: str, name: str, fold: str) -> Path:
    return FOLD_FILES / f"{results}-{name}-{fold}.parquet"


def write_fold(path: Path, frames: dict[str, pl.DataFrame]) -> None:
    """A fold's per-question frames, one file (``what`` names the frame), written whole then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".writing")
    pl.concat([f.with_columns(what=pl.lit(what)) for what, f in frames.items()], how="diagonal").write_parquet(tmp)
    tmp.replace(path)


def read_fold(path: Path) -> dict[str, pl.DataFrame]:
    rows = pl.read_parquet(path)
    return {what: part.select([c for c in part.columns if c == "qid" or (c != "what" and part[c].null_count() < part.height)])
            for (what,), part in rows.group_by("what", maintain_order=True)}


def run_fold(ctx: dict, fold: str, scope, on_train: bool, epoch_choices: tuple[int, ...]) -> tuple[dict, dict]:
    """One outer fold: the model trained without it, its held-out questions scored; (the fold's
    record, {what: per-question frame}: vector, lab, and lab_official / lab_fusion_on_train)."""
    dataset, gold, folds, base, settings, texts = (ctx[k] for k in ("dataset", "gold", "folds", "base", "settings", "texts"))
    train, held = np.flatnonzero(folds != fold), np.flatnonzero(folds == fold)
    held_qids = [gold.qids[r] for r in held]
    # a held-out question's gold is no training positive (lab.tune.finetune.triplets says why)
    avoid = held_out_gold_texts(gold, dataset, held, texts)
    columns = triplets(gold, dataset, train, settings.hard_negatives, avoid)
    left_out = sum(texts[m] in avoid for r in train for m in gold.gold[r] if m in texts)
    fold_settings, record = settings, {"fold": fold, "questions": len(held), "memories": len(scope.memories),
                                       "triplets": len(columns["anchor"]), "positives_left_out": left_out}
    if epoch_choices:
        epochs, record["epochs_on_train"] = epochs_on_train(dataset, gold, folds, base, settings, held, epoch_choices, texts)
        fold_settings = replace(settings, epochs=epochs)
        print(f"  {fold}: {epochs} epoch(s) chosen on the training folds", flush=True)
    started = time.perf_counter()
    model, loss = train_finetune(base, columns, fold_settings)
    record["train_s"] = round(time.perf_counter() - started, 1)
    with tempfile.TemporaryDirectory(prefix="finetune-cv-") as tmp:
        r2, embed_s = store(scope, write_finetuned(Path(tmp) / "model", model, {"fold": fold}), Path(tmp))
        got, got_lme = scored(r2, dataset, held_qids)
        frames = {p: got[p] for p in PRESETS}
        if got_lme:
            frames["lab_official"] = got_lme["lab"]
        if on_train:
            factor, figures, frames["lab_fusion_on_train"] = fusion_on_train(
                r2, dataset, [gold.qids[r] for r in train], held_qids)
            record["vector_factor_on_train"] = {"chosen": factor, "train_mean_recall_ndcg@10": figures}
            print(f"  {fold}: `lab`'s vector weight x{factor:g} chosen on the training folds {figures}", flush=True)
        r2.close()
    v = paired(ctx["base_scores"]["vector"].filter(pl.col("qid").is_in(held_qids)), got["vector"])
    record.update({"embed_s": round(embed_s, 1), "final_loss": loss[-1][1],
                   "vector_recall@10": [v["recall@10"]["mean_a"], v["recall@10"]["mean_b"]]})
    print(f"  {fold}: {len(columns['anchor'])} triplets, trained in {record['train_s']:.0f} s, {len(scope.memories)} "
          f"memories stored in {embed_s:.0f} s, vector recall@10 {v['recall@10']['mean_a']:.4f} -> "
          f"{v['recall@10']['mean_b']:.4f}", flush=True)
    return record, frames


def one_dataset(name: str, settings: FinetuneConfig, timed: bool, keep: Callable[[dict], None],
                on_train: bool = False, epoch_choices: tuple[int, ...] = (), results: str = "",
                done: dict | None = None) -> dict:
    """Every fold of ``name``; ``keep(out)`` after each (a long run stopped keeps what it measured);
    ``on_train``: `lab`'s vector weight also chosen on the training folds (the store then holds them);
    ``epoch_choices``: each fold's epochs chosen among them on its training folds (`epochs_on_train`);
    ``done``: this dataset's entry of an unfinished run under the same settings, whose finished folds
    (their records, and their per-question files under ``results``' name) are taken, not run again."""
    out: dict = {"load_average_at_start": os.getloadavg()[0]}
    dataset = DatasetRef(name, DATASETS).load()
    started = time.perf_counter()
    retriever, _ = store(dataset, None, None)
    gold = gold_vectors(retriever, dataset)
    ctx = {"dataset": dataset, "gold": gold, "folds": outer_folds(name, gold), "settings": settings,
           "base": base_folder(retriever.embedder.model_id), "texts": memory_texts(dataset)}
    lme = "longmemeval" in dataset.report
    base_scores, base_lme = scored(retriever, dataset, gold.qids, tuple(dict.fromkeys(PRESETS + (BASELINES if lme else ()))))
    ctx["base_scores"] = base_scores
    print(f"{name}: {len(gold.qids)} questions with gold in {len(gold.chunks)} namespace(s), base store and "
          f"scores in {time.perf_counter() - started:.0f} s", flush=True)
    finished = {f["fold"]: f for f in (done or {}).get("folds", []) if fold_file(results, name, f["fold"]).is_file()}
    if "narrowed_equals_whole" in (done or {}) and finished:
        out["narrowed_equals_whole"] = done["narrowed_equals_whole"]
    frames: dict[str, list[pl.DataFrame]] = {}
    per_fold = []
    for fold in sorted(set(ctx["folds"].tolist())):
        if fold in finished:  # measured by an earlier run under the same settings
            record, got = finished[fold], read_fold(fold_file(results, name, fold))
            print(f"  {fold}: taken from {fold_file(results, name, fold).relative_to(ROOT)}", flush=True)
        else:
            held = np.flatnonzero(ctx["folds"] == fold)
            scope = dataset
            if name in FOLDS_ARE_NAMESPACES:
                namespaces = {gold.namespaces[r] for r in held}
                if "narrowed_equals_whole" not in out:
                    out["narrowed_equals_whole"] = narrowing_holds(dataset, namespaces, (base_scores, base_lme),
                                                                   [gold.qids[r] for r in held])
                    if not out["narrowed_equals_whole"]:
                        out["load_average_at_end"] = os.getloadavg()[0]
                        return out
                if not on_train:  # the choice on the training folds needs their memories embedded too
                    scope = narrowed(dataset, namespaces)
            record, got = run_fold(ctx, fold, scope, on_train, epoch_choices)
            if results:
                write_fold(fold_file(results, name, fold), got)
        for what, frame in got.items():
            frames.setdefault(what, []).append(frame)
        per_fold.append(record)
        out["folds"] = per_fold
        keep(out)
    for p in PRESETS + (("lab_fusion_on_train",) if on_train else ()):
        out[p] = paired(base_scores["lab" if p == "lab_fusion_on_train" else p], pl.concat(frames[p]))
        for m in METRICS:
            r = out[p][m]
            print(f"  {p} {m}: {r['mean_a']:.4f} -> {r['mean_b']:.4f} ({r['delta']:+.4f}, 95% CI "
                  f"[{r['delta_low']:+.4f}, {r['delta_high']:+.4f}], p {r['p_value']:.4f}, n {r['n']})", flush=True)
    if lme:
        out["official_targets"] = against_best_baseline(base_lme, pl.concat(frames["lab_official"]))
    if timed:
        out["timed"] = timed_on_all(dataset, gold, ctx["base"], settings)
    out["load_average_at_end"] = os.getloadavg()[0]
    out["complete"] = True
    return out


def timed_on_all(dataset, gold, base: Path, settings: FinetuneConfig) -> dict:
    """The issue's time: one training on all the gold, then every memory embedded again by it."""
    started = time.perf_counter()
    model, _ = train_finetune(base, triplets(gold, dataset, np.arange(len(gold.qids)), settings.hard_negatives), settings)
    train_all_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory(prefix="finetune-cv-") as tmp:
        _, embed_all_s = store(dataset, write_finetuned(Path(tmp) / "model", model, {}), Path(tmp))
    print(f"  trained on all in {train_all_s:.0f} s, re-embedded in {embed_all_s:.0f} s", flush=True)
    return {"train_on_all_s": round(train_all_s, 1), "re_embed_s": round(embed_all_s, 1),
            "total_min": round((train_all_s + embed_all_s) / 60, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["locomo"], choices=DATASET_NAMES)
    parser.add_argument("--epochs", type=int, default=FinetuneConfig.epochs)
    parser.add_argument("--hard-negatives", type=int, default=FinetuneConfig.hard_negatives)
    parser.add_argument("--no-timed", action="store_true", help="skip LoCoMo's timed training on all of its gold")
    parser.add_argument("--fusion-on-train", action="store_true",
                        help="also choose `lab`'s vector weight on each fold's training questions (embeds every memory per fold)")
    parser.add_argument("--epochs-on-train", type=int, nargs="+", metavar="N",
                        help="choose each fold's epochs among these on its training folds (one of them validates); "
                             "--epochs is then unused")
    parser.add_argument("--resume", action="store_true",
                        help="take the folds an unfinished run under the same settings and --results finished")
    parser.add_argument("--results", default="finetune_cv",
                        help="results file name under benchmarks/results (another one for other settings)")
    args = parser.parse_args()
    settings = FinetuneConfig(epochs=args.epochs, hard_negatives=args.hard_negatives)
    if not args.results.startswith("finetune_cv") or "/" in args.results:
        parser.error(f"--results {args.results!r}: a name starting with finetune_cv, no folder")
    choices = tuple(sorted(set(args.epochs_on_train or ())))
    if any(n < 1 for n in choices):
        parser.error(f"--epochs-on-train {' '.join(map(str, args.epochs_on_train))}: every count must be at least 1")
    said = {**settings.__dict__, **({"epochs": None, "epochs_on_train": list(choices)} if choices else {}),
            **({"fusion_on_train": True} if args.fusion_on_train else {})}
    if choices and not args.no_timed:
        parser.error("--epochs-on-train chooses per fold: add --no-timed (the timed run trains with --epochs)")
    results: dict = {"settings": said, "datasets": {}}
    path = ROOT / "benchmarks" / "results" / f"{args.results}.json"
    last = json.loads(path.read_text()) if path.is_file() else {}
    unfinished = {}
    if last.get("settings") == results["settings"]:
        results["datasets"] = {k: v for k, v in last.get("datasets", {}).items()
                               if k not in args.datasets and v.get("complete")}
        unfinished = {k: v for k, v in last.get("datasets", {}).items() if not v.get("complete")}
    if args.resume and not unfinished:
        print(f"--resume: {path.relative_to(ROOT)} holds no unfinished run under these settings: starting afresh", flush=True)
    failed = False
    for name in args.datasets:

        def keep(out: dict, name: str = name) -> None:
            results["datasets"][name] = out
            report(args.results, results)

        keep(one_dataset(name, settings, timed=name == "locomo" and not args.no_timed, keep=keep,
                         on_train=args.fusion_on_train, epoch_choices=choices, results=args.results,
                         done=unfinished.get(name) if args.resume else None))
        failed |= results["datasets"][name].get("narrowed_equals_whole") is False
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
