"""Context metrics: how much gold survives assembly into a token budget, and where it lands."""
from __future__ import annotations

from datetime import datetime
from typing import Iterator

import polars as pl

from lab.assemble import Context, Item, assemble
from lab.config import AssembleConfig, SearchConfig
from lab.eval.dataset import EvalDataset
from lab.retriever import Retriever
from lab.search.candidates import reference_time
from lab.store.records import item_text

CONTEXT_COLUMNS = ("context_recall", "context_gold_critical", "context_first_gold", "context_tokens")
CONTEXT_SCHEMA = {"qid": pl.String, "context_recall": pl.Float64, "context_gold_critical": pl.Float64,
                  "context_first_gold": pl.Int64, "context_tokens": pl.Int64}


def context_items(retriever: Retriever, dataset: EvalDataset, run: pl.DataFrame,
                  config: SearchConfig) -> Iterator[tuple[str, list[Item], datetime | str | None]]:
    """Per question (by namespace, then qid): the run's ranked results as assembly items, and the
    namespace's default reference time. Results whose memory the namespace lacks are left out."""
    ns_of = dict(dataset.questions.select("qid", "namespace").iter_rows())
    by_q = {q: rows for (q,), rows in run.sort("qid", "rank").group_by("qid", maintain_order=True)}
    for ns in sorted(set(ns_of.values())):
        nsview = retriever.view(ns)
        mem = nsview.rows.select("id", "title", "content", "type", "pinned", "created_at")
        info = {r[0]: r for r in mem.iter_rows()}
        ref = dataset.reference_times.get(ns) or reference_time(config, nsview)  # the namespace's own "now" first
        for qid in sorted(q for q, n in ns_of.items() if n == ns):
            ranked = by_q.get(qid)
            items = []
            if ranked is not None:
                for mid, score in ranked.select("memory_id", "score").iter_rows():
                    r = info.get(mid)
                    if r is None:
                        continue
                    items.append(Item(mid, item_text(r[1], r[2]), float(score), r[5], r[3], bool(r[4])))
            yield qid, items, ref


def context_reference(dataset: EvalDataset, assemble_config: AssembleConfig,
                      namespace_reference: datetime | str | None) -> datetime | str | None:
    """"Now" for assembly: the dataset's own reference time, else the config's, else the namespace's."""
    return dataset.reference_time or assemble_config.reference_time or namespace_reference


def context_row(qid: str, ctx: Context, gold: set[str]) -> tuple:
    placed = [i for i in ctx.items if i.memory_id in gold]
    return (
        qid, len(placed) / len(gold) if gold else 0.0,
        sum(1 for i in placed if i.zone == "critical") / len(gold) if gold else 0.0,
        min((i.position for i in placed), default=None), ctx.used,
    )


def gold_sets(dataset: EvalDataset) -> dict[str, set[str]]:
    return {q: set(ids) for q, ids in dataset.qrels.group_by("qid").agg("memory_id").iter_rows()}


def context_metrics(retriever: Retriever, dataset: EvalDataset, run: pl.DataFrame, config: SearchConfig,
                    assemble_config: AssembleConfig) -> pl.DataFrame:
    """Per question: gold recall inside the assembled context, share of the gold placed in the
    critical zone, position of the first gold item (null when none made it), tokens used."""
    counter = retriever.counter(assemble_config.counter)
    gold = gold_sets(dataset)
    rows_out = []
    for qid, items, ns_ref in context_items(retriever, dataset, run, config):
        ctx = assemble(items, assemble_config, counter=counter,
                       reference_time=context_reference(dataset, assemble_config, ns_ref))
        rows_out.append(context_row(qid, ctx, gold.get(qid, set())))
    return pl.DataFrame(rows_out, schema=CONTEXT_SCHEMA, orient="row")
