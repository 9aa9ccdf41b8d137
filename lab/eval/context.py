"""Context metrics: how much gold survives assembly into a token budget, and where it lands."""
from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from lab.assemble import Item, assemble, make_counter
from lab.config import AssembleConfig, SearchConfig
from lab.eval.dataset import EvalDataset
from lab.search.candidates import reference_time, view

if TYPE_CHECKING:
    from lab.pipeline import Pipeline

CONTEXT_COLUMNS = ("context_recall", "context_gold_critical", "context_first_gold", "context_tokens")


def context_metrics(pipe: "Pipeline", dataset: EvalDataset, run: pl.DataFrame, config: SearchConfig,
                    assemble_config: AssembleConfig) -> pl.DataFrame:
    """Per question: gold recall inside the assembled context, share of the gold placed in the
    critical zone, position of the first gold item (null when none made it), tokens used."""
    counter = make_counter(assemble_config.counter,
                           getattr(pipe.embedder, "tokenizer", None) if assemble_config.counter == "exact" else None)
    gold = {q: set(ids) for q, ids in dataset.qrels.group_by("qid").agg("memory_id").iter_rows()}
    ns_of = dict(dataset.questions.select("qid", "namespace").iter_rows())
    by_q = {q: rows for (q,), rows in run.sort("qid", "rank").group_by("qid", maintain_order=True)}
    rows_out = []
    for ns in sorted(set(ns_of.values())):
        mem = pipe.store.memories(ns).select("id", "title", "content", "type", "pinned", "created_at", "metadata")
        info = {r[0]: r for r in mem.iter_rows()}
        ref = dataset.reference_time or assemble_config.reference_time or reference_time(config, view(pipe, ns))
        for qid in sorted(q for q, n in ns_of.items() if n == ns):
            ranked = by_q.get(qid)
            items = []
            if ranked is not None:
                for mid, score in ranked.select("memory_id", "score").iter_rows():
                    r = info.get(mid)
                    if r is None:
                        continue
                    text = r[2] if not r[1] else f"{r[1]}: {r[2]}"
                    items.append(Item(mid, text, float(score), r[5], r[3], bool(r[4])))
            ctx = assemble(items, assemble_config, counter=counter, reference_time=ref)
            g = gold.get(qid, set())
            placed = [i for i in ctx.items if i.memory_id in g]
            rows_out.append((
                qid, len(placed) / len(g) if g else 0.0,
                sum(1 for i in placed if i.zone == "critical") / len(g) if g else 0.0,
                min((i.position for i in placed), default=None), ctx.used,
            ))
    return pl.DataFrame(rows_out, schema={"qid": pl.String, "context_recall": pl.Float64,
                                          "context_gold_critical": pl.Float64, "context_first_gold": pl.Int64,
                                          "context_tokens": pl.Int64}, orient="row")
