"""Fine-tuning the store's model on gold (`lab adapt --kind finetune`): the other way to learn from
it besides a query adapter. Every memory must then be embedded again by the model written.

- **Triplets.** Per question with gold and per gold memory: the question, the memory's text, and
  ``hard_negatives`` of the base model's best-ranked memories of the same namespace that are not
  gold (in-namespace hard negatives; the other triplets of a batch are in-batch negatives).
- **Training.** sentence-transformers' trainer with MultipleNegativesRankingLoss, batches without
  duplicate texts (a duplicate would be a false in-batch negative), seeded, on the CPU.
- **Judged held out** (``cross_validate_finetune``): each fold (a namespace, or a hash group where
  there is one) is held out in turn; a model trained without its questions, and without their
  gold memories' texts as positives, ranks the fold's memories, embedded plainly by it and by the
  base model, exactly by cosine; the two are paired over every held-out question, as `lab adapt`'s
  adapter judgement is.
- **Written** as a sentence-transformers folder (``st:PATH``, which lab's registry loads, its id
  carrying the weights' fingerprint) with ``lab-finetune.json`` (base model, settings, what it was
  trained on, the held-out figures), into a temporary folder renamed into place.
"""
from __future__ import annotations

import contextlib
import io
import json
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import polars as pl

from lab.config import DEFAULT_MODEL, FinetuneConfig
from lab.embed.adapter import move_into_place
from lab.embed.base import MissingExtra
from lab.embed.local import FINETUNE_META, local_model_id, looks_local
from lab.embed.st import model_dir
from lab.errors import ValidationError
from lab.eval.runner import EvalOptions, score_run
from lab.tune.adapt import (MIN_TRAIN_QUESTIONS, GoldVectors, exact_run, gold_vectors, held_out_gold_texts,
                            memory_texts, track_training)
from lab.tune.learn import CrossValidation, fold_groups
from lab.workspace import set_library_env

META = FINETUNE_META  # the gate reads it too (lab.gate.checks.finetune_record)
RUN_DEPTH = 100


def base_folder(model_id: str) -> Path:
    """The sentence-transformers folder of the store's model: the bundled MiniLM, or a local
    ``st:`` folder; any other model (an ONNX export, a server model) cannot be fine-tuned here."""
    if model_id == DEFAULT_MODEL:
        return model_dir()
    if looks_local(model_id) and local_model_id(model_id).startswith("st:"):
        return Path(local_model_id(model_id)[3:].rsplit("#", 1)[0])
    raise ValidationError(f"fine-tuning needs a sentence-transformers model; the store's model is {model_id!r}: "
                          f"build the evaluation store with {DEFAULT_MODEL} or an st:PATH folder", field="model")


def triplets(gold: GoldVectors, dataset: Any, rows: np.ndarray, hard_negatives: int,
             avoid: set[str] | frozenset[str] = frozenset()) -> dict[str, list[str]]:
    """The training columns (anchor, positive, negative_1..n) of the questions at ``rows``; a gold
    memory whose text is in ``avoid`` (a held-out fold's gold: `held_out_gold_texts`) is no positive.
    Fine-tuning moves the memories' vectors too, so a held-out question's answer trained on as
    another question's positive would flatter the held-out figures: questions split by hash within
    one namespace (SciFact) share gold documents, and LongMemEval's haystacks share sessions."""
    texts = memory_texts(dataset)
    asked = dict(dataset.questions.select("qid", "question").iter_rows())
    ranked = exact_run(gold, rows, None, depth=hard_negatives + max((len(gold.gold[r]) for r in rows), default=0))
    by_qid = {q: ids for q, ids in ranked.sort("qid", "rank").group_by("qid", maintain_order=True)
              .agg(pl.col("memory_id")).iter_rows()}
    columns: dict[str, list[str]] = {"anchor": [], "positive": [],
                                     **{f"negative_{i + 1}": [] for i in range(hard_negatives)}}
    for r in rows:
        qid = gold.qids[r]
        negatives = [m for m in by_qid.get(qid, []) if m not in gold.gold[r] and m in texts][:hard_negatives]
        if len(negatives) < hard_negatives:
            continue  # a namespace too small for its hard negatives
        for positive in sorted(gold.gold[r]):
            if positive not in texts or texts[positive] in avoid:
                continue
            columns["anchor"].append(str(asked[qid]))
            columns["positive"].append(texts[positive])
            for i, m in enumerate(negatives):
                columns[f"negative_{i + 1}"].append(texts[m])
    return columns


def train_finetune(base: Path, columns: dict[str, list[str]], settings: FinetuneConfig,
                   progress: Callable[[int, float], None] | None = None) -> tuple[Any, list[tuple[int, float]]]:
    """The base model trained on ``columns``; returns (model, [(step, loss)])."""
    try:
        import accelerate  # noqa: F401  (the trainer needs it)
    except ImportError:
        raise MissingExtra("fine-tuning needs the finetune extra: pip install -e '.[finetune]'") from None
    set_library_env({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_DISABLED": "true"})
    from datasets import Dataset
    from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer, SentenceTransformerTrainingArguments
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss
    from sentence_transformers.sentence_transformer.training_args import BatchSamplers
    from transformers import PrinterCallback, TrainerCallback

    if not columns["anchor"]:
        raise ValidationError("no training triplets: no question's gold memory has text", field="dataset")
    model = SentenceTransformer(str(base), device="cpu", local_files_only=True)
    losses: list[tuple[int, float]] = []

    class Logged(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append((int(state.global_step), float(logs["loss"])))
                if progress:
                    progress(int(state.global_step), float(logs["loss"]))

    with tempfile.TemporaryDirectory(prefix="lab-finetune-") as scratch:
        args = SentenceTransformerTrainingArguments(
            output_dir=scratch, num_train_epochs=settings.epochs, max_steps=settings.max_steps or -1,
            per_device_train_batch_size=settings.batch_size, learning_rate=settings.learning_rate,
            warmup_steps=settings.warmup_ratio, seed=settings.seed, data_seed=settings.seed, report_to="none",
            save_strategy="no", logging_steps=1, batch_sampler=BatchSamplers.NO_DUPLICATES, use_cpu=True,
            disable_tqdm=True, dataloader_num_workers=0)
        with contextlib.redirect_stderr(io.StringIO()):  # its model card's "widget examples" progress bar
            trainer = SentenceTransformerTrainer(model=model, args=args, train_dataset=Dataset.from_dict(columns),
                                                 loss=MultipleNegativesRankingLoss(model), callbacks=[Logged()])
        trainer.remove_callback(PrinterCallback)  # lab says the loss itself (progress), in its own lines
        trainer.train()
    return model, losses


def plain_run(model: Any, gold: GoldVectors, dataset: Any, rows: np.ndarray) -> pl.DataFrame:
    """The questions at ``rows`` ranked against their namespace's memories, each embedded plainly
    by ``model`` (a SentenceTransformer), exactly by cosine (ties by memory id)."""
    texts = memory_texts(dataset)
    asked = dict(dataset.questions.select("qid", "question").iter_rows())
    out = []
    for ns in sorted({gold.namespaces[r] for r in rows}):
        ids = sorted(m for m in set(gold.owners[ns].tolist()) if m in texts)
        memories = model.encode([texts[m] for m in ids], batch_size=64, normalize_embeddings=True)
        mine = [r for r in rows if gold.namespaces[r] == ns]
        queries = model.encode([str(asked[gold.qids[r]]) for r in mine], batch_size=64, normalize_embeddings=True)
        scores = np.asarray(queries) @ np.asarray(memories).T
        for qi, r in enumerate(mine):
            order = np.lexsort((np.arange(len(ids)), -scores[qi]))[:RUN_DEPTH]
            out.append(pl.DataFrame({"qid": [gold.qids[r]] * len(order), "memory_id": [ids[i] for i in order],
                                     "rank": np.arange(1, len(order) + 1, dtype=np.int32),
                                     "score": scores[qi, order].astype(np.float64)}))
    return pl.concat(out) if out else pl.DataFrame(schema={"qid": pl.String, "memory_id": pl.String,
                                                           "rank": pl.Int32, "score": pl.Float64})


def cross_validate_finetune(gold: GoldVectors, dataset: Any, base: Path, settings: FinetuneConfig, *, folds: int = 5,
                            progress: Callable[[str], None] | None = None) -> CrossValidation:
    """Leave one fold out: a model trained on the other folds' questions against the base model on
    the held-out questions, both ranking the plain memory texts of the held-out namespaces."""
    from sentence_transformers import SentenceTransformer

    questions = dataset.questions.filter(pl.col("qid").is_in(gold.qids))
    groups = fold_groups(questions, folds)
    of = np.asarray([groups[q] for q in gold.qids])
    names = sorted(set(of.tolist()))
    if len(names) < 2:
        raise ValidationError(f"gold too small to split: {len(gold.qids)} questions with gold in {len(names)} fold; "
                              "a held-out judgement needs at least 2 (or --no-cv)", field="dataset")
    options, sub = EvalOptions(ks=(10,)), dataset.questions_only(questions)
    base_model = SentenceTransformer(str(base), device="cpu", local_files_only=True)
    out, held, based = CrossValidation(("recall@10", "ndcg@10"), "recall@10"), [], []
    for name in names:
        train, rows = np.flatnonzero(of != name), np.flatnonzero(of == name)
        if len(train) < MIN_TRAIN_QUESTIONS:
            raise ValidationError(f"gold too small to split: holding out {name} leaves {len(train)} questions "
                                  f"to train on, at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
        avoid = held_out_gold_texts(gold, dataset, rows)
        model, _ = train_finetune(base, triplets(gold, dataset, train, settings.hard_negatives, avoid), settings)
        pq = score_run(plain_run(model, gold, dataset, rows), options, sub)[1]
        bq = score_run(plain_run(base_model, gold, dataset, rows), options, sub)[1]
        kept = [gold.qids[r] for r in rows]
        pq, bq = pq.filter(pl.col("qid").is_in(kept)), bq.filter(pl.col("qid").is_in(kept))
        out.add_fold(name, bq, pq, progress, "vector-only (plain texts) ")
        held.append(pq)
        based.append(bq)
    out.pool(pl.concat(based), pl.concat(held))
    return out


def write_finetuned(out: str | Path, model: Any, meta: dict[str, Any]) -> str:
    """Write the model folder ``out`` whole (a temporary folder beside it, renamed into place);
    returns its registry id (``st:/abs/path#fingerprint``)."""
    out = Path(out).expanduser().resolve()
    if out.exists() and not (out / META).is_file():
        raise ValidationError(f"--out {out} exists and is not a fine-tuned model folder: choose a new path", field="out")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.writing-", dir=out.parent))
    try:
        model.save(str(tmp))
        (tmp / META).write_text(json.dumps(meta, indent=2, sort_keys=True, default=str), encoding="utf-8")
        move_into_place(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return local_model_id(f"st:{out}")


@dataclass
class Finetuned:
    """What `lab adapt --kind finetune` made: the model written, its held-out judgement, the run."""

    model_id: str
    base: str
    judged: CrossValidation | None
    questions: int
    triplets: int
    loss: list[tuple[int, float]]
    train_s: float
    run_id: str | None = None


def finetune_from_gold(retriever: Any, dataset: Any, settings: FinetuneConfig, out: str, *, cv: bool = True,
                       folds: int = 5, progress: Callable[[str], None] | None = None,
                       tracking: Any = None) -> Finetuned:
    """Judge (``cv``) and fine-tune the store's model on ``dataset``'s gold, write it to ``out``
    and, unless ``tracking`` is None, log the training as an MLflow run of kind ``adapt``."""
    base = base_folder(retriever.embedder.model_id)
    gold = gold_vectors(retriever, dataset, progress)
    if len(gold.qids) < MIN_TRAIN_QUESTIONS:
        raise ValidationError(f"gold too small to fine-tune on: {dataset.name} has {len(gold.qids)} questions "
                              f"with gold, at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
    judged = cross_validate_finetune(gold, dataset, base, settings, folds=folds, progress=progress) if cv else None
    columns = triplets(gold, dataset, np.arange(len(gold.qids)), settings.hard_negatives)

    def step(i: int, value: float) -> None:
        if progress:
            progress(f"step {i}: loss {value:.4f}")

    started = time.perf_counter()
    model, loss = train_finetune(base, columns, settings, step)
    took = time.perf_counter() - started
    meta = {"format": 1, "base": gold.base, "kind": "finetune", "settings": settings.__dict__,
            "trained": {"dataset": dataset.name, "source": dataset.source, "gold": dataset.gold_fingerprint(),
                        "questions": len(gold.qids), "triplets": len(columns["anchor"]),
                        "held_out": judged.to_dict()["pooled"] if judged else None}}
    model_id = write_finetuned(out, model, meta)
    done = Finetuned(model_id, gold.base, judged, len(gold.qids), len(columns["anchor"]), loss, round(took, 1))
    if tracking is not None:
        params = {**{f"finetune.{k}": v for k, v in settings.__dict__.items()}, "dataset": dataset.name,
                  "base_model": gold.base, "model": model_id, "questions": len(gold.qids),
                  "triplets": len(columns["anchor"])}
        done.run_id = track_training(f"finetune {dataset.name}", params, {"dataset": dataset.name, "model": model_id},
                                     loss, judged, Path(out).expanduser().resolve(), "model", tracking)
    return done
