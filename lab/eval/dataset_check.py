"""`lab datasets check FILE`: any dataset file lab reads (a LoCoMo or LongMemEval .json, a
conversations .jsonl, a golden .yaml, a BEIR folder), loaded with every check its loader makes, and
then what it holds, what the loader repaired or dropped, and what is wrong with its gold: as
`lab goldens check` does for goldens, for every format."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl

from lab.eval.conversations import is_conversations
from lab.eval.dataset import EvalDataset
from lab.eval.longmemeval import is_gzip, is_longmemeval


def dataset_format(path: Path) -> str:
    """The format a path is read as (what `lab.eval.goldens.load_dataset` dispatches on)."""
    if path.is_dir():
        return "tables" if (path / "questions.parquet").is_file() else "BEIR folder"
    if is_gzip(path) or (path.suffix == ".json" and is_longmemeval(path)):
        return "LongMemEval"
    if path.suffix in (".yaml", ".yml"):
        return "golden"
    if is_conversations(path) or path.suffix == ".jsonl":
        return "conversations JSONL"
    return "LoCoMo"


def _loader_notes(report: dict[str, Any]) -> list[str]:
    """What the loader changed or left out, in lines a person reads."""
    notes = []
    if report.get("evidence_repaired"):
        notes.append(f"{len(report['evidence_repaired'])} evidence id(s) repaired, e.g. "
                     f"{report['evidence_repaired'][0]['qid']}: {report['evidence_repaired'][0]['evidence']!r} -> "
                     f"{report['evidence_repaired'][0]['as']}")
    for d in report.get("dropped") or []:
        if d["reason"] == "question without usable evidence":
            notes.append(f"question {d['qid']} dropped: no usable evidence ({d['evidence']!r})")
        else:
            notes.append(f"{d['qid']}: {d['reason']} (left out of its gold)")
    lme = report.get("longmemeval") or {}
    for qid, problems in (lme.get("gold_warnings") or {}).items():
        notes.append(f"gold disagrees with the haystack in {qid}: {'; '.join(problems)}")
    if report.get("queries_without_qrels"):
        notes.append(f"{report['queries_without_qrels']} quer(ies) without a usable relevance judgement, not asked")
    if report.get("qrels_unknown_query"):
        notes.append(f"{report['qrels_unknown_query']} relevance judgement(s) of no query in queries.jsonl, left out")
    return notes


def stray_gold(dataset: EvalDataset) -> pl.DataFrame:
    """Gold rows whose memory is not one of the question's namespace: such a question can never be
    answered, and its recall is 0 whatever the system does."""
    stored = [*dataset.memories, *dataset.saves.values()]  # a save-then-search memory is saved before its question
    where = pl.DataFrame({"memory_id": [str(m["id"]) for m in stored],
                          "home": [str(m.get("namespace")) for m in stored]}).unique("memory_id")
    gold = dataset.qrels.filter(pl.col("relevance") > 0).join(dataset.questions.select("qid", "namespace"), on="qid")
    return (gold.join(where, on="memory_id", how="left")
            .filter(pl.col("home").is_null() | (pl.col("home") != pl.col("namespace")))
            .select("qid", "memory_id", "namespace", "home"))


def describe_dataset(dataset: EvalDataset, given: str) -> dict[str, Any]:
    """What ``dataset`` (``given`` by its path or name) holds, and its problems (an empty list: none)."""
    path = Path(dataset.source or given)
    per_question = dataset.qrels.filter(pl.col("relevance") > 0).group_by("qid").len()
    stray = stray_gold(dataset)
    problems = [f"gold {r['memory_id']} of {r['qid']} is " + ("no memory of the dataset" if r["home"] is None else
                f"a memory of namespace {r['home']!r}, not the question's {r['namespace']!r}")
                for r in stray.head(20).iter_rows(named=True)]
    if stray.height > 20:
        problems.append(f"... {stray.height - 20} more gold id(s) outside their question's namespace")
    if dataset.report.get("qrels_unknown_document"):  # BEIR: judged relevant, yet not in the corpus
        problems.append(f"{dataset.report['qrels_unknown_document']} relevance judgement(s) name no document of "
                        "corpus.jsonl (the loader leaves them out, so their queries lose that gold)")
    unasked = dataset.questions.join(per_question, on="qid", how="anti").height
    if unasked:
        problems.append(f"{unasked} question(s) without gold: scored 0 whatever the system returns")
    return {
        "file": given, "read": str(path), "format": dataset_format(path), "name": dataset.name,
        "memories": len(dataset.memories), "edges": len(dataset.edges),
        "namespaces": dataset.questions["namespace"].n_unique(),
        "memory_namespaces": len({str(m.get("namespace")) for m in dataset.memories}),
        "questions": dataset.questions.height, "unanswerable": dataset.unanswerable.height,
        "by_category": dict(sorted(dataset.questions.group_by("category").len().iter_rows())),
        "gold_per_question": {"min": int(per_question["len"].min() or 0), "max": int(per_question["len"].max() or 0),
                              "mean": round(float(per_question["len"].mean() or 0), 2)},
        "reference_time": dataset.reference_time, "reference_times": len(dataset.reference_times),
        "loader": _loader_notes(dataset.report), "problems": problems,
    }
