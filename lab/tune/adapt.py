"""Learning a query adapter from a dataset's gold (`lab adapt`), judged fold by fold.

The adapter is a d x d map W applied to the base model's query vectors (``lab.embed.adapter``):
``linear`` learns W = I + A whole, ``lowrank`` learns W = I + U V^T of a given rank. Both are
pulled toward the identity by an L2 penalty on W - I, so an adapter trained on little gold stays
close to the base model. The loss is contrastive over the question's own namespace: the softmax of
a question's cosine to every stored chunk of its namespace (temperature ``temperature``), the gold
memories' chunks the positives, every other memory of the same conversation a hard negative.

Training reads the stored chunk vectors of the dataset's evaluation store (nothing is embedded but
the questions) and runs full-batch Adam in torch, seeded: the same gold gives the same weights.

``cross_validate_adapter`` holds each namespace (a LoCoMo conversation; else a hash group of
questions) out in turn: the adapter is trained without any question of it, and without seeing any
memory whose text is one of its questions' gold (`held_out_memories`), and scored on its questions,
exact cosine ranking of the stored vectors, against the base model's queries.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import polars as pl

from lab.config import AdaptConfig
from lab.embed.adapter import adapt_queries, write_adapter
from lab.errors import ValidationError
from lab.eval.runner import EvalOptions, score_run
from lab.search.rerank import memory_text
from lab.tune.learn import CrossValidation, fold_groups

MIN_TRAIN_QUESTIONS = 8  # questions with gold a fold trains on, at least
RUN_DEPTH = 100  # memories ranked per held-out question


@dataclass
class GoldVectors:
    """What training and held-out scoring read: each namespace's stored chunk vectors (sorted by
    owning memory id) and each gold question's base query vector."""

    base: str
    chunks: dict[str, np.ndarray] = field(default_factory=dict)  # namespace -> (chunks, dim)
    owners: dict[str, np.ndarray] = field(default_factory=dict)  # namespace -> memory id per chunk
    qids: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    queries: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    gold: list[set[str]] = field(default_factory=list)


def gold_vectors(retriever: Any, dataset: Any, progress: Callable[[str], None] | None = None) -> GoldVectors:
    """The stored vectors of every namespace holding a question with gold, and those questions'
    query vectors by the store's own model (the adapter's base)."""
    gold_of: dict[str, set[str]] = {}
    for qid, mid in dataset.qrels.filter(pl.col("relevance") > 0).select("qid", "memory_id").iter_rows():
        gold_of.setdefault(str(qid), set()).add(str(mid))
    rows = [(str(q), str(ns), text) for q, ns, text in dataset.questions.select("qid", "namespace", "question").iter_rows()
            if str(q) in gold_of]
    out = GoldVectors(retriever.embedder.model_id)
    for ns in sorted({ns for _, ns, _ in rows}):
        index = retriever.snapshot(ns).index
        labels = np.flatnonzero(index.live)
        owners = np.asarray(index.memory_of, dtype=object)[labels].astype(str)
        order = np.argsort(owners, kind="stable")  # by memory id: ties in a ranking go by id
        out.chunks[ns] = np.asarray(index.chunk_vectors(labels[order]), dtype=np.float32)
        out.owners[ns] = owners[order]
    texts = [t for _, _, t in rows]
    vectors = []
    for start in range(0, len(texts), 256):
        vectors.append(np.asarray(retriever.embedder.embed_queries(texts[start:start + 256]), dtype=np.float32))
        if progress:
            progress(f"embedded {min(start + 256, len(texts))}/{len(texts)} questions")
    out.queries = np.concatenate(vectors) if vectors else np.zeros((0, 0), dtype=np.float32)
    out.qids = [q for q, _, _ in rows]
    out.namespaces = [ns for _, ns, _ in rows]
    out.gold = [gold_of[q] for q, _, _ in rows]
    return out


def memory_texts(dataset: Any) -> dict[str, str]:
    memories = [*dataset.memories, *dataset.saves.values()]  # save-then-search memories are in the store too
    return {str(m["id"]): memory_text(m.get("title"), m["content"]) for m in memories}


def held_out_gold_texts(gold: GoldVectors, dataset: Any, rows: np.ndarray,
                        texts: dict[str, str] | None = None) -> set[str]:
    """The texts of the gold memories of the questions at ``rows`` (a held-out fold); ``texts``:
    `memory_texts(dataset)` when the caller has it already."""
    texts = memory_texts(dataset) if texts is None else texts
    return {texts[m] for r in rows for m in gold.gold[r] if m in texts}


def held_out_memories(gold: GoldVectors, dataset: Any, rows: np.ndarray) -> dict[str, set[str]]:
    """Per namespace, the stored memories whose text is the gold of a question at ``rows`` (a
    held-out fold): what a fold's adapter must not see. By text, not id: questions split by hash
    within one namespace (SciFact) share gold documents, and LongMemEval's haystacks hold the same
    sessions under other ids."""
    texts = memory_texts(dataset)
    avoid = held_out_gold_texts(gold, dataset, rows, texts)
    return {ns: hidden for ns, owners in gold.owners.items()
            if (hidden := {m for m in set(owners.tolist()) if texts.get(m) in avoid})}


def train_adapter(gold: GoldVectors, use: np.ndarray, settings: AdaptConfig,
                  progress: Callable[[int, float], None] | None = None,
                  unseen: dict[str, set[str]] | None = None) -> np.ndarray:
    """W, trained on the questions ``use`` (a boolean per gold question) marks. The memories in
    ``unseen`` (per namespace: `held_out_memories`) are neither a positive nor a negative: a
    held-out question's answer the adapter learnt to reach would flatter the held-out figures."""
    import torch  # heavy: torch loads in seconds, only to train

    picked = np.flatnonzero(use)
    if len(picked) < MIN_TRAIN_QUESTIONS:
        raise ValidationError(f"gold too small to train an adapter: {len(picked)} questions with gold, "
                              f"at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
    torch.manual_seed(settings.seed)
    gen = torch.Generator().manual_seed(settings.seed)
    dim = gold.queries.shape[1]
    eye = torch.eye(dim, dtype=torch.float32)
    groups = []  # per namespace: its questions' vectors, its chunks, the gold mask
    namespaces = np.asarray(gold.namespaces)
    for ns in sorted(set(namespaces[picked].tolist())):
        rows = picked[namespaces[picked] == ns]
        seen = ~np.isin(gold.owners[ns], list((unseen or {}).get(ns, ())))
        owners = gold.owners[ns][seen]
        mask = np.stack([np.isin(owners, list(gold.gold[r])) for r in rows])
        keep = mask.any(axis=1)  # a question whose gold is not stored here (or unseen) teaches nothing
        if keep.any():
            groups.append((torch.from_numpy(gold.queries[rows[keep]]),
                           torch.from_numpy(np.ascontiguousarray(gold.chunks[ns][seen])), torch.from_numpy(mask[keep])))
    n_questions = sum(len(g[0]) for g in groups)
    if n_questions < MIN_TRAIN_QUESTIONS:
        raise ValidationError(f"gold too small to train an adapter: {n_questions} questions whose gold memories are "
                              f"stored, at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
    if settings.kind == "linear":
        params = [torch.zeros(dim, dim, requires_grad=True)]

        def matrix() -> torch.Tensor:
            return eye + params[0]
    else:
        rank = min(settings.rank, dim)
        params = [(torch.randn(dim, rank, generator=gen) * 0.01).requires_grad_(),
                  torch.zeros(dim, rank, requires_grad=True)]

        def matrix() -> torch.Tensor:
            return eye + params[0] @ params[1].T
    optimizer = torch.optim.Adam(params, lr=settings.learning_rate)
    for step in range(settings.steps):
        optimizer.zero_grad()
        w = matrix()
        loss = torch.zeros(())
        for queries, chunks, mask in groups:
            adapted = torch.nn.functional.normalize(queries @ w.T, dim=1)
            logits = adapted @ chunks.T / settings.temperature
            positive = torch.logsumexp(logits.masked_fill(~mask, float("-inf")), dim=1)
            loss = loss + (torch.logsumexp(logits, dim=1) - positive).sum()
        loss = loss / n_questions + settings.l2 * ((w - eye) ** 2).sum()
        loss.backward()
        optimizer.step()
        if progress and (step % 20 == 0 or step == settings.steps - 1):
            progress(step, float(loss.detach()))
    return matrix().detach().numpy().astype(np.float32)


def exact_run(gold: GoldVectors, rows: np.ndarray, matrix: np.ndarray | None, depth: int = RUN_DEPTH) -> pl.DataFrame:
    """The run (qid, memory_id, rank, score) of the gold questions ``rows``: every stored memory of
    the question's namespace by its best chunk's cosine (exact), the query mapped by ``matrix``
    (None: the base model's own query), ties by memory id."""
    out = []
    namespaces = np.asarray(gold.namespaces)
    for ns in sorted(set(namespaces[rows].tolist())):
        at = rows[namespaces[rows] == ns]
        queries = gold.queries[at] if matrix is None else adapt_queries(gold.queries[at], matrix)
        owners = gold.owners[ns]
        starts = np.flatnonzero(np.concatenate([[True], owners[1:] != owners[:-1]]))
        best = np.maximum.reduceat(queries @ gold.chunks[ns].T, starts, axis=1)  # (questions, memories)
        memories = owners[starts]
        n = min(depth, len(memories))
        for r, scores in zip(at.tolist(), best):
            top = np.argsort(-scores, kind="stable")[:n]  # memories are in id order: ties by id
            out.append(pl.DataFrame({"qid": [gold.qids[r]] * n, "memory_id": memories[top].tolist(),
                                     "rank": np.arange(1, n + 1, dtype=np.int32), "score": scores[top].astype(np.float64)}))
    if not out:
        return pl.DataFrame(schema={"qid": pl.String, "memory_id": pl.String, "rank": pl.Int32, "score": pl.Float64})
    return pl.concat(out)


def cross_validate_adapter(gold: GoldVectors, dataset: Any, settings: AdaptConfig, *, folds: int = 5,
                           metrics: tuple[str, ...] = ("recall@10", "ndcg@10"), objective: str = "recall@10",
                           progress: Callable[[str], None] | None = None) -> CrossValidation:
    """Leave one fold out (``lab.tune.learn.fold_groups``: a namespace, or a hash group): the adapter
    trained on the other folds' questions, scored on the held-out ones against the base queries."""
    questions = dataset.questions.filter(pl.col("qid").is_in(gold.qids))
    groups = fold_groups(questions, folds)
    of = np.asarray([groups[q] for q in gold.qids])
    names = sorted(set(of.tolist()))
    if len(names) < 2:
        raise ValidationError(f"gold too small to split: {len(gold.qids)} questions with gold in {len(names)} fold; "
                              "a held-out judgement needs at least 2 (or --no-cv)", field="dataset")
    options = EvalOptions(ks=(10,))
    sub = dataset.questions_only(questions)
    everyone = np.arange(len(gold.qids))
    base = score_run(exact_run(gold, everyone, None), options, sub)[1]
    out = CrossValidation(metrics, objective)
    held = []
    for name in names:
        if (of != name).sum() < MIN_TRAIN_QUESTIONS:
            raise ValidationError(f"gold too small to split: holding out {name} leaves {(of != name).sum()} questions "
                                  f"to train on, at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
        rows = np.flatnonzero(of == name)
        matrix = train_adapter(gold, of != name, settings, unseen=held_out_memories(gold, dataset, rows))
        pq = score_run(exact_run(gold, rows, matrix), options, sub)[1].filter(pl.col("qid").is_in([gold.qids[r] for r in rows]))
        out.add_fold(name, base.filter(pl.col("qid").is_in(pq["qid"].to_list())), pq, progress, "vector-only ")
        held.append(pq)
    out.pool(base, pl.concat(held))
    return out


@dataclass
class Adapted:
    """What `lab adapt` made: the adapter written, its held-out judgement, and the tracking run."""

    adapter: Any  # lab.embed.adapter.AdapterFile
    judged: CrossValidation | None
    questions: int
    loss: list[tuple[int, float]]
    run_id: str | None = None


def adapt_from_gold(retriever: Any, dataset: Any, settings: AdaptConfig, out: str, *, cv: bool = True,
                    folds: int = 5, progress: Callable[[str], None] | None = None, tracking: Any = None) -> Adapted:
    """Judge (``cv``) and train a query adapter on ``dataset``'s gold over ``retriever``'s store,
    write it to ``out`` and, unless ``tracking`` is None, log the training as an MLflow run (its
    settings, loss curve, held-out figures, and the adapter folder as an artifact)."""
    gold = gold_vectors(retriever, dataset, progress)
    if len(gold.qids) < MIN_TRAIN_QUESTIONS:
        raise ValidationError(f"gold too small to train an adapter: {dataset.name} has {len(gold.qids)} questions "
                              f"with gold, at least {MIN_TRAIN_QUESTIONS} needed", field="dataset")
    judged = cross_validate_adapter(gold, dataset, settings, folds=folds, progress=progress) if cv else None
    loss: list[tuple[int, float]] = []

    def step(i: int, value: float) -> None:
        loss.append((i, value))
        if progress:
            progress(f"step {i + 1}/{settings.steps}: loss {value:.4f}")

    matrix = train_adapter(gold, np.ones(len(gold.qids), dtype=bool), settings, step)
    trained = {"dataset": dataset.name, "source": dataset.source, "gold": dataset.gold_fingerprint(),
               "questions": len(gold.qids), "namespaces": len(gold.chunks), "settings": settings.__dict__,
               "held_out": judged.to_dict()["pooled"] if judged else None}
    adapter = write_adapter(out, gold.base, matrix, settings.kind, settings.rank if settings.kind == "lowrank" else None,
                            trained)
    done = Adapted(adapter, judged, len(gold.qids), loss)
    if tracking is not None:
        done.run_id = _track(done, dataset, settings, tracking)
    return done


def _track(done: Adapted, dataset: Any, settings: AdaptConfig, tracking: Any) -> str:
    params = {f"adapt.{k}": v for k, v in settings.__dict__.items()}
    params.update({"dataset": dataset.name, "base_model": done.adapter.base, "adapter": done.adapter.model_id,
                   "questions": done.questions})
    return track_training(f"adapt {dataset.name}", params, {"dataset": dataset.name, "adapter": done.adapter.model_id},
                          done.loss, done.judged, done.adapter.path, "adapter", tracking)


def track_training(name: str, params: dict[str, Any], tags: dict[str, str], loss: list[tuple[int, float]],
                   judged: CrossValidation | None, folder: Any, artifact: str, tracking: Any) -> str:
    """One MLflow run of kind ``adapt`` for a training from gold (an adapter or a fine-tune): its
    settings, the loss per step, the held-out figures and the folder written as an artifact."""
    from lab.track.runs import log_metrics, run  # heavy: mlflow

    with run(name, "adapt", params=params, uri=tracking, tags=tags) as (_, client, run_id):
        for i, value in loss:
            log_metrics(client, run_id, {"loss": value}, step=i)
        if judged is not None:
            for row in judged.pooled:
                m = row["metric"]
                log_metrics(client, run_id, {f"held_out.base.{m}": row["mean_a"], f"held_out.adapted.{m}": row["mean_b"],
                                             f"held_out.delta.{m}": row["delta"], f"held_out.delta_low.{m}": row["delta_low"]})
        client.log_artifacts(run_id, str(folder), artifact)
    return run_id
