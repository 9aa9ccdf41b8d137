"""LoCoMo reader: each conversation a namespace, each dialogue turn an episodic memory."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lab.errors import ValidationError
from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset

SESSION_RE = re.compile(r"^session_(\d+)$")
# Turns of one session share its timestamp upstream; spacing them keeps their order in time.
TURN_SPACING = timedelta(seconds=30)


def parse_session_time(text: str, where: str) -> datetime:
    """'1:56 pm on 8 May, 2023' -> aware UTC datetime (LoCoMo gives no zone; UTC is assumed)."""
    cleaned = " ".join(text.replace(",", ", ").split()).replace(" ,", ",")
    for fmt in ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ValidationError(f"{where}: cannot parse session date-time {text!r}")


@dataclass
class LocomoConversation:
    sample_id: str
    speakers: tuple[str, str]
    turns: list[dict[str, Any]] = field(default_factory=list)  # memory records
    raw: dict[str, Any] = field(default_factory=dict)


def load_conversations(path: str | Path) -> list[LocomoConversation]:
    """Read ``locomo10*.json``; every dialogue turn becomes a memory record for `save_many`."""
    path = Path(path)
    if path.is_dir():
        path = path / "locomo10-dev.json"
    if not path.is_file():
        raise ValidationError(f"LoCoMo file not found: {path}")
    try:
        samples = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{path}: invalid JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path}: not UTF-8 text (byte {exc.start}), so no JSON dataset file") from None
    except RecursionError:
        raise ValidationError(f"{path}: nested deeper than a JSON reader follows, so no dataset file") from None
    if not isinstance(samples, list):
        raise ValidationError(f"{path}: expected a list of samples")
    out = []
    for n, sample in enumerate(samples, start=1):
        if not isinstance(sample, dict):
            raise ValidationError(f"{path}: sample {n} must be an object, got {type(sample).__name__}")
        sid = sample.get("sample_id")
        conv = sample.get("conversation") or {}
        if not sid or not isinstance(sid, str) or not conv:
            raise ValidationError(f"{path}: sample {n} lacks a sample_id string or a conversation")
        if not isinstance(conv, dict):
            raise ValidationError(f"{path}: sample {sid}: 'conversation' must be an object, got {type(conv).__name__}")
        if not isinstance(sample.get("qa", []), list):
            raise ValidationError(f"{path}: sample {sid}: 'qa' must be a list of questions, got {type(sample['qa']).__name__}")
        item = LocomoConversation(sid, (conv.get("speaker_a", ""), conv.get("speaker_b", "")), raw=sample)
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := SESSION_RE.match(key))
        )
        for number, key in sessions:
            where = f"{path}: sample {sid} {key}"
            if not isinstance(conv.get(f"{key}_date_time"), str):
                raise ValidationError(f"{where}: no '{key}_date_time' string, so its turns have no time")
            when = parse_session_time(conv[f"{key}_date_time"], where)
            if not isinstance(conv[key], list):
                raise ValidationError(f"{where}: expected a list of turns, got {type(conv[key]).__name__}")
            for i, turn in enumerate(conv[key]):
                if not isinstance(turn, dict):
                    raise ValidationError(f"{where} turn {i + 1}: expected an object, got {type(turn).__name__}")
                for key_ in ("text", "speaker", "dia_id"):
                    if not isinstance(turn.get(key_), str):
                        raise ValidationError(f"{where} turn {i + 1}: lacks a '{key_}' string")
                text = turn["text"]
                if turn.get("blip_caption"):
                    text = f"{text} [shares an image: {turn['blip_caption']}]"
                item.turns.append({
                    "id": f"{sid}:{turn['dia_id']}",
                    "namespace": sid,
                    "content": f"{turn['speaker']}: {text}",
                    "type": "episodic",
                    "source": turn["dia_id"],
                    "created_at": when + i * TURN_SPACING,
                    "metadata": {
                        "dia_id": turn["dia_id"], "session": number, "turn": i + 1,
                        "speaker": turn["speaker"], "episode": f"{sid}:S{number}",
                    },
                })
        out.append(item)
    return out


CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
_EVIDENCE = re.compile(r"D\s*:?\s*(\d+)\s*:\s*(\d+)")


def repair_evidence(raw: str, known: set[str]) -> tuple[list[str], str | None]:
    """Evidence ids as listed, repaired where the intent is clear: ``"D8:6; D9:17"`` -> two ids,
    ``"D:11:26"`` -> ``D11:26``. Returns (ids, None) or ([], why it was dropped)."""
    if raw in known:
        return [raw], None
    found = [f"D{a}:{b}" for a, b in _EVIDENCE.findall(raw)]
    if not found:
        return [], f"unparseable evidence id {raw!r}"
    missing = [f for f in found if f not in known]
    if missing:
        return [f for f in found if f in known], f"evidence id {raw!r}: {missing} not in the conversation"
    return found, None


def load_locomo(path: str | Path, *, observations: bool = False, summaries: bool = False) -> "EvalDataset":
    """LoCoMo as an evaluation dataset: turns as memories, questions with evidence dia_ids as gold.

    ``observations`` adds each session's observations as ``fact`` memories with a ``derived_from``
    edge to their source turn (and credit to it); ``summaries`` adds session summaries as
    ``topic`` memories. Both are off by default so their effect can be measured.
    """
    import polars as pl

    convs = load_conversations(path)
    memories: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    credit: dict[str, str] = {}
    questions: list[tuple[str, str, str, str]] = []
    qrels: list[tuple[str, str, int]] = []
    repaired: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for conv in convs:
        memories.extend(conv.turns)
        known = {t["source"] for t in conv.turns}
        times = {t["metadata"]["session"]: t["created_at"] for t in reversed(conv.turns)}
        if observations:
            _add_observations(conv, known, times, memories, edges, credit)
        if summaries:
            memories.extend(_summaries(conv, times))
        _add_questions(path, conv, known, questions, qrels, repaired, dropped)
    n_questions = sum(len(c.raw.get("qa") or []) for c in convs)
    if not questions:
        raise ValidationError(f"{path}: no usable questions ({n_questions} in the file, "
                              f"{len(dropped)} dropped for missing or unusable evidence)")
    path = Path(path)
    # the shared dev file is "locomo"; any other file is named by its stem, so its runs never
    # land in (and overwrite) the real dataset's run folders
    name = "locomo" if path.name == "locomo10-dev.json" else re.sub(r"[^A-Za-z0-9_.-]+", "-", path.stem) or "locomo-file"
    return EvalDataset(
        name=name, memories=memories, source=str(path.resolve()),
        questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
        qrels=pl.DataFrame(qrels, schema=QRELS_SCHEMA, orient="row"),
        edges=edges, credit=credit,
        report={"questions_in_file": n_questions, "evidence_repaired": repaired, "dropped": dropped,
                "options": {"observations": observations, "summaries": summaries}},
    )


def _add_observations(conv: Any, known: set[str], times: dict[int, Any], memories: list[dict[str, Any]],
                      edges: list[dict[str, Any]], credit: dict[str, str]) -> None:
    """Each session's observations as fact memories, each with derived_from edges to its source turns
    (and credited to the first)."""
    sid = conv.sample_id
    for key, by_speaker in sorted((conv.raw.get("observation") or {}).items()):
        m = re.match(r"session_(\d+)_observation", key)
        if not m or not isinstance(by_speaker, dict):
            continue
        session = int(m.group(1))
        for speaker, facts in sorted(by_speaker.items()):
            for i, fact in enumerate(facts):
                if not (isinstance(fact, list) and len(fact) == 2 and isinstance(fact[0], str)):
                    continue
                sources = [s for s in (repair_evidence(str(fact[1]), known)[0]) if s in known]
                fid = f"{sid}:obs:S{session}:{speaker}:{i + 1}"
                memories.append({
                    "id": fid, "namespace": sid, "content": fact[0], "type": "fact", "source": "observation",
                    "created_at": times.get(session, conv.turns[0]["created_at"]),
                    "metadata": {"session": session, "speaker": speaker, "derived_from": sources},
                })
                for s in sources:
                    edges.append({"src": fid, "dst": f"{sid}:{s}", "relation": "derived_from", "namespace": sid})
                if sources:
                    credit[fid] = f"{sid}:{sources[0]}"


def _summaries(conv: Any, times: dict[int, Any]) -> list[dict[str, Any]]:
    """Each session's summary as a topic memory of that session's episode."""
    sid, out = conv.sample_id, []
    for key, text in sorted((conv.raw.get("session_summary") or {}).items()):
        m = re.match(r"session_(\d+)_summary", key)
        if m and isinstance(text, str) and text.strip():
            session = int(m.group(1))
            out.append({
                "id": f"{sid}:summary:S{session}", "namespace": sid, "content": text, "type": "topic",
                "source": "session_summary", "created_at": times.get(session, conv.turns[0]["created_at"]),
                "metadata": {"session": session, "episode": f"{sid}:S{session}"},
            })
    return out


def _add_questions(path: str | Path, conv: Any, known: set[str], questions: list[tuple[str, str, str, str]],
                   qrels: list[tuple[str, str, int]], repaired: list[dict[str, Any]],
                   dropped: list[dict[str, Any]]) -> None:
    """The conversation's questions with their evidence turns as gold; evidence ids that can be
    repaired are (and reported), a question left without usable evidence is dropped (and reported)."""
    sid = conv.sample_id
    for n, qa in enumerate(conv.raw.get("qa") or [], start=1):
        qid = f"{sid}:q{n}"
        if not isinstance(qa, dict) or not isinstance(qa.get("question"), str):
            raise ValidationError(f"{path}: sample {sid} question {n}: expected an object with a 'question' string")
        if not isinstance(qa.get("evidence") or [], list):
            raise ValidationError(f"{path}: sample {sid} question {n}: 'evidence' must be a list of dia_ids")
        gold: list[str] = []
        for raw in qa.get("evidence") or []:
            ids, why = repair_evidence(str(raw), known)
            if why:
                dropped.append({"qid": qid, "evidence": raw, "reason": why})
            elif ids != [raw]:
                repaired.append({"qid": qid, "evidence": raw, "as": ids})
            gold.extend(i for i in ids if i not in gold)
        if not gold:
            dropped.append({"qid": qid, "evidence": qa.get("evidence"), "reason": "question without usable evidence"})
            continue
        questions.append((qid, sid, str(qa["question"]), CATEGORIES.get(qa.get("category"), str(qa.get("category")))))
        qrels.extend((qid, f"{sid}:{g}", 1) for g in gold)
