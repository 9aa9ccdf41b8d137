"""LongMemEval (Wu et al., ICLR 2025) from the user's own file, in the official format.

The files (``longmemeval_s_cleaned.json``, ``longmemeval_m_cleaned.json``, ``longmemeval_oracle.json``
and the older uncleaned ``longmemeval_s.json`` / ``longmemeval_m.json``) are a JSON list of
questions, each with its own haystack: ``haystack_sessions`` (lists of turns ``{role, content}``,
evidence turns with ``has_answer: true``), ``haystack_session_ids``, ``haystack_dates``,
``answer_session_ids``, ``question_id`` (``_abs`` at the end: an abstention question, whose
answer was never said), ``question_type``, ``question``, ``answer`` and ``question_date``.

Each question is its own namespace (``lme-<question_id>``), so haystacks never meet, and the
question's date is that namespace's "now" (time signals never see the future). What is stored
follows the official retrieval protocol (`lab.eval.longmemeval_corpus`): by default one memory per
user turn (``granularity="turn"``, ``corpus="user"``; id ``lme-<question_id>:<session id>#<turn
index>``: questions share distractor sessions); ``granularity="session"`` stores one memory per
session (id ``lme-<question_id>:<session id>``, its turns joined); ``corpus="all"`` takes every
turn. Each memory has its session's date as ``created_at`` and its session id and official corpus
id in its metadata, so the official metrics (`lab.eval.longmemeval_metrics`) and retrieval log
(`lab.eval.longmemeval_log`) are exact. Gold for lab's own metrics: the official gold items, else
every stored item of an answer session. The file is read one question at a time (a streaming
reader over the top-level list, gzip-compressed or not), so an M-sized file (about 500 sessions
per question) never sits in memory as one JSON tree; the memories of every question are kept, as
for any evaluation dataset.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl

from lab.errors import LabWarning, ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset
from lab.eval.longmemeval_reader import content_sha256, is_gzip, iter_questions  # noqa: F401 (re-exported)
from lab.eval.longmemeval_corpus import check_protocol, corpus_items, gold_problems, has_target
from lab.store.records import MAX_CONTENT_CHARS

FILES = ("longmemeval_s_cleaned.json", "longmemeval_m_cleaned.json", "longmemeval_oracle.json",
         "longmemeval_s.json", "longmemeval_m.json")
# SHA-256 of the official files whose checksums are published (a file not listed is evaluated
# with a warning naming its checksum)
# (of a .json.gz: the SHA-256 of the JSON inside it)
KNOWN_SHA256 = {"longmemeval_oracle.json": "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c",
                "longmemeval_s_dev.json.gz": "0f782144aa5013058fb5ef265c056252f89491ba1a7477468cdca192bfe1c0ed",
                "longmemeval_oracle_dev.json.gz": "592ac91d04ac914f4834996f456ad4b7ecd5b03d6268a8aea352645d78800ff8"}
# the names `--dataset` takes for the shared development half (lab-split-v1) and its oracle, under
# the datasets root
NAMED = {"longmemeval-s-dev": "longmemeval/longmemeval_s_dev.json.gz",
         "longmemeval-oracle-dev": "longmemeval/longmemeval_oracle_dev.json.gz"}
REQUIRED = {"question_id": str, "question_type": str, "question": str, "question_date": str,
            "haystack_session_ids": list, "haystack_dates": list, "haystack_sessions": list,
            "answer_session_ids": list}
ABSTENTION_SUFFIX = "_abs"


def is_longmemeval(path: Path) -> bool:
    """A LongMemEval file by its name, or by its first question's keys (a .gz: LongMemEval's, the
    only compressed format lab reads)."""
    if path.name in FILES or path.name.startswith("longmemeval") or is_gzip(path):
        return True
    try:
        first = next(iter_questions(path), None)
    except ValidationError:  # damaged: LongMemEval's when its first bytes name LongMemEval's fields
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        return b'"haystack_sessions"' in head or b'"question_id"' in head
    return isinstance(first, dict) and "haystack_sessions" in first


_DATE = re.compile(r"^(\d{4})/(\d{2})/(\d{2})(?: \(\w+\))? (\d{2}):(\d{2})$")


def parse_date(text: str, where: str) -> str:
    """``2023/05/20 (Sat) 02:21`` (LongMemEval's dates) as ISO 8601 UTC."""
    m = _DATE.match(str(text).strip())
    if not m:
        raise ValidationError(f"{where}: {text!r} is not a LongMemEval date (like '2023/05/20 (Sat) 02:21')")
    y, mo, d, h, mi = (int(g) for g in m.groups())
    return datetime(y, mo, d, h, mi, tzinfo=timezone.utc).isoformat().replace("+00:00", "Z")


EMPTY = "has no text (empty or only white space)"


def _unindexable(content: str) -> str | None:
    """Why a turn's text cannot be stored and indexed as a memory, or None when it can."""
    if not content.strip():
        return EMPTY
    if len(content) > MAX_CONTENT_CHARS:
        return f"has {len(content)} characters, over the {MAX_CONTENT_CHARS} a memory may have"
    try:
        content.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate at character {exc.start}, not valid Unicode text"
    return None


def _check(q: Any, n: int, path: Path) -> None:
    where = f"{path.name} question {n}"
    if not isinstance(q, dict):
        raise ValidationError(f"{where}: expected an object, got {type(q).__name__}")
    for key, kind in REQUIRED.items():
        if key not in q:
            raise ValidationError(f"{where} ({q.get('question_id', '?')}): missing field {key!r}")
        if not isinstance(q[key], kind):
            raise ValidationError(f"{where} ({q.get('question_id')}): {key} must be a {kind.__name__}, "
                                  f"got {type(q[key]).__name__}")
    answer = q.get("answer")  # the official files: a text, or a whole number for a few
    if "answer" in q and (isinstance(answer, bool) or not isinstance(answer, (str, int))):
        raise ValidationError(f"{where} ({q['question_id']}): answer must be a text or a whole number, got {answer!r}"
                              [:300])
    sizes = {k: len(q[k]) for k in ("haystack_session_ids", "haystack_dates", "haystack_sessions")}
    if len(set(sizes.values())) != 1:
        raise ValidationError(f"{where} ({q['question_id']}): haystack fields differ in length: {sizes}")


def _indexable_turns(turns: Any, where: str) -> tuple[list[tuple[int, dict[str, Any]]], int]:
    """A session's turns that can be indexed, with their positions, and how many empty ones were
    skipped; a malformed turn, or evidence that cannot be indexed, is an error naming it."""
    if not isinstance(turns, list):
        raise ValidationError(f"{where}: a session is a list of turns")
    kept, skipped = [], 0
    for t, turn in enumerate(turns):
        if not isinstance(turn, dict) or not isinstance(turn.get("content"), str):
            raise ValidationError(f"{where} turn {t}: a turn is {{role, content}}")
        if turn.get("has_answer") not in (None, True, False):
            raise ValidationError(f"{where} turn {t}: has_answer must be true or false, got {turn['has_answer']!r}"[:300])
        problem = _unindexable(turn["content"])
        if problem and (turn.get("has_answer") or problem != EMPTY):
            raise ValidationError(f"{where} turn {t}: {'an evidence turn (has_answer) ' if turn.get('has_answer') else ''}"
                                  f"{problem}, so it cannot be indexed")
        if problem:  # an empty turn, not evidence (the official S file has a few): nothing to find
            skipped += 1
            continue
        kept.append((t, turn))
    return kept, skipped


def _shape(q: dict[str, Any]) -> str:
    """``sessions`` (the official shape: sessions of turns) or ``turns`` (a haystack of bare turns)."""
    sessions = q["haystack_sessions"]
    return "turns" if sessions and all(isinstance(s, dict) for s in sessions) else "sessions"


@dataclass
class _Reading:
    """What the questions read so far give the dataset (`load_longmemeval`)."""

    path: Path
    granularity: str
    corpus: str
    memories: list[dict[str, Any]] = field(default_factory=list)
    questions: list[tuple[str, str, str, str]] = field(default_factory=list)
    unanswerable: list[tuple[str, str, str, str]] = field(default_factory=list)
    qrels: list[tuple[str, str, int]] = field(default_factory=list)
    now: dict[str, str] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    corpus_of: dict[str, list[list[str | None]]] = field(default_factory=dict)
    no_target: list[str] = field(default_factory=list)
    gold_warnings: dict[str, list[str]] = field(default_factory=dict)
    seen: dict[str, int] = field(default_factory=dict)
    shapes: dict[str, str] = field(default_factory=dict)  # shape -> the first question of it
    empty_turns: int = 0
    skipped_items: int = 0
    aliased_items: int = 0

    def add(self, q: dict[str, Any]) -> None:
        qid, ns = str(q["question_id"]), f"lme-{q['question_id']}"
        self.seen[qid] = self.seen.get(qid, 0) + 1
        if self.seen[qid] > 1:  # refused once the whole file is read, naming every repeated id
            return
        self.shapes.setdefault(_shape(q), qid)
        if "turns" in self.shapes:
            other = self.shapes.get("sessions")
            raise ValidationError(f"{self.path.name}: " + (
                f"mixes granularities: {other!r} holds sessions (lists of turns), {self.shapes['turns']!r} bare turns"
                if other else f"question {self.shapes['turns']!r} holds bare turns where the official format has "
                              "sessions (lists of turns)"))
        self.now[ns] = parse_date(q["question_date"], f"{self.path.name} {qid} question_date")
        for sid, date, turns in zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"]):
            parse_date(date, f"{self.path.name} {qid} session {sid}")
            self.empty_turns += _indexable_turns(turns, f"{self.path.name} {qid} session {sid}")[1]
        answers, corpus, gold, of_answers = {str(s) for s in q["answer_session_ids"]}, [], [], []
        by_text: dict[str, str] = {}  # a text stored in this namespace -> its memory
        for item in corpus_items(q, self.granularity, self.corpus):
            where = f"{self.path.name} {qid} session {item.session}" + (f" turn {item.turn}" if item.turn is not None else "")
            # a session may come twice in one haystack (the S file has such): the official corpus
            # holds both under one corpus id; a memory id is unique, so the repeat is ``@<n>``
            again = f"@{item.repeat}" if item.repeat else ""
            mid = f"{ns}:{item.session}{again}" + (f"#{item.turn}" if item.turn is not None else "")
            problem = _unindexable(item.text)
            if problem and problem != EMPTY:
                raise ValidationError(f"{where}: {problem}, so it cannot be indexed")
            if problem:  # no text (the official S file has a few such turns): kept in the corpus, not stored
                self.skipped_items += 1
                corpus.append([item.corpus_id, None])
                continue
            if item.text in by_text:  # the store keeps one memory per text in a namespace: the
                # twin stands for this item too, ranked beside it as the official ranking ties them
                mid = by_text[item.text]
                self.aliased_items += 1
            else:
                by_text[item.text] = mid
                self._store(item, mid, ns, where)
            corpus.append([item.corpus_id, mid])
            gold += [mid] if "answer" in item.corpus_id else []
            of_answers += [mid] if item.session in answers else []
        self._question(q, qid, ns, corpus, list(dict.fromkeys(gold or of_answers)))

    def _store(self, item: Any, mid: str, ns: str, where: str) -> None:
        created = parse_date(item.timestamp, where)
        meta = {"session_id": item.session, "corpus_id": item.corpus_id}  # (a twin's: the first item's)
        if item.turn is not None:
            meta.update(role=item.role, turn=item.turn)
        self.memories.append({"id": mid, "namespace": ns, "content": item.text, "created_at": created,
                              "type": "episodic", "metadata": meta})

    def _question(self, q: dict[str, Any], qid: str, ns: str, corpus: list[list[str | None]], gold: list[str]) -> None:
        row = (qid, ns, str(q["question"]), str(q["question_type"]))
        self.types[qid] = row[3]
        if qid.endswith(ABSTENTION_SUFFIX):  # nothing relevant is stored: no recall to measure
            self.unanswerable.append(row)
            return
        self.questions.append(row)
        self.corpus_of[qid] = corpus
        if not has_target(q, self.corpus):
            self.no_target.append(qid)
        problems = gold_problems(q)
        if problems:
            self.gold_warnings[qid] = problems
        self.qrels.extend((qid, m, 1) for m in gold)


def dataset_name(path: Path, granularity: str = "turn", corpus: str = "user") -> str:
    """``longmemeval-s-dev`` for longmemeval_s_dev.json(.gz), tagged ``+session`` / ``+all-turns``
    off the official defaults (their stores and runs are others)."""
    base = path.name.removesuffix(".gz").removesuffix(".json").replace("_", "-")
    return base + ("+session" if granularity == "session" else "") + ("+all-turns" if corpus == "all" else "")


def load_longmemeval(path: str | Path, *, verify: bool = True, granularity: str = "turn",
                     corpus: str = "user") -> EvalDataset:
    """The file as an evaluation dataset (see the module's docstring); ``report`` carries the
    checksum check, and ``longmemeval`` (in ``report``) what the official metrics and log need."""
    check_protocol(granularity, corpus)
    path = Path(path)
    if not path.is_file():
        raise ValidationError(f"LongMemEval file not found: {path}")
    checksum = content_sha256(path) if verify else None
    known = KNOWN_SHA256.get(path.name)
    r = _Reading(path, granularity, corpus)
    for n, q in enumerate(iter_questions(path), start=1):
        _check(q, n, path)
        r.add(q)
    repeated = sorted(q for q, times in r.seen.items() if times > 1)
    if repeated:
        raise ValidationError(f"{path.name}: duplicate question ids {repeated}"[:600])
    if not r.questions:
        raise ValidationError(f"{path}: the file holds no answerable question")
    if checksum is not None and checksum != known:
        warnings.warn(LabWarning(f"{path.name}: sha256 {checksum} is not "
                                 + (f"the official {known}" if known else "one lab knows (lab datasets lists them)")
                                 + "; evaluated all the same, its figures are this file's"), stacklevel=2)
    if r.gold_warnings:
        named = "; ".join(f"{q}: {', '.join(p)}" for q, p in list(r.gold_warnings.items())[:3])
        warnings.warn(LabWarning(f"{path.name}: gold disagrees with the haystack in {len(r.gold_warnings)} question(s), "
                                 f"scored as the official code scores them: {named}"[:700]
                                 + ("; ..." if len(r.gold_warnings) > 3 else "")), stacklevel=2)
    abstention = [row[0] for row in r.unanswerable]
    report = {"file": str(path), "sha256": checksum, "known_sha256": known,
              "checksum": "not verified" if checksum is None else "matches" if checksum == known
              else f"unknown checksum {checksum} (not one lab knows: evaluated all the same)" if known is None
              else f"differs from the official {known}",
              "empty_turns": r.empty_turns, "empty_items_skipped": r.skipped_items,
              "same_text_items": r.aliased_items,  # stored once, standing for its twins in the ranking
              "abstention_questions": abstention,  # their haystacks are stored; asked only by --abstention
              "ranking_depth": max(len(c) for c in r.corpus_of.values()),  # every run ranks the whole corpus
              "longmemeval": {"granularity": granularity, "corpus_roles": corpus, "types": r.types,
                              "corpus": r.corpus_of, "no_target": r.no_target, "abstention": abstention,
                              "gold_warnings": r.gold_warnings, "source": str(path)}}
    return EvalDataset(name=dataset_name(path, granularity, corpus), memories=r.memories,
                       questions=pl.DataFrame(r.questions, schema=QUESTIONS_SCHEMA, orient="row"),
                       qrels=pl.DataFrame(r.qrels, schema=QRELS_SCHEMA, orient="row"),
                       report=report, source=str(path.resolve()), reference_times=r.now,
                       unanswerable=pl.DataFrame(r.unanswerable, schema=QUESTIONS_SCHEMA, orient="row"))
