"""LongMemEval (Wu et al., ICLR 2025) from the user's own file, in the official format.

The files (``longmemeval_s_cleaned.json``, ``longmemeval_m_cleaned.json``, ``longmemeval_oracle.json``
and the older uncleaned ``longmemeval_s.json`` / ``longmemeval_m.json``) are a JSON list of
questions, each with its own haystack: ``haystack_sessions`` (lists of turns ``{role, content}``,
evidence turns with ``has_answer: true``), ``haystack_session_ids``, ``haystack_dates``,
``answer_session_ids``, ``question_id`` (``_abs`` at the end: an abstention question, whose
answer was never said), ``question_type``, ``question``, ``answer`` and ``question_date``.

Each question is its own namespace (``lme-<question_id>``), so haystacks never meet; each turn is a
memory (id ``lme-<question_id>:<session id>#<turn index>``: questions share distractor sessions) with its session's date as ``created_at`` and the session
id kept in its metadata, and the question's date is that namespace's "now" (time signals never see
the future). Gold for lab's own metrics: the evidence turns (``has_answer``), else every turn of an
answer session. The file is read one question at a time (a streaming reader over the top-level
list), so an M-sized file (about 500 sessions per question) never sits in memory as one JSON tree;
the memories of every question are kept, as for any evaluation dataset.
"""
from __future__ import annotations

import json
import re
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import polars as pl

from lab.errors import LabWarning, ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset, file_sha256
from lab.store.records import MAX_CONTENT_CHARS

FILES = ("longmemeval_s_cleaned.json", "longmemeval_m_cleaned.json", "longmemeval_oracle.json",
         "longmemeval_s.json", "longmemeval_m.json")
# SHA-256 of the official files whose checksums are published (a file not listed is evaluated
# with a warning naming its checksum)
KNOWN_SHA256 = {"longmemeval_oracle.json": "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"}
REQUIRED = {"question_id": str, "question_type": str, "question": str, "question_date": str,
            "haystack_session_ids": list, "haystack_dates": list, "haystack_sessions": list,
            "answer_session_ids": list}
ABSTENTION_SUFFIX = "_abs"
CHUNK = 1 << 20  # bytes read at a time by the streaming reader


def is_longmemeval(path: Path) -> bool:
    """A LongMemEval file by its name, or by its first question's keys."""
    if path.name in FILES or path.name.startswith("longmemeval"):
        return True
    try:
        first = next(iter_questions(path), None)
    except ValidationError:  # damaged: LongMemEval's when its first bytes name LongMemEval's fields
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        return b'"haystack_sessions"' in head or b'"question_id"' in head
    return isinstance(first, dict) and "haystack_sessions" in first


def iter_questions(path: str | Path) -> Iterator[Any]:
    """Each element of the file's top-level JSON list, decoded one at a time; a file that is not
    UTF-8 text, or a question nested deeper than a JSON reader follows, is refused naming the file
    and the question (its number, and its id when it can be read)."""
    try:
        yield from _iter_questions(path)
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path}: not UTF-8 text (byte {exc.start} of a read): a LongMemEval file is a JSON "
                              "list of questions") from None


def _iter_questions(path: str | Path) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    n = 0
    with open(path, encoding="utf-8") as f:
        buf, pos = f.read(CHUNK), 0
        pos = _skip(buf, pos)
        if pos >= len(buf) or buf[pos] != "[":
            raise ValidationError(f"{path}: a LongMemEval file is a JSON list of questions")
        pos += 1
        while True:
            pos = _skip(buf, pos)
            while pos >= len(buf):
                more = f.read(CHUNK)
                if not more:
                    raise ValidationError(f"{path}: the JSON list ends early (a truncated file?)")
                buf, pos = buf[pos:] + more, 0
                pos = _skip(buf, pos)
            if buf[pos] == "]":
                return
            if buf[pos] == ",":
                pos += 1
                continue
            n += 1
            while True:
                try:
                    item, end = decoder.raw_decode(buf, pos)
                    break
                except RecursionError:  # nesting no LongMemEval question has: refused, not followed
                    raise ValidationError(f"{path} question {n}{_id_near(buf, pos)}: nested deeper than a JSON "
                                          "reader follows (a question is an object of lists of turns)") from None
                except json.JSONDecodeError:
                    more = f.read(CHUNK)
                    if not more:
                        raise ValidationError(f"{path}: not valid JSON near byte {pos} of the last read "
                                              "(a truncated or damaged file?)") from None
                    buf, pos = buf[pos:] + more, 0
            yield item
            buf, pos = buf[end:], 0


_QID = re.compile(r'"question_id"\s*:\s*"([^"\\]{1,200})"')


def _id_near(buf: str, pos: int) -> str:
    """`` (ID)``: the id of the question that starts at ``pos``, when its text says it early on."""
    m = _QID.search(buf, pos, pos + 4096)
    return f" ({m.group(1)!r})" if m else ""


def _skip(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos


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


def load_longmemeval(path: str | Path, *, verify: bool = True) -> EvalDataset:
    """The file as an evaluation dataset (see the module's docstring); ``report`` carries the
    checksum check, and ``longmemeval`` (in ``report``) what its own metrics need."""
    path = Path(path)
    if not path.is_file():
        raise ValidationError(f"LongMemEval file not found: {path}")
    checksum = file_sha256(path) if verify else None
    known = KNOWN_SHA256.get(path.name)
    memories: list[dict[str, Any]] = []
    questions, qrels = [], []
    sessions: dict[str, str] = {}  # memory id -> session id
    answer_sessions: dict[str, list[str]] = {}
    evidence_turns: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    now: dict[str, str] = {}
    abstention: list[str] = []
    unanswerable: list[tuple[str, str, str, str]] = []
    skipped = 0
    for n, q in enumerate(iter_questions(path), start=1):
        _check(q, n, path)
        qid, ns = str(q["question_id"]), f"lme-{q['question_id']}"
        now[ns] = parse_date(q["question_date"], f"{path.name} {qid} question_date")
        answers = {str(s) for s in q["answer_session_ids"]}
        turns_of_answers, evidence = [], []
        for sid, date, turns in zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"]):
            created = parse_date(date, f"{path.name} {qid} session {sid}")
            kept, empty = _indexable_turns(turns, f"{path.name} {qid} session {sid}")
            skipped += empty
            for t, turn in kept:
                # the namespace in the id: questions of one file share distractor sessions, and
                # an id is unique across a store
                mid = f"{ns}:{sid}#{t}"
                memories.append({"id": mid, "namespace": ns, "content": turn["content"], "created_at": created,
                                 "type": "episodic", "metadata": {"session_id": str(sid), "role": turn.get("role"),
                                                                  "turn": t}})
                sessions[mid] = str(sid)
                if str(sid) in answers:
                    turns_of_answers.append(mid)
                    if turn.get("has_answer"):
                        evidence.append(mid)
        types[qid] = str(q["question_type"])
        if qid.endswith(ABSTENTION_SUFFIX):  # nothing relevant is stored: no recall to measure
            abstention.append(qid)
            unanswerable.append((qid, ns, str(q["question"]), str(q["question_type"])))
            continue
        questions.append((qid, ns, str(q["question"]), str(q["question_type"])))
        answer_sessions[qid] = sorted(answers)
        evidence_turns[qid] = evidence
        qrels.extend((qid, m, 1) for m in (evidence or turns_of_answers))
    if not questions:
        raise ValidationError(f"{path}: the file holds no answerable question")
    if checksum is not None and checksum != known:
        warnings.warn(LabWarning(f"{path.name}: sha256 {checksum} is not "
                                 + (f"the official {known}" if known else "one lab knows (lab datasets lists them)")
                                 + "; evaluated all the same, its figures are this file's"), stacklevel=2)
    report = {"file": str(path), "sha256": checksum, "known_sha256": known,
              "checksum": "not verified" if checksum is None else "matches" if checksum == known
              else f"unknown checksum {checksum} (not one lab knows: evaluated all the same)" if known is None
              else f"differs from the official {known}",
              "empty_turns_skipped": skipped,
              "abstention_questions": abstention,  # their haystacks are stored; asked only by --abstention
              "longmemeval": {"sessions": sessions, "answer_sessions": answer_sessions, "evidence": evidence_turns,
                              "types": types}}
    return EvalDataset(name=path.stem.replace("_", "-"), memories=memories,
                       questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
                       qrels=pl.DataFrame(qrels, schema=QRELS_SCHEMA, orient="row"),
                       report=report, source=str(path.resolve()), reference_times=now,
                       unanswerable=pl.DataFrame(unanswerable, schema=QUESTIONS_SCHEMA, orient="row"))
