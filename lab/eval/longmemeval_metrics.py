"""LongMemEval's own retrieval metrics, defined as its official retrieval code defines them, beside lab's.

Per question, the ranking is the whole corpus (lab's ranked items first, then every item it did not
rank, in corpus order) as official corpus ids (`lab.eval.longmemeval_corpus`); the gold is every
corpus id containing ``answer``. At k in 1, 3, 5, 10, 30, 50:

- ``recall_any@k``: 1 when any gold id is in the top k; ``recall_all@k``: 1 when every one is (so 1
  for a question with no gold in the corpus, as the official code has it);
- ``ndcg_any@k``: DCG with the gains of the top k, the first at full weight and the one at place
  i (from 0) divided by log2(i + 1), over the ideal DCG of the corpus's own gains sorted, so every
  gold item of the corpus counts in the ideal;
- at turn granularity the session figures come from the same turn ranking: each id cut to its
  session (its last ``_<n>`` dropped, so a ``noans`` turn is a session of its own), and k widened
  until the top k holds k distinct sessions (or the corpus ends); nDCG then counts every gold turn.

The official population: abstention questions (``_abs``) are not scored, nor questions with no
``has_answer`` turn on the corpus's side (the user's, officially); both are counted and listed.
"""
from __future__ import annotations

from typing import Any, Sequence

import polars as pl

KS = (1, 3, 5, 10, 30, 50)
HEADLINE = {"session": ("recall_all@5", "ndcg_any@5", "recall_all@10", "ndcg_any@10"),
            "turn": ("recall_all@5", "ndcg_any@5", "recall_all@10", "ndcg_any@10", "recall_all@50", "ndcg_any@50")}


def dcg(gains: Sequence[float], k: int) -> float:
    import numpy as np  # the same float arithmetic as the official code's, so means agree to the last place

    top = np.asarray(list(gains)[:k], dtype=float)
    return float(top[0] + np.sum(top[1:] / np.log2(np.arange(2, top.size + 1)))) if top.size else 0.0


def ndcg_any(ranked: Sequence[str], gold: set[str], corpus: Sequence[str], k: int) -> float:
    ideal = dcg(sorted((1.0 if c in gold else 0.0 for c in corpus), reverse=True), k)
    return dcg([1.0 if c in gold else 0.0 for c in ranked], k) / ideal if ideal else 0.0


def at_k(ranked: Sequence[str], gold: set[str], corpus: Sequence[str], k: int) -> tuple[float, float, float]:
    """(recall_any@k, recall_all@k, ndcg_any@k) of ``ranked`` ids against ``gold``."""
    top = set(ranked[:k])
    return (float(any(g in top for g in gold)), float(all(g in top for g in gold)), ndcg_any(ranked, gold, corpus, k))


def session_of(corpus_id: str) -> str:
    return "_".join(corpus_id.split("_")[:-1])


def widened_k(sessions: Sequence[str], k: int) -> int:
    """The smallest k' >= k whose top k' holds k distinct sessions (past the corpus's end, when it never does)."""
    n = k
    while n <= len(sessions) and len(set(sessions[:n])) < k:
        n += 1
    return n


def question_metrics(ranked: Sequence[str], corpus: Sequence[str], granularity: str) -> dict[str, dict[str, float]]:
    """``{"session": {...}, "turn": {...}}`` for one question, as the official log's ``metrics``."""
    gold = {c for c in corpus if "answer" in c}
    out: dict[str, dict[str, float]] = {"session": {}, "turn": {}}
    if granularity == "turn":
        s_ranked, s_corpus = [session_of(c) for c in ranked], [session_of(c) for c in corpus]
        s_gold = {session_of(c) for c in gold}
    for k in KS:
        out[granularity].update(zip((f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}"),
                                    at_k(ranked, gold, corpus, k)))
        if granularity == "turn":
            out["session"].update(zip((f"recall_any@{k}", f"recall_all@{k}", f"ndcg_any@{k}"),
                                      at_k(s_ranked, s_gold, s_corpus, widened_k(s_ranked, k))))
    return out


def full_rankings(run: pl.DataFrame, info: dict[str, Any]) -> dict[str, list[int]]:
    """Each question's whole corpus as positions into its corpus list: the items ``run`` ranked, in
    its order (a memory standing for several items of one text: all of them there, in corpus
    order), then the rest in corpus order (what a run returns is rarely the whole corpus)."""
    ranked = {q: rows["memory_id"].to_list() for (q,), rows in run.sort("qid", "rank").group_by("qid", maintain_order=True)}
    out = {}
    for qid, items in info["corpus"].items():
        where: dict[str, list[int]] = {}
        for i, (_, mid) in enumerate(items):
            if mid is not None:
                where.setdefault(mid, []).append(i)
        first = list(dict.fromkeys(i for m in ranked.get(qid, ()) for i in where.get(m, ())))
        seen = set(first)
        out[qid] = first + [i for i in range(len(items)) if i not in seen]
    return out


def _mean(values: list[float]) -> float:
    import numpy as np

    return float(np.mean(values))


def scored_questions(run: pl.DataFrame, info: dict[str, Any]) -> tuple[dict[str, list[int]], dict[str, Any]]:
    """(every question's whole ranking as corpus positions, the official metrics of each question,
    the excluded ones too: the log holds them)."""
    rankings = full_rankings(run, info)
    per_q = {}
    for qid, order in rankings.items():
        ids = [cid for cid, _ in info["corpus"][qid]]
        per_q[qid] = question_metrics([ids[i] for i in order], ids, info["granularity"])
    return rankings, per_q


def longmemeval_metrics(run: pl.DataFrame, info: dict[str, Any]) -> dict[str, Any]:
    """The official figures of ``run`` (qid, memory_id, rank) with the dataset's LongMemEval facts
    (``report["longmemeval"]`` of `lab.eval.longmemeval.load_longmemeval`): means over the scored
    questions under ``session`` and ``turn``, the headline, per question type, and the exclusions."""
    granularity, types = info["granularity"], info["types"]
    excluded = set(info["no_target"])
    rankings, every = scored_questions(run, info)
    per_q = {q: m for q, m in every.items() if q not in excluded}

    def means(qids: list[str]) -> dict[str, dict[str, float]]:
        return {level: {name: _mean([per_q[q][level][name] for q in qids]) for name in per_q[qids[0]][level]}
                for level in ("session", "turn")} if qids else {"session": {}, "turn": {}}

    overall = means(list(per_q))
    by_type = {}
    for qtype in sorted({types[q] for q in per_q}):
        members = [q for q in per_q if types[q] == qtype]
        by_type[qtype] = {"questions": len(members), **means(members)}
    headline = {level: {name: overall[level][name] for name in names if name in overall[level]}
                for level, names in HEADLINE.items()}
    return {"protocol": {"granularity": granularity, "corpus": info["corpus_roles"], "ks": list(KS)},
            "questions": len(per_q), **overall, "headline": headline, "by_type": by_type,
            "excluded": {"abstention": len(info["abstention"]), "no_target": len(excluded & set(rankings)),
                         "gold_warnings": len(info.get("gold_warnings") or {})},
            "excluded_ids": {"abstention": sorted(info["abstention"]),
                             "no_target": sorted(excluded & set(rankings))}}


def headline_lines(lme: dict[str, Any]) -> list[str]:
    """The official headline table as LongMemEval's print script words it (means rounded to 4 places)."""
    lines = [f"LongMemEval official ({lme['protocol']['granularity']} granularity, {lme['protocol']['corpus']} "
             f"corpus): {lme['questions']} questions scored; excluded {lme['excluded']['abstention']} abstention, "
             f"{lme['excluded']['no_target']} with no target turn"]
    for level, title in (("session", "Session-level metrics:"), ("turn", "Turn-level metrics:")):
        figures = lme["headline"].get(level) or {}
        if figures:
            lines.append(f"{title} " + ", ".join(f"{name} = {round(v, 4)}" for name, v in figures.items()))
    return lines


def report_lines(lme: dict[str, Any]) -> list[str]:
    """The run report's LongMemEval section: the official headline, then per question type."""
    lines = ["", "## LongMemEval (official retrieval protocol)", "", *headline_lines(lme), "",
             "The ranking as LongMemEval's own retrieval log: `longmemeval_retrievallog.jsonl` (scored questions), "
             "`longmemeval_retrievallog_excluded.jsonl`; the exclusions: `longmemeval_exclusions.json`.", "",
             "| level | " + " | ".join(HEADLINE["turn"]) + " |", "|---|" + "---|" * len(HEADLINE["turn"])]
    for level in ("session", "turn"):
        if lme["headline"].get(level):
            lines.append(f"| {level} | " + " | ".join(f"{lme[level][n]:.4f}" if n in HEADLINE[level] else "" for n in
                                                      HEADLINE["turn"]) + " |")
    ids = lme.get("excluded_ids") or {}
    if ids.get("abstention") or ids.get("no_target"):  # which questions the official means leave out
        lines += ["", "Left out of the means, as the official scoring does: "
                  f"abstention (`_abs`) {', '.join(ids.get('abstention') or []) or 'none'}; "
                  f"no target turn {', '.join(ids.get('no_target') or []) or 'none'}."]
    level = lme["protocol"]["granularity"]
    names = HEADLINE["session"]
    lines += ["", f"By question type ({level} level):", "", "| type | n | " + " | ".join(names) + " |",
              "|---|---|" + "---|" * len(names)]
    for qtype, row in lme["by_type"].items():
        lines.append(f"| {qtype} | {row['questions']} | " + " | ".join(f"{row[level][n]:.4f}" for n in names) + " |")
    return lines
