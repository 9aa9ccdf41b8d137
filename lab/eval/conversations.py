"""Your conversations and your questions, as an evaluation dataset: a JSONL file, one conversation a
line, with its turns (speaker, time, text) and the questions asked of it with the turns that answer
them. No other benchmark's shape to convert to: lab reads it as it reads LoCoMo (each conversation
a namespace, each turn a memory, each question's evidence turns its gold).

One line::

    {"conversation": "trip", "now": "2026-03-20T09:00:00Z",
     "turns": [{"id": "t1", "speaker": "Ana", "time": "2026-03-01T09:00:00Z", "text": "...", "session": "s1"}],
     "questions": [{"id": "q1", "question": "...", "evidence": ["t1"], "category": "single-hop"}]}

Required: ``conversation``, ``turns`` (each ``id``, ``speaker``, ``time``, ``text``), ``questions``
(each ``id``, ``question``, ``evidence``: turn ids of the same conversation). Optional: ``now`` (the
moment the questions are asked; default the last turn's time), a turn's ``session`` (turns of one
session are one episode, which context turns stay within; default the whole conversation), a
question's ``category`` (default ``question``). Every error names the line, the item and the field.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from lab.config import parse_time
from lab.errors import ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset

_LINE_KEYS = {"conversation", "now", "turns", "questions"}
_TURN_KEYS = {"id", "speaker", "time", "text", "session"}
_QUESTION_KEYS = {"id", "question", "evidence", "category"}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")  # ids become memory ids and file names
MAX_LINE_BYTES = 64 << 20  # one conversation of thousands of turns is megabytes


def is_conversations(path: Path) -> bool:
    """Whether ``path`` is a conversations file: a .jsonl whose first record names a conversation."""
    if path.suffix != ".jsonl" or not path.is_file():
        return False
    with open(path, "rb") as f:
        first = f.readline(MAX_LINE_BYTES)
    try:
        record = json.loads(first)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return True  # a .jsonl given as a dataset: the loader says what is wrong with it
    return isinstance(record, dict) and "conversation" in record


def _id(value: Any, where: str, what: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise ValidationError(f"{where}: {what} must be 1-128 letters, digits or _ . : @ - (starting with a letter "
                              f"or digit), got {value!r}"[:300])
    return value


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{where}: expected non-empty text, got {value!r}"[:300])
    return value


def _keys(record: Any, allowed: set[str], required: tuple[str, ...], where: str) -> dict[str, Any]:
    if not isinstance(record, dict):
        raise ValidationError(f"{where}: expected an object, got {type(record).__name__}")
    unknown = sorted(set(record) - allowed)
    if unknown:
        raise ValidationError(f"{where}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")
    missing = [k for k in required if k not in record]
    if missing:
        raise ValidationError(f"{where}: missing {missing}")
    return record


def _turns(conv: str, raw: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{where}: turns: expected a non-empty list")
    out, seen = [], set()
    for i, turn in enumerate(raw):
        at = f"{where} turn {i + 1}"
        _keys(turn, _TURN_KEYS, ("id", "speaker", "time", "text"), at)
        tid = _id(turn["id"], at, "id")
        if tid in seen:
            raise ValidationError(f"{at}: turn id {tid!r} again: each turn of a conversation has its own id")
        seen.add(tid)
        when = parse_time(turn["time"], f"{at}: time")
        speaker, text = _text(turn["speaker"], f"{at}: speaker"), _text(turn["text"], f"{at}: text")
        session = _id(turn["session"], at, "session") if "session" in turn else None
        out.append({"id": f"{conv}:{tid}", "namespace": conv, "content": f"{speaker}: {text}", "type": "episodic",
                    "source": tid, "created_at": when,
                    "metadata": {"turn": i + 1, "speaker": speaker,
                                 "episode": f"{conv}:{session}" if session else conv,
                                 **({"session": session} if session else {})}})
    return out


def _questions(conv: str, raw: Any, turns: set[str], where: str, seen: set[str]) -> list[tuple[tuple, list[tuple]]]:
    if not isinstance(raw, list) or not raw:
        raise ValidationError(f"{where}: questions: expected a non-empty list")
    out = []
    for i, q in enumerate(raw):
        at = f"{where} question {i + 1}"
        _keys(q, _QUESTION_KEYS, ("id", "question", "evidence"), at)
        qid = f"{conv}:{_id(q['id'], at, 'id')}"
        if qid in seen:
            raise ValidationError(f"{at}: question id {q['id']!r} again in conversation {conv!r}")
        seen.add(qid)
        evidence = q["evidence"]
        if not isinstance(evidence, list) or not evidence or not all(isinstance(e, str) for e in evidence):
            raise ValidationError(f"{at}: evidence: expected a non-empty list of turn ids, got {evidence!r}"[:300])
        stray = [e for e in evidence if e not in turns]
        if stray:
            raise ValidationError(f"{at}: evidence {stray} not a turn of conversation {conv!r}"[:300])
        category = _text(q.get("category", "question"), f"{at}: category")
        out.append(((qid, conv, _text(q["question"], f"{at}: question"), category),
                    [(qid, f"{conv}:{e}", 1) for e in dict.fromkeys(evidence)]))
    return out


def load_conversations_jsonl(path: str | Path) -> EvalDataset:
    """The file as an evaluation dataset named by its stem, every line checked (errors name the line)."""
    p = Path(path)
    memories: list[dict[str, Any]] = []
    questions: list[tuple] = []
    qrels: list[tuple] = []
    now: dict[str, str] = {}
    seen_convs: dict[str, int] = {}
    seen_q: set[str] = set()
    with open(p, "rb") as f:
        for n, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            where = f"{p}: line {n}"
            if len(line) > MAX_LINE_BYTES:
                raise ValidationError(f"{where}: longer than {MAX_LINE_BYTES} bytes")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except UnicodeDecodeError as exc:
                raise ValidationError(f"{where}: not UTF-8 text (byte {exc.start})") from None
            except json.JSONDecodeError as exc:
                raise ValidationError(f"{where}: not JSON ({exc.msg} at column {exc.colno})") from None
            except RecursionError:
                raise ValidationError(f"{where}: nested deeper than a JSON reader follows") from None
            _keys(record, _LINE_KEYS, ("conversation", "turns", "questions"), where)
            conv = _id(record["conversation"], where, "conversation")
            if conv in seen_convs:
                raise ValidationError(f"{where}: conversation {conv!r} again (line {seen_convs[conv]} has it): one "
                                      "line per conversation")
            seen_convs[conv] = n
            turns = _turns(conv, record["turns"], f"{where} ({conv})")
            memories.extend(turns)
            latest = max(t["created_at"] for t in turns)
            when = parse_time(record["now"], f"{where}: now") if "now" in record else latest
            now[conv] = when.isoformat().replace("+00:00", "Z")
            for question, gold in _questions(conv, record["questions"], {t["source"] for t in turns},
                                             f"{where} ({conv})", seen_q):
                questions.append(question)
                qrels.extend(gold)
    if not seen_convs:
        raise ValidationError(f"{p}: no conversation in the file (one JSON object a line)")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", p.stem) or "conversations"
    return EvalDataset(name=name, memories=memories, source=str(p.resolve()),
                       questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
                       qrels=pl.DataFrame(qrels, schema=QRELS_SCHEMA, orient="row"),
                       reference_times=now, report={"format": "conversations jsonl", "conversations": len(seen_convs)})
