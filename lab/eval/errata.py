"""Errata overlays: label corrections to a dataset, kept beside it rather than patched into it, so a
run scores the official labels (the default, what papers report) and the corrected ones side by
side (`lab eval --errata FILE`).

An overlay is a small YAML file::

    errata: 1                    # the format's version
    dataset: locomo              # the dataset it corrects (lab's name for it)
    corrections:
      - qid: "conv-26:q140"      # lab's question id
        field: evidence          # evidence (gold memory ids), category or question (the text asked)
        old: ["conv-26:D17:18"]  # the value in the data now: a correction written for other data is refused
        new: ["conv-26:D17:19"]
        source: "..."            # where the correction comes from (an issue, an audit, lab's own check)
        verified: "..."          # how it was verified from the data itself
        check: {text: "transgender poetry reading"}   # optional: a check lab re-runs on the data

A ``check`` holds what can be re-verified mechanically: ``text`` must appear (case and punctuation
aside) in every memory the correction adds to the evidence, and in none it removes, unless a removed
id names no memory at all. Answers are not a field: no figure lab computes reads an answer, so a
correction of one would change nothing it reports.
"""
from __future__ import annotations

import hashlib
import re
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import polars as pl

from lab.config import read_yaml
from lab.errors import LabWarning, ValidationError
from lab.eval.candidate_cache import candidate_table
from lab.eval.dataset import EvalDataset
from lab.eval.runner import evaluate

FORMAT = 1
FIELDS = ("evidence", "category", "question")
_ENTRY_KEYS = {"qid", "field", "old", "new", "source", "verified", "check"}
_FILE_KEYS = {"errata", "dataset", "corrections", "notes"}
MAX_CORRECTIONS = 100_000  # an overlay corrects a few hundred labels; more is not an overlay


@dataclass(frozen=True)
class Correction:
    qid: str
    field: str
    old: Any  # evidence: a sorted tuple of memory ids; category, question: text
    new: Any
    source: str
    verified: str
    check: dict[str, str] | None = None


@dataclass(frozen=True)
class Errata:
    path: str
    dataset: str
    corrections: tuple[Correction, ...]
    sha256: str  # of the overlay file: a run records which corrections it scored

    def summary(self) -> dict[str, Any]:
        return {"file": self.path, "sha256": self.sha256, "dataset": self.dataset, "corrections": len(self.corrections)}


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{where}: expected non-empty text, got {value!r}"[:300])
    return value


def _value(field: str, value: Any, where: str) -> Any:
    if field != "evidence":
        return _text(value, where)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValidationError(f"{where}: evidence is a list of memory ids, got {value!r}"[:300])
    if len(set(value)) != len(value):
        raise ValidationError(f"{where}: evidence lists an id twice: {value!r}"[:300])
    return tuple(sorted(value))


def _correction(raw: Any, where: str) -> Correction:
    if not isinstance(raw, dict):
        raise ValidationError(f"{where}: expected a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _ENTRY_KEYS)
    if unknown:
        raise ValidationError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(_ENTRY_KEYS)}")
    missing = sorted({"qid", "field", "old", "new", "source", "verified"} - set(raw))
    if missing:
        raise ValidationError(f"{where}: missing {missing}")
    field = raw["field"]
    if field not in FIELDS:
        why = " (no figure lab computes reads an answer)" if field == "answer" else ""
        raise ValidationError(f"{where}: field must be one of {', '.join(FIELDS)}, got {field!r}{why}", field="field")
    old, new = _value(field, raw["old"], f"{where}.old"), _value(field, raw["new"], f"{where}.new")
    if old == new:
        raise ValidationError(f"{where}: old and new are the same ({old!r}): nothing to correct"[:300])
    if field == "evidence" and not new:
        raise ValidationError(f"{where}: new evidence is empty: a question without gold cannot be scored")
    check = raw.get("check")
    if check is not None and (not isinstance(check, dict) or set(check) != {"text"}):
        raise ValidationError(f"{where}.check: expected {{text: ...}}, got {check!r}"[:300])
    return Correction(_text(raw["qid"], f"{where}.qid"), field, old, new, _text(raw["source"], f"{where}.source"),
                      _text(raw["verified"], f"{where}.verified"),
                      {"text": _text(check["text"], f"{where}.check.text")} if check else None)


def load_errata(path: str | Path) -> Errata:
    """An overlay read and checked whole: every error names the file and the entry."""
    p = Path(path)
    data = read_yaml(p, "errata overlay")
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: expected a mapping with errata, dataset and corrections")
    unknown = sorted(set(data) - _FILE_KEYS)
    if unknown:
        raise ValidationError(f"{p}: unknown key(s) {unknown}; allowed: {sorted(_FILE_KEYS)}")
    if data.get("errata") != FORMAT:
        raise ValidationError(f"{p}: errata: expected the format version {FORMAT}, got {data.get('errata')!r}",
                              field="errata")
    dataset = _text(data.get("dataset"), f"{p}: dataset")
    raw = data.get("corrections")
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{p}: corrections: expected a non-empty list")
    if len(raw) > MAX_CORRECTIONS:
        raise ValidationError(f"{p}: {len(raw)} corrections, over the {MAX_CORRECTIONS} an overlay may hold")
    corrections = tuple(_correction(c, f"{p}: corrections[{i}]") for i, c in enumerate(raw))
    seen: dict[tuple[str, str], int] = {}
    for i, c in enumerate(corrections):
        if (c.qid, c.field) in seen:
            raise ValidationError(f"{p}: corrections[{i}] corrects {c.qid} {c.field} again "
                                  f"(corrections[{seen[(c.qid, c.field)]}] did): one correction per question and field")
        seen[(c.qid, c.field)] = i
    return Errata(str(p), dataset, corrections, hashlib.sha256(p.read_bytes()).hexdigest())


def _words(text: str) -> str:
    return " " + " ".join(re.sub(r"[^0-9a-z]+", " ", text.lower()).split()) + " "


def _current(dataset: EvalDataset, c: Correction) -> Any:
    if c.field == "evidence":
        ids = dataset.qrels.filter((pl.col("qid") == c.qid) & (pl.col("relevance") > 0))["memory_id"].to_list()
        return tuple(sorted(ids))
    return dataset.questions.filter(pl.col("qid") == c.qid)[c.field].item()


def _check_evidence(c: Correction, namespace: str, memories: dict[str, dict[str, Any]], where: str) -> None:
    """The new evidence names memories of the question's namespace, and the correction's check holds."""
    for mid in c.new:
        memory = memories.get(mid)
        if memory is None or memory.get("namespace") != namespace:
            raise ValidationError(f"{where}: new evidence {mid!r} is not a memory of namespace {namespace!r}"[:300])
    if c.check is None:
        return
    text = _words(c.check["text"])
    for mid in sorted(set(c.new) - set(c.old)):
        if text not in _words(str(memories[mid].get("content", ""))):
            raise ValidationError(f"{where}: check failed: {c.check['text']!r} is not in the added memory {mid}")
    for mid in sorted(set(c.old) - set(c.new)):
        if mid in memories and text in _words(str(memories[mid].get("content", ""))):
            raise ValidationError(f"{where}: check failed: {c.check['text']!r} is in the removed memory {mid} too")


def base_name(name: str) -> str:
    """A dataset's name without the index-time suffix a run folder adds (``locomo+ctx0``)."""
    return name.split("+", 1)[0]


def apply_errata(dataset: EvalDataset, errata: Errata) -> tuple[EvalDataset, pl.DataFrame]:
    """``dataset`` with the corrections applied, and one row per correction (qid, field, old, new,
    source, verified). Every correction is checked first: its question exists, its ``old`` is what
    the data holds now, its new evidence is memories of the question's namespace, and its check
    holds; the first that fails is refused naming it, and nothing is applied."""
    if base_name(dataset.name) != errata.dataset:
        raise ValidationError(f"{errata.path}: corrects dataset {errata.dataset!r}, not {dataset.name!r}",
                              field="dataset")
    namespaces = dict(dataset.questions.select("qid", "namespace").iter_rows())
    memories = {m["id"]: m for m in dataset.memories}
    questions, qrels = dataset.questions, dataset.qrels
    for i, c in enumerate(errata.corrections):
        where = f"{errata.path}: corrections[{i}] ({c.qid} {c.field})"
        if c.qid not in namespaces:
            raise ValidationError(f"{where}: no question {c.qid!r} in {dataset.name} (a question the loader dropped, "
                                  "or an overlay for another file)", field="qid")
        now = _current(dataset, c)
        if now != c.old:
            raise ValidationError(f"{where}: the data holds {list(now) if c.field == 'evidence' else now!r}, the overlay "
                                  f"expects {list(c.old) if c.field == 'evidence' else c.old!r}: written for other "
                                  "data"[:400], field="old")
        if c.field == "evidence":
            _check_evidence(c, namespaces[c.qid], memories, where)
            qrels = pl.concat([qrels.filter(pl.col("qid") != c.qid),
                               pl.DataFrame({"qid": [c.qid] * len(c.new), "memory_id": list(c.new),
                                             "relevance": [1] * len(c.new)}, schema=qrels.schema)])
        else:
            questions = questions.with_columns(pl.when(pl.col("qid") == c.qid).then(pl.lit(c.new))
                                               .otherwise(pl.col(c.field)).alias(c.field))
    changes = pl.DataFrame([{"qid": c.qid, "field": c.field, "old": _shown(c.old), "new": _shown(c.new),
                             "source": c.source, "verified": c.verified} for c in errata.corrections])
    return replace(dataset, questions=questions, qrels=qrels.sort("qid", "memory_id")), changes


def _shown(value: Any) -> str:
    return ", ".join(value) if isinstance(value, tuple) else str(value)


FIGURES = ("recall@5", "recall@10", "ndcg@10", "mrr", "hit@10")  # shown official beside corrected


def score_errata(result: Any, retriever: Any, corrected: EvalDataset, changes: pl.DataFrame, errata: Errata,
                 root: Path | None = None) -> Any:
    """``result`` (on the official labels) with the same configuration scored on the corrected
    dataset beside it: ``metrics["errata"]`` holds both figures and the changed questions, and
    ``result.errata`` the per-correction table (each with its question's figures both ways)."""
    cands, _ = candidate_table(retriever, corrected, result.config, depth=max(result.options.ks), root=root)
    with warnings.catch_warnings():  # the official run said them: the same lists, the same questions
        warnings.simplefilter("ignore", LabWarning)
        other = evaluate(retriever, corrected, result.config, result.options, cands=cands, root=root)
    shown = [m for m in FIGURES if m in result.metrics["metrics"]]
    both = (result.per_query.select("qid", *shown)
            .join(other.per_query.select("qid", *shown), on="qid", how="full", suffix="_corrected", coalesce=True))
    moved = both.filter(pl.any_horizontal([pl.col(m).ne_missing(pl.col(f"{m}_corrected")) for m in shown]))
    table = changes.join(both, on="qid", how="left")
    result.metrics["errata"] = {
        **errata.summary(), "official": {m: result.metrics["metrics"][m] for m in shown},
        "corrected": {m: other.metrics["metrics"][m] for m in shown},
        "corrected_ci95": {m: other.metrics["ci95"][m] for m in shown},
        "corrected_questions": other.metrics["questions"], "questions_changed": moved.height,
        "by_category_corrected": other.metrics["by_category"],
    }
    result.errata = table
    return result


def errata_lines(e: dict[str, Any], table: pl.DataFrame | None) -> list[str]:
    """The report's section: official and corrected figures side by side, then each correction."""
    lines = ["", "## Official and corrected labels", "",
             f"Overlay `{e['file']}` (sha256 {e['sha256'][:12]}): {e['corrections']} correction(s) of "
             f"{e['dataset']}; {e['questions_changed']} question(s) scored differently. The official figure is "
             "the one reported everywhere else.", "",
             "| metric | official | corrected | change |", "|---|---|---|---|"]
    for m, v in e["official"].items():
        c = e["corrected"][m]
        lines.append(f"| {m} | {v:.4f} | {c:.4f} | {c - v:+.4f} |")
    if table is not None and table.height:
        metric = next(m for m in ("recall@10", *e["official"]) if m in table.columns)
        lines += ["", f"| question | field | official label | corrected label | {metric} official -> corrected | "
                      "source | verified |", "|---|---|---|---|---|---|---|"]
        for r in table.iter_rows(named=True):
            a, b = r.get(metric), r.get(f"{metric}_corrected")
            moved = "-" if a is None or b is None else f"{a:.2f} -> {b:.2f}"
            lines.append(f"| {r['qid']} | {r['field']} | {_cell(r['old'])} | {_cell(r['new'])} | {moved} | "
                         f"{_cell(r['source'])} | {_cell(r['verified'])} |")
        lines += ["", "Per question: `errata.parquet`."]
    return lines


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
