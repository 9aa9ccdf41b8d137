"""The project's own gold sets: ``goldens/*.yaml`` over a memory dataset (the demo by default)."""
from __future__ import annotations

from pathlib import Path

import polars as pl

from lab.config import read_yaml
from lab.errors import ValidationError
from lab.eval.conversations import load_conversations_jsonl
from lab.eval.beir import load_beir
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset, checked_reference_time
from lab.eval.locomo import load_locomo
from lab.eval.longmemeval import NAMED as LONGMEMEVAL_NAMED, is_gzip, is_longmemeval, load_longmemeval
from lab.eval.tables import is_tables, read_tables
from lab.store.ingest import find_dataset_files, read_records
from lab.workspace import Workspace

GOLDEN_KEYS = {"id", "namespace", "question", "expected", "category", "notes", "stale", "save", "expected_phrases"}


def project_folder(project: str | Path | None = None) -> Path:
    """The project holding ``datasets/demo`` and ``goldens/``: the caller's workspace's, else the
    built-in one (no installed workspace is read)."""
    return Path(project) if project else Workspace().project


def default_datasets(project: str | Path | None = None) -> Path:
    """The datasets root when the caller names none: ``../shared/datasets`` beside the project
    (the edges pass their workspace's, which ``$LAB_DATASETS`` may have set)."""
    return Workspace(project=project_folder(project)).datasets_root


def golden_data_dir(path: Path, dataset: object, project: str | Path | None = None) -> Path:
    """The memories a golden file is about: its ``dataset`` key as a folder relative to the file
    (or absolute), else a bare name of the project's ``datasets/`` (``dataset: demo``)."""
    if not isinstance(dataset, str) or not dataset.strip():
        raise ValidationError(f"{path}: dataset must be a folder (relative to the file) or a name under the "
                              f"project's datasets/, got {dataset!r}")
    beside = (path.parent / dataset).resolve()
    if beside.is_dir():
        return beside
    named = project_folder(project) / "datasets" / dataset
    if named.is_dir():
        return named
    raise ValidationError(f"{path}: dataset {dataset!r} is neither a folder beside the file ({beside}) nor one of the "
                          f"project's datasets ({named})")


def describe_golden(path: str | Path, project: str | Path | None = None) -> dict[str, object]:
    """What a golden file holds, after every check `load_golden` makes (`lab goldens check`)."""
    dataset = load_golden(path, project=project)
    questions = dataset.questions
    per_question = dataset.qrels.group_by("qid").len()
    return {
        "file": str(path), "name": dataset.name, "data": dataset.report["data"],
        "memories": len(dataset.memories), "edges": len(dataset.edges),
        "namespaces": sorted({str(m.get("namespace")) for m in dataset.memories}),
        "questions": questions.height,
        "by_category": dict(sorted(questions.group_by("category").len().iter_rows())),
        "expected_per_question": {"min": int(per_question["len"].min() or 0), "max": int(per_question["len"].max() or 0),
                                  "mean": round(float(per_question["len"].mean() or 0), 2)},
        "save_then_search": len(dataset.saves), "stale": dataset.stale.height,
        "reference_time": dataset.reference_time,
    }


def load_golden(path: str | Path, data: str | Path | None = None, *, project: str | Path | None = None) -> EvalDataset:
    """A golden YAML and the memories it is about (``data``, else its ``dataset`` key: demo, a
    name under ``project``'s datasets/)."""
    path = Path(path)
    doc = read_yaml(path, "golden file")
    if not isinstance(doc, dict) or not isinstance(doc.get("questions"), list):
        raise ValidationError(f"{path}: expected a mapping with a 'questions' list")
    data_dir = Path(data) if data else golden_data_dir(path, doc.get("dataset", "demo"), project)
    memories_file, edges_file = find_dataset_files(data_dir)
    memories = [dict(record) for _, record in read_records(memories_file)]
    edges = [dict(record) for _, record in read_records(edges_file)] if edges_file else []
    by_ns: dict[str, set[str]] = {}
    for m in memories:
        by_ns.setdefault(str(m.get("namespace")), set()).add(str(m.get("id")))
    questions, qrels, stale, saves = [], [], [], {}
    seen: set[str] = set()
    for n, q in enumerate(doc["questions"], start=1):
        where = f"{path.name} question {n}"
        if not isinstance(q, dict):
            raise ValidationError(f"{where}: expected a mapping")
        unknown = sorted(set(q) - GOLDEN_KEYS)
        if unknown:
            raise ValidationError(f"{where}: unknown key(s) {unknown}; known: {sorted(GOLDEN_KEYS)}")
        for key in ("id", "namespace", "question", "expected", "category"):
            if not q.get(key):
                raise ValidationError(f"{where}: '{key}' is required")
        qid, ns = str(q["id"]), str(q["namespace"])
        if qid in seen:
            raise ValidationError(f"{where}: duplicate id {qid!r}")
        seen.add(qid)
        known = set(by_ns.get(ns, set()))
        if "save" in q:
            save = dict(q["save"])
            save.setdefault("namespace", ns)
            if not save.get("id") or not save.get("content"):
                raise ValidationError(f"{where}: 'save' needs an id and content")
            saves[qid] = save
            known.add(str(save["id"]))
        expected = [str(e) for e in q["expected"]]
        missing = [e for e in expected + [str(s) for s in q.get("stale") or []] if e not in known]
        if missing:
            raise ValidationError(f"{where} ({qid}): memory id(s) {missing} not in namespace {ns!r}")
        questions.append((qid, ns, str(q["question"]), str(q["category"])))
        qrels.extend((qid, e, 1) for e in expected)
        stale.extend((qid, str(s)) for s in q.get("stale") or [])
    return EvalDataset(
        name=str(doc.get("name") or path.stem), memories=memories, edges=edges,
        questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
        qrels=pl.DataFrame(qrels, schema=QRELS_SCHEMA, orient="row"),
        saves=saves, stale=pl.DataFrame(stale, schema={"qid": pl.String, "memory_id": pl.String}, orient="row"),
        reference_time=checked_reference_time(doc.get("reference_time"), str(path)),
        report={"golden": str(path), "data": str(data_dir), "save_then_search": len(saves)},
    )


BUILT_IN = ("locomo", "scifact", "demo")


def load_dataset(name: str, datasets: str | Path | None = None, *, split: str = "train",
                 observations: bool = False, summaries: bool = False, project: str | Path | None = None) -> EvalDataset:
    """``locomo``, ``scifact``, ``demo`` (goldens/demo.yaml), a golden .yaml, a BEIR folder, or a
    folder of prepared tables (`lab.eval.tables`); built-in names are read from ``datasets`` (None:
    beside ``project``), the demo and golden files' named datasets from ``project``."""
    root = Path(datasets) if datasets else default_datasets(project)
    if name == "locomo":
        return load_locomo(root / "locomo" / "locomo10-dev.json", observations=observations, summaries=summaries)
    if name == "scifact":
        return load_beir(root / "scifact", split)
    if name == "demo":
        return load_golden(project_folder(project) / "goldens" / "demo.yaml", project=project)
    p = Path(name)
    if name in LONGMEMEVAL_NAMED:  # the shared LongMemEval development half, or its oracle
        p = root / LONGMEMEVAL_NAMED[name]
        if not p.is_file():
            raise ValidationError(f"{name}: {p} not found (`lab datasets` says where it goes)")
        return load_longmemeval(p)
    if p.is_file() and is_gzip(p):  # LongMemEval's .json.gz, the only compressed format read
        return load_longmemeval(p)

    if p.is_dir() and is_tables(p):  # a dataset prepared into Parquet tables (the DVC prepare stage)
        return read_tables(p)
    if p.suffix in (".yaml", ".yml"):
        return load_golden(p, project=project)
    if p.is_file() and p.suffix == ".jsonl":  # your conversations and questions (lab.eval.conversations)
        return load_conversations_jsonl(p)
    if p.is_dir():
        if not (p / "corpus.jsonl").is_file():
            raise ValidationError(f"{p} is a folder without corpus.jsonl: a BEIR folder holds corpus.jsonl, "
                                  "queries.jsonl and qrels/<split>.tsv")
        return load_beir(p, split)
    if p.is_file() and p.suffix == ".json":
        if is_longmemeval(p):
            return load_longmemeval(p)
        return load_locomo(p, observations=observations, summaries=summaries)
    raise ValidationError(
        f"unknown dataset {name!r}: use locomo, scifact, demo, a golden .yaml, a LoCoMo or LongMemEval .json, "
        "a conversations .jsonl or a BEIR folder"
    )
