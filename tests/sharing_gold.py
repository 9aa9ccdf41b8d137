"""Gold shared across folds: what the held-out judgements of `lab adapt` must not train on."""
from __future__ import annotations


def sharing_gold(copies: bool = False):
    """One namespace of 12 memories and 24 questions (split by hash, as a one-namespace dataset is),
    each memory the gold of two questions: most folds hold a question whose gold another fold trains on.

    ``copies``: a second namespace ``copy`` holds the same 12 texts under other ids (as LongMemEval's
    haystacks hold the same sessions), with 8 questions whose gold are c00..c07; the folds are then
    the two namespaces."""
    import numpy as np
    import polars as pl

    from lab.eval.dataset import EvalDataset
    from lab.tune.adapt import GoldVectors

    rng = np.random.default_rng(0)

    def unit(n):
        v = rng.standard_normal((n, 8)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    ids = [f"m{i:02d}" for i in range(12)]
    qids = [f"q{i:02d}" for i in range(24)]
    namespaces, golds = ["ns"] * 24, [ids[i // 2] for i in range(24)]
    memories = [{"id": m, "namespace": "ns", "content": f"what memory {m} says"} for m in ids]
    gold = GoldVectors("fake", chunks={"ns": unit(12)}, owners={"ns": np.asarray(ids)}, qids=list(qids),
                       namespaces=list(namespaces), queries=unit(24), gold=[{g} for g in golds])
    if copies:
        copy_ids = [f"c{i:02d}" for i in range(12)]
        memories += [{"id": c, "namespace": "copy", "content": f"what memory {m} says"} for c, m in zip(copy_ids, ids)]
        gold.chunks["copy"], gold.owners["copy"] = gold.chunks["ns"].copy(), np.asarray(copy_ids)
        extra = [f"k{i:02d}" for i in range(8)]
        gold.qids += extra
        gold.namespaces += ["copy"] * 8
        gold.gold += [{copy_ids[i]} for i in range(8)]
        gold.queries = np.concatenate([gold.queries, unit(8)])
        qids, namespaces, golds = qids + extra, namespaces + ["copy"] * 8, golds + copy_ids[:8]
    dataset = EvalDataset(
        "sharing", memories,
        pl.DataFrame({"qid": qids, "namespace": namespaces, "question": [f"asking {q}" for q in qids],
                      "category": ["single"] * len(qids)}),
        pl.DataFrame({"qid": qids, "memory_id": golds, "relevance": [1] * len(qids)}))
    return gold, dataset
