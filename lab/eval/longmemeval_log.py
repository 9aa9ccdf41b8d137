"""A run's ranking as LongMemEval's official retrieval log, written into its run folder.

One JSON line per question, as ``src/retrieval/run_retrieval.py`` writes them: the question's own
fields from the file, and ``retrieval_results`` with ``query``, ``ranked_items`` (the question's
whole corpus in ranked order, each ``corpus_id``, ``text``, ``timestamp``) and ``metrics``
(``session`` and ``turn``). LongMemEval's ``print_retrieval_metrics.py`` reads the scored log;
``run_generation.py`` reads either (docs/longmemeval.md). The file is streamed again question by
question, so the log never sits in memory whole.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from lab.errors import ValidationError
from lab.eval.longmemeval_corpus import corpus_items
from lab.eval.longmemeval_metrics import scored_questions
from lab.eval.longmemeval_reader import iter_questions

LOG = "longmemeval_retrievallog.jsonl"  # the scored questions: what the official print script averages
EXCLUDED_LOG = "longmemeval_retrievallog_excluded.jsonl"  # ranked, but left out by the official rule
EXCLUSIONS = "longmemeval_exclusions.json"
FIELDS = ("question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
          "haystack_sessions", "haystack_session_ids", "answer_session_ids")


def write_official_log(folder: str | Path, run: pl.DataFrame, info: dict[str, Any], source: str | Path) -> dict[str, Any]:
    """Write the logs and the exclusions list into ``folder`` for ``run`` over the LongMemEval file
    ``source`` (``info``: the dataset's ``report["longmemeval"]``); returns the exclusions."""
    folder = Path(folder)
    rankings, per_q = scored_questions(run, info)
    excluded = set(info["no_target"])
    granularity, roles = info["granularity"], info["corpus_roles"]
    written = 0
    with open(folder / LOG, "w", encoding="utf-8") as scored, open(folder / EXCLUDED_LOG, "w", encoding="utf-8") as other:
        for q in iter_questions(source):
            qid = str(q.get("question_id")) if isinstance(q, dict) else None
            if qid not in rankings:
                continue
            items = corpus_items(q, granularity, roles)
            if [i.corpus_id for i in items] != [cid for cid, _ in info["corpus"][qid]]:
                raise ValidationError(f"{source}: question {qid} differs from the file evaluated (changed since?)")
            entry = {key: q.get(key) for key in FIELDS}
            entry["retrieval_results"] = {
                "query": q["question"],
                "ranked_items": [{"corpus_id": items[i].corpus_id, "text": items[i].text,
                                  "timestamp": items[i].timestamp} for i in rankings[qid]],
                "metrics": per_q[qid]}
            (other if qid in excluded else scored).write(json.dumps(entry) + "\n")
            written += 1
    if written != len(rankings):
        raise ValidationError(f"{source}: {len(rankings) - written} evaluated question(s) are not in the file (changed since?)")
    exclusions = {
        "rule": "the official scoring leaves out abstention questions (_abs) and questions with no has_answer turn on "
                f"the corpus's side ({'the user turns' if roles == 'user' else 'any turn'})",
        "abstention": list(info["abstention"]), "no_target": list(info["no_target"]),
        "gold_warnings": info.get("gold_warnings") or {}, "scored": len(rankings) - len(excluded & set(rankings)),
        "logs": {"scored": LOG, "excluded": EXCLUDED_LOG}}
    (folder / EXCLUSIONS).write_text(json.dumps(exclusions, indent=2) + "\n", encoding="utf-8")
    return exclusions
