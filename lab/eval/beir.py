"""BEIR-format folders (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) as evaluation datasets."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import polars as pl

from lab.errors import ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset

# BEIR has no timestamps; one fixed date keeps recency neutral and evaluations reproducible.
BEIR_TIME = "2020-01-01T00:00:00Z"


def _jsonl(path: Path) -> list[dict]:
    if not path.is_file():
        raise ValidationError(f"BEIR folder lacks {path.name}: {path}")
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValidationError(f"{path} line {n}: invalid JSON: {exc.msg}") from None
            if not isinstance(rec, dict) or "_id" not in rec:
                raise ValidationError(f"{path} line {n}: expected an object with an '_id'")
            out.append(rec)
    return out


def load_beir(folder: str | Path, split: str = "train", namespace: str | None = None) -> EvalDataset:
    """Documents become ``semantic`` memories (title kept as the title), queries with qrels > 0 the
    questions. Queries without qrels in ``split``, and qrels naming unknown documents, are reported."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValidationError(f"BEIR folder not found: {folder}")
    namespace = namespace or re.sub(r"[^A-Za-z0-9_.-]", "-", folder.name).strip("-.") or "beir"
    qrels_path = folder / "qrels" / f"{split}.tsv"
    if not qrels_path.is_file():
        known = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        raise ValidationError(f"no qrels for split {split!r} in {folder}; known splits: {known}")
    for name in ("corpus.jsonl", "queries.jsonl"):
        if not (folder / name).is_file():
            raise ValidationError(f"BEIR folder {folder} lacks {name} (it needs corpus.jsonl, queries.jsonl "
                                  "and qrels/<split>.tsv)")
    corpus = _jsonl(folder / "corpus.jsonl")
    memories = [_memory(d, namespace) for d in corpus]
    doc_ids = {m["id"] for m in memories}
    query_rows = _jsonl(folder / "queries.jsonl")
    queries = {str(q["_id"]): str(q.get("text") or "") for q in query_rows}
    # a folder `lab datasets export` wrote keeps each query's namespace and category in its metadata
    placed = {str(q["_id"]): (str(_meta(q).get("namespace") or namespace), str(_meta(q).get("category") or "all"))
              for q in query_rows}
    rels: list[tuple[str, str, int]] = []
    unknown_docs, unknown_queries = 0, 0
    with qrels_path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t")
        for n, row in enumerate(reader, start=1):
            if n == 1 and row and row[0] == "query-id":
                continue
            if len(row) < 3:
                raise ValidationError(f"{qrels_path} line {n}: expected query-id, corpus-id, score")
            qid, did, score = row[0].strip(), row[1].strip(), row[2].strip()
            try:
                rel = int(float(score))
            except ValueError:
                raise ValidationError(f"{qrels_path} line {n}: score {score!r} is not a number") from None
            if rel <= 0:
                continue
            if did not in doc_ids:
                unknown_docs += 1
                continue
            if qid not in queries:
                unknown_queries += 1
                continue
            rels.append((qid, did, rel))
    with_gold = sorted({q for q, _, _ in rels}, key=lambda q: (len(q), q))
    questions = [(q, *placed[q][:1], queries[q], placed[q][1]) for q in with_gold if queries[q].strip()]
    return EvalDataset(
        name=folder.name, memories=memories, source=str(folder.resolve()),
        questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
        qrels=pl.DataFrame(rels, schema=QRELS_SCHEMA, orient="row").filter(
            pl.col("qid").is_in([q for q, *_ in questions])),
        reference_time=BEIR_TIME,
        report={"split": split, "queries_in_file": len(queries), "queries_without_qrels": len(queries) - len(with_gold),
                "qrels_unknown_document": unknown_docs, "qrels_unknown_query": unknown_queries},
    )


def _meta(rec: dict) -> dict:
    meta = rec.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _memory(doc: dict, namespace: str) -> dict:
    """A corpus document as a memory: a plain BEIR document is a ``semantic`` memory of the folder's
    namespace at ``BEIR_TIME``; one `lab datasets export` wrote brings back its namespace, type,
    time and lab metadata."""
    meta = _meta(doc)
    memory = {"id": str(doc["_id"]), "namespace": str(meta.get("namespace") or namespace),
              "title": str(doc.get("title") or ""),
              "content": str(doc.get("text") or "") or str(doc.get("title") or ""),
              "type": str(meta.get("type") or "semantic"), "source": str(meta.get("source") or "beir"),
              "created_at": meta.get("created_at") or BEIR_TIME}
    if isinstance(meta.get("lab"), dict):
        memory["metadata"] = meta["lab"]
    return memory
