"""Signal health: what each signal contributes on a dataset, from the candidate cache and a run."""
from __future__ import annotations

from typing import Any

import polars as pl

from lab.eval.dataset import EvalDataset


def list_health(cands: pl.DataFrame, dataset: EvalDataset, k: int = 10) -> dict[str, Any]:
    """Per signal: share of questions where it returned anything, and where its top ``k`` held a gold item."""
    n = dataset.questions.height
    lists = cands.filter(~pl.col("signal").str.starts_with("_"))
    gold = dataset.qrels.select("qid", "memory_id")
    per_signal: dict[str, Any] = {}
    for (signal,), rows in sorted(lists.group_by("signal"), key=lambda kv: kv[0][0]):
        answered = rows["qid"].n_unique()
        hit = rows.filter(pl.col("rank") <= k).join(gold, on=["qid", "memory_id"])["qid"].n_unique()
        per_signal[signal] = {"returned_any": round(answered / max(n, 1), 4), f"gold_in_top{k}": round(hit / max(n, 1), 4)}
    return per_signal


def signal_health(cands: pl.DataFrame, run: pl.DataFrame, dataset: EvalDataset, k: int = 10,
                  per_signal: dict[str, Any] | None = None) -> dict[str, Any]:
    """Per signal: share of questions where it returned anything, and where it ranked a gold item
    in its top ``k``. Rescue rates: share of questions where a gold item in the fused top ``k``
    came only from BM25 (not in the vector list at all), or only from the vector list. Stale rate:
    mean share of superseded memories in the fused top ``k``; with a dataset's stale lists,
    also the share of those questions where a stale memory outranks every gold one.
    ``per_signal`` is ``list_health``'s result when the caller kept it (it depends on the lists only)."""
    n = dataset.questions.height
    if n == 0:
        return {}
    lists = cands.filter(~pl.col("signal").str.starts_with("_"))
    gold = dataset.qrels.select("qid", "memory_id")
    if per_signal is None:
        per_signal = list_health(cands, dataset, k)
    top = run.filter(pl.col("rank") <= k).select("qid", "memory_id")
    found = top.join(gold, on=["qid", "memory_id"])
    in_list = lists.select("qid", "memory_id", "signal")  # one row per list entry already

    def only(a: str, b: str) -> float:
        by_a = in_list.filter(pl.col("signal") == a).select("qid", "memory_id")
        by_b = in_list.filter(pl.col("signal") == b).select("qid", "memory_id")
        rescued = found.join(by_a, on=["qid", "memory_id"]).join(by_b, on=["qid", "memory_id"], how="anti")
        return round(rescued["qid"].n_unique() / n, 4)

    out: dict[str, Any] = {"signals": per_signal}
    if {"lexical", "vector"} <= set(per_signal):
        out["lexical_rescue_rate"] = only("lexical", "vector")
        out["semantic_rescue_rate"] = only("vector", "lexical")
    superseded = cands.filter((pl.col("signal") == "_superseded") & (pl.col("score") > 0)).select("qid", "memory_id")
    stale_in_top = top.join(superseded, on=["qid", "memory_id"]).height
    out["stale_rate"] = round(stale_in_top / max(top.height, 1), 4)
    if dataset.stale.height:
        ranks = run.select("qid", "memory_id", "rank")
        best_gold = ranks.join(gold, on=["qid", "memory_id"]).group_by("qid").agg(pl.col("rank").min().alias("g"))
        best_stale = ranks.join(dataset.stale, on=["qid", "memory_id"]).group_by("qid").agg(pl.col("rank").min().alias("s"))
        qs = dataset.stale.select("qid").unique().join(best_gold, on="qid", how="left").join(best_stale, on="qid", how="left")
        wins = qs.filter(pl.col("s").is_not_null() & (pl.col("g").is_null() | (pl.col("s") < pl.col("g")))).height
        out["stale_wins"] = round(wins / qs.height, 4)
    return out


# lists that should answer every question: the text lists (vector, BM25, their views and extra
# encoders); the temporal, entity, graph, hop, recency and frequency lists answer only some by design
CORE_LISTS = ("vector", "lexical", "sparse")
MOSTLY_EMPTY = 0.5  # a core list that returned nothing for more than this share of questions
SAME_AS_ONE_LIST = 0.95  # a fused top k equal to one list's on at least this share of questions


def _core(signal: str) -> bool:
    return signal.split("@")[0] in CORE_LISTS


def list_warnings(cands: pl.DataFrame, questions: int, enabled: tuple[str, ...] = ()) -> list[str]:
    """What says a hybrid ranking cannot have fused, from the candidate lists alone: a core list
    (``enabled``: the configuration's lists) that returned nothing for most questions, and two core
    lists that never share a memory id (ids that do not match, so fusion cannot combine them)."""
    lists = cands.filter(~pl.col("signal").str.starts_with("_")).select("qid", "memory_id", "signal")
    present = sorted(lists["signal"].unique().to_list())
    out = []
    for signal in sorted({*enabled, *present}):
        if not _core(signal):
            continue
        answered = lists.filter(pl.col("signal") == signal)["qid"].n_unique()
        empty = 1 - answered / max(questions, 1)
        if empty > MOSTLY_EMPTY:
            out.append(f"list {signal} returned nothing for {empty:.0%} of {questions} questions: a ranking fused with "
                       "it is mostly the other lists alone (an index missing, an embedder that did not load?)")
    core = [s for s in present if _core(s)]
    for i, a in enumerate(core):
        for b in core[i + 1:]:
            shared = (lists.filter(pl.col("signal") == a).join(lists.filter(pl.col("signal") == b),
                                                               on=["qid", "memory_id"]).height)
            if shared == 0:
                out.append(f"lists {a} and {b} never share a memory id over {questions} questions: their ids may not "
                           "match, so fusion cannot combine them")
    return out


def fused_warnings(cands: pl.DataFrame, run: pl.DataFrame, weights: dict[str, float], k: int = 10) -> list[str]:
    """A fused top ``k`` equal to one list's top ``k`` on ``SAME_AS_ONE_LIST`` of the questions, where
    other weighted lists answered too: the fusion added nothing over that list."""
    lists = cands.filter(~pl.col("signal").str.starts_with("_") & (pl.col("rank") <= k))
    weighted = [s for s in lists["signal"].unique().to_list() if weights.get(s, 1.0) > 0]
    if len(weighted) < 2:
        return []
    fused = (run.filter(pl.col("rank") <= k).sort("qid", "rank").group_by("qid", maintain_order=True)
             .agg(pl.col("memory_id").alias("fused")))
    n = fused.height
    out = []
    for signal in sorted(weighted):
        top = (lists.filter(pl.col("signal") == signal).sort("qid", "rank").group_by("qid", maintain_order=True)
               .agg(pl.col("memory_id").alias("list")))
        same = fused.join(top, on="qid", how="inner").filter(pl.col("fused") == pl.col("list")).height
        if n and same / n >= SAME_AS_ONE_LIST:
            out.append(f"the fused top {k} equals list {signal}'s on {same / n:.0%} of {n} questions: fusion added "
                       f"nothing over it (the other lists' weights, or lists that returned nothing?)")
    return out
