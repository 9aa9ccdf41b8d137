"""LoCoMo reader: each conversation a namespace, each dialogue turn an episodic memory."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab.errors import ValidationError

if TYPE_CHECKING:
    from lab.eval.dataset import EvalDataset

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
    if not isinstance(samples, list):
        raise ValidationError(f"{path}: expected a list of samples")
    out = []
    for sample in samples:
        sid = sample.get("sample_id")
        conv = sample.get("conversation") or {}
        if not sid or not conv:
            raise ValidationError(f"{path}: a sample lacks sample_id or conversation")
        item = LocomoConversation(sid, (conv.get("speaker_a", ""), conv.get("speaker_b", "")), raw=sample)
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := SESSION_RE.match(key))
        )
        for number, key in sessions:
            when = parse_session_time(conv[f"{key}_date_time"], f"{sid} {key}")
            for i, turn in enumerate(conv[key]):
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

    from lab.eval.dataset import QRELS_SCHEMA, QUESTIONS_SCHEMA, EvalDataset

    convs = load_conversations(path)
    memories: list[dict[str, Any]] = []
    edges: list[dict[str, Any]] = []
    credit: dict[str, str] = {}
    questions, qrels = [], []
    repaired, dropped = [], []
    for conv in convs:
        sid = conv.sample_id
        memories.extend(conv.turns)
        known = {t["source"] for t in conv.turns}
        times = {t["metadata"]["session"]: t["created_at"] for t in reversed(conv.turns)}
        if observations:
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
        if summaries:
            for key, text in sorted((conv.raw.get("session_summary") or {}).items()):
                m = re.match(r"session_(\d+)_summary", key)
                if m and isinstance(text, str) and text.strip():
                    session = int(m.group(1))
                    memories.append({
                        "id": f"{sid}:summary:S{session}", "namespace": sid, "content": text, "type": "topic",
                        "source": "session_summary", "created_at": times.get(session, conv.turns[0]["created_at"]),
                        "metadata": {"session": session, "episode": f"{sid}:S{session}"},
                    })
        for n, qa in enumerate(conv.raw.get("qa") or [], start=1):
            qid = f"{sid}:q{n}"
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
    n_questions = sum(len(c.raw.get("qa") or []) for c in convs)
    return EvalDataset(
        name="locomo", memories=memories,
        questions=pl.DataFrame(questions, schema=QUESTIONS_SCHEMA, orient="row"),
        qrels=pl.DataFrame(qrels, schema=QRELS_SCHEMA, orient="row"),
        edges=edges, credit=credit,
        report={"questions_in_file": n_questions, "evidence_repaired": repaired, "dropped": dropped,
                "options": {"observations": observations, "summaries": summaries}},
    )
