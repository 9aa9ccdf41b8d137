"""LongMemEval's own retrieval metrics, beside lab's: recall_any@k, recall_all@k and nDCG@k at
session and turn level (k = 1, 5, 10), overall and per question type.

A run ranks memories (turns). At session level the ranking is the run's turns mapped to their
sessions, each session at the place of its best turn; the gold is ``answer_session_ids``. At turn
level the gold is the evidence turns (``has_answer``); a question without any is left out of the
turn level (and counted). recall_any@k: 1 when any gold item is in the top k; recall_all@k: 1
when every gold item is; nDCG@k: binary gains, ideal DCG over min(k, |gold|) items. Abstention
questions (``_abs``) have no gold and are not asked: the dataset's report lists them.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import polars as pl

KS = (1, 5, 10)
METRICS = ("recall_any", "recall_all", "ndcg")


def recall_any(ranked: Sequence[str], gold: set[str], k: int) -> float:
    return 1.0 if any(x in gold for x in ranked[:k]) else 0.0


def recall_all(ranked: Sequence[str], gold: set[str], k: int) -> float:
    return 1.0 if gold and gold <= set(ranked[:k]) else 0.0


def ndcg(ranked: Sequence[str], gold: set[str], k: int) -> float:
    dcg = sum(1.0 / math.log2(i + 2) for i, x in enumerate(ranked[:k]) if x in gold)
    ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, len(gold))))
    return dcg / ideal if ideal else 0.0


def session_ranking(turns: Sequence[str], session_of: dict[str, str]) -> list[str]:
    """The sessions of ranked ``turns``, each at the place of its best turn."""
    seen: dict[str, None] = {}
    for t in turns:
        s = session_of.get(t)
        if s is not None and s not in seen:
            seen[s] = None
    return list(seen)


def scores(ranked: Sequence[str], gold: set[str]) -> dict[str, float]:
    return {f"{m}@{k}": fn(ranked, gold, k) for k in KS for m, fn in
            (("recall_any", recall_any), ("recall_all", recall_all), ("ndcg", ndcg))}


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(sum(r[key] for r in rows) / len(rows), 4) for key in rows[0]} if rows else {}


def longmemeval_metrics(run: pl.DataFrame, info: dict[str, Any]) -> dict[str, Any]:
    """Session- and turn-level metrics of ``run`` (qid, memory_id, rank) with the dataset's
    LongMemEval facts (``report["longmemeval"]`` of `lab.eval.longmemeval.load_longmemeval`)."""
    session_of, types = info["sessions"], info["types"]
    ranked = {q: rows["memory_id"].to_list() for (q,), rows in run.sort("qid", "rank").group_by("qid", maintain_order=True)}
    per_session, per_turn = {}, {}
    for qid, answers in info["answer_sessions"].items():
        turns = ranked.get(qid, [])
        per_session[qid] = scores(session_ranking(turns, session_of), set(answers))
        evidence = set(info["evidence"].get(qid) or ())
        if evidence:
            per_turn[qid] = scores(turns, evidence)
    by_type: dict[str, dict[str, Any]] = {}
    for qtype in sorted({types[q] for q in per_session}):
        members = [q for q in per_session if types[q] == qtype]
        by_type[qtype] = {"questions": len(members), "session": _mean([per_session[q] for q in members]),
                          "turn": _mean([per_turn[q] for q in members if q in per_turn])}
    return {"questions": len(per_session), "session": _mean(list(per_session.values())),
            "turn_questions": len(per_turn), "turn": _mean(list(per_turn.values())), "by_type": by_type}
