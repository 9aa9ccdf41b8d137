"""Datasets out in standard IR formats (`lab datasets export`), so MTEB, ranx, pyserini or
trec_eval can read what lab evaluates:

- ``beir``: ``corpus.jsonl`` (``_id``, ``title``, ``text``), ``queries.jsonl`` (``_id``, ``text``)
  and ``qrels/test.tsv`` (``query-id``, ``corpus-id``, ``score``, with its header line). Each
  record's ``metadata`` keeps what BEIR has no field for (a memory's namespace, type, time and lab
  metadata; a question's namespace and category), so lab reads the folder back as it was.
- ``trec``: ``qrels.trec`` (``qid 0 docid relevance``, the file a run folder holds beside
  ``run.trec``), ``topics.tsv`` (``qid``, question) and ``corpus.jsonl`` in pyserini's JSON
  collection form (``id``, ``contents``, and the namespace).

A memory benchmark searches each question's own namespace (a conversation, a haystack). A tool
that ranks the whole corpus for every query measures another task: filter by the namespace the
metadata gives to reproduce lab's figures.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from lab.errors import ValidationError
from lab.eval.dataset import EvalDataset
from lab.eval.report import write_trec_qrels

FORMATS = ("beir", "trec")


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")


def _gold(dataset: EvalDataset) -> pl.DataFrame:
    return dataset.qrels.filter(pl.col("relevance") > 0).sort("qid", "memory_id")


def export_dataset(dataset: EvalDataset, out: str | Path, fmt: str) -> dict[str, Any]:
    """Write ``dataset`` into the folder ``out`` in ``fmt`` (``beir`` or ``trec``); returns what was
    written (files and counts). An ``out`` holding other files is refused, naming them."""
    if fmt not in FORMATS:
        raise ValidationError(f"--format {fmt!r}: known formats are {', '.join(FORMATS)}", field="format")
    out = Path(out)
    ours = {"corpus.jsonl", "queries.jsonl", "qrels", "qrels.trec", "topics.tsv"}
    if out.exists() and (not out.is_dir() or sorted(p.name for p in out.iterdir() if p.name not in ours)):
        raise ValidationError(f"--out {out} exists and holds other files: export into a new or empty folder",
                              field="out")
    out.mkdir(parents=True, exist_ok=True)
    memories = [*dataset.memories, *dataset.saves.values()]  # save-then-search memories are documents too
    gold = _gold(dataset)
    questions = dataset.questions.sort("qid")
    if fmt == "beir":
        _jsonl(out / "corpus.jsonl", [
            {"_id": m["id"], "title": m.get("title") or "", "text": m["content"],
             "metadata": {"namespace": m["namespace"], "type": m.get("type"), "source": m.get("source"),
                          "created_at": m.get("created_at"), **({"lab": m["metadata"]} if m.get("metadata") else {})}}
            for m in memories])
        _jsonl(out / "queries.jsonl", [
            {"_id": q, "text": text, "metadata": {"namespace": ns, "category": cat}}
            for q, ns, text, cat in questions.select("qid", "namespace", "question", "category").iter_rows()])
        (out / "qrels").mkdir(exist_ok=True)
        with (out / "qrels" / "test.tsv").open("w", encoding="utf-8") as fh:
            fh.write("query-id\tcorpus-id\tscore\n")
            for q, m, rel in gold.select("qid", "memory_id", "relevance").iter_rows():
                fh.write(f"{q}\t{m}\t{rel}\n")
        files = ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"]
    else:
        write_trec_qrels(gold, out / "qrels.trec")
        with (out / "topics.tsv").open("w", encoding="utf-8") as fh:
            for q, text in questions.select("qid", "question").iter_rows():
                fh.write(f"{q}\t{' '.join(str(text).split())}\n")  # one line per topic: no tab or newline inside
        _jsonl(out / "corpus.jsonl", [{"id": m["id"], "contents": m["content"], "namespace": m["namespace"]}
                                      for m in memories])
        files = ["qrels.trec", "topics.tsv", "corpus.jsonl"]
    return {"dataset": dataset.name, "format": fmt, "out": str(out), "files": files, "documents": len(memories),
            "queries": questions.height, "qrels": gold.height,
            "namespaces": len({m["namespace"] for m in memories})}
