"""LoCoMo reader: each conversation a namespace, each dialogue turn an episodic memory."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from lab.errors import ValidationError

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
