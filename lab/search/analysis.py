"""Rule-based, deterministic query analysis: intent, temporal expressions, named entities."""
from __future__ import annotations

import calendar
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

INTENTS = ("factual", "procedural", "conversational", "exploratory", "temporal")

MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name})
MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))

_PROCEDURAL = re.compile(r"^(how (do|can|should|to|would)|what are the steps|steps to|guide|procedure)\b|\bhow to\b", re.I)
_CONVERSATIONAL = re.compile(r"^(hi|hello|hey|thanks|thank you|good (morning|night|evening)|how are you)\b", re.I)
_EXPLORATORY = re.compile(r"^(tell me about|what do (you|we) know|explore|overview|summari[sz]e|what else|ideas?)\b", re.I)
_TEMPORAL = re.compile(
    r"^(when|what (date|day|time|year|month))\b|\b(how long ago|since when|what time|latest|most recent|recently)\b",
    re.I,
)
# a question whose answer is a time: its evidence is a memory that can be dated
_ASKS_TIME = re.compile(
    r"^\s*(when|what (date|day|time|year|month|week)|which (day|date|year|month|week))\b|\bhow long ago\b|"
    r"\bsince when\b|\bwhat time\b", re.I)
_RECENCY_WORDS = re.compile(r"\b(latest|most recent|recently|current(ly)?|now|newest|last time)\b", re.I)
_CODE = re.compile(r"(?:\b[A-Z][A-Z0-9]*[-_]?\d+[A-Z0-9-]*\b|#\d{3,}\b)")
_QUOTED = re.compile(r"[\"“]([^\"”]{2,60})[\"”]")
_CAPITALISED = re.compile(r"\b([A-Z][a-zA-Z'’]+(?:\s+[A-Z][a-zA-Z'’]+)*)")
_STOP_CAPS = {
    "I", "The", "A", "An", "What", "When", "Where", "Who", "Whom", "Why", "How", "Which", "Did", "Does", "Do",
    "Is", "Are", "Was", "Were", "Has", "Have", "Had", "Can", "Could", "Would", "Should", "Will", "In", "On",
    "At", "Of", "For", "And", "Or", "But", "If", "Tell", "Me", "My", "Our", "We", "You", "Your", "It", "This",
    "That", "These", "Those", "Last", "Next", "Yesterday", "Today", "Tomorrow", "Please", "Any", "Some",
}


@dataclass(frozen=True)
class TimeWindow:
    start: datetime  # inclusive
    end: datetime  # exclusive
    expression: str


@dataclass(frozen=True)
class QueryAnalysis:
    intent: str
    window: TimeWindow | None = None
    wants_recent: bool = False
    entities: tuple[str, ...] = field(default_factory=tuple)
    asks_time: bool = False  # "when ...?": the answer is a time, so dated memories are the evidence


def _day(ref: datetime) -> datetime:
    return ref.replace(hour=0, minute=0, second=0, microsecond=0)


def _month_window(year: int, month: int) -> tuple[datetime, datetime]:
    start = datetime(year, month, 1, tzinfo=timezone.utc)
    end = datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=timezone.utc)
    return start, end


def temporal_window(query: str, reference: datetime) -> TimeWindow | None:
    """The time window a query names, relative to ``reference`` (the dataset's now), if any."""
    q = query.lower()
    today = _day(reference)
    m = re.search(r"\b(\d{4})-(\d{2})-(\d{2})\b", q)
    if m:
        start = datetime(int(m[1]), int(m[2]), int(m[3]), tzinfo=timezone.utc)
        return TimeWindow(start, start + timedelta(days=1), m[0])
    m = re.search(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+({MONTH_RE})\.?,?\s+(\d{{4}})\b", q) or re.search(
        rf"\b({MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", q
    )
    if m:
        groups = m.groups()
        day, month = (groups[0], groups[1]) if groups[0].isdigit() else (groups[1], groups[0])
        start = datetime(int(groups[2]), MONTHS[month], int(day), tzinfo=timezone.utc)
        return TimeWindow(start, start + timedelta(days=1), m[0])
    m = re.search(rf"\b({MONTH_RE})\.?,?\s+(\d{{4}})\b", q)
    if m:
        return TimeWindow(*_month_window(int(m[2]), MONTHS[m[1]]), m[0])
    m = re.search(r"\b(?:in|during|of)\s+(\d{4})\b", q)
    if m:
        year = int(m[1])
        return TimeWindow(datetime(year, 1, 1, tzinfo=timezone.utc), datetime(year + 1, 1, 1, tzinfo=timezone.utc), m[0])
    m = re.search(rf"\b(?:in|during|last)\s+({MONTH_RE})\b", q)
    if m:
        month = MONTHS[m[1]]
        year = reference.year if month <= reference.month else reference.year - 1
        return TimeWindow(*_month_window(year, month), m[0])
    rules = [
        (r"\btoday\b", lambda: (today, today + timedelta(days=1))),
        (r"\byesterday\b", lambda: (today - timedelta(days=1), today)),
        (r"\bthis week\b", lambda: (today - timedelta(days=today.weekday()), today + timedelta(days=1))),
        (r"\blast week\b", lambda: (today - timedelta(days=today.weekday() + 7), today - timedelta(days=today.weekday()))),
        (r"\bthis month\b", lambda: (today.replace(day=1), today + timedelta(days=1))),
        (r"\blast month\b", lambda: _month_window(*((today.year, today.month - 1) if today.month > 1 else (today.year - 1, 12)))),
        (r"\bthis year\b", lambda: (datetime(today.year, 1, 1, tzinfo=timezone.utc), today + timedelta(days=1))),
        (r"\blast year\b", lambda: (datetime(today.year - 1, 1, 1, tzinfo=timezone.utc), datetime(today.year, 1, 1, tzinfo=timezone.utc))),
    ]
    for pattern, window in rules:
        m = re.search(pattern, q)
        if m:
            return TimeWindow(*window(), m[0])
    m = re.search(r"\b(\d+|a|one|two|three|four|five|six|seven)\s+(day|week|month)s?\s+ago\b", q)
    if m:
        words = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
        n = int(m[1]) if m[1].isdigit() else words[m[1]]
        unit = {"day": 1, "week": 7, "month": 30}[m[2]]
        center = today - timedelta(days=n * unit)
        half = timedelta(days=max(1, unit // 2))
        return TimeWindow(center - half, center + half + timedelta(days=1), m[0])
    m = re.search(r"\b(?:in the )?(?:last|past)\s+(\d+)\s+(day|week|month)s?\b", q)
    if m:
        unit = {"day": 1, "week": 7, "month": 30}[m[2]]
        return TimeWindow(today - timedelta(days=int(m[1]) * unit), today + timedelta(days=1), m[0])
    return None


def entities(query: str) -> tuple[str, ...]:
    """Codes (ERR-4471, OPS-2291, #3318), quoted phrases and capitalised names, in query order."""
    found: list[str] = []
    taken: list[tuple[int, int]] = []
    for m in _CODE.finditer(query):
        found.append(m.group(0))
        taken.append(m.span())
    for m in _QUOTED.finditer(query):
        found.append(m.group(1))
    for m in _CAPITALISED.finditer(query):
        if any(a <= m.start() < b for a, b in taken):
            continue  # the letters of a code, e.g. ERR in ERR-4471
        words = [w for w in m.group(1).split() if w not in _STOP_CAPS]
        if words and not any(w.lower() in MONTHS for w in words):
            found.append(re.sub(r"['’]s?$", "", " ".join(words)))
    seen: dict[str, None] = {}
    for e in found:
        if len(e) >= 2 and e.lower() not in (s.lower() for s in seen):
            seen[e] = None
    return tuple(seen)


def intent(query: str, window: TimeWindow | None) -> str:
    q = query.strip()
    if _CONVERSATIONAL.search(q) and len(q.split()) <= 6:
        return "conversational"
    if _PROCEDURAL.search(q):
        return "procedural"
    if _TEMPORAL.search(q) or window is not None:
        return "temporal"
    if _EXPLORATORY.search(q):
        return "exploratory"
    return "factual"


def analyze(query: str, reference: datetime) -> QueryAnalysis:
    window = temporal_window(query, reference)
    return QueryAnalysis(
        intent=intent(query, window),
        window=window,
        wants_recent=bool(_RECENCY_WORDS.search(query)),
        entities=entities(query),
        asks_time=bool(_ASKS_TIME.search(query)),
    )


# How each intent scales the signal weights when intent gating is on (LMA-style gating):
# temporal questions lean on time, exploratory ones on the graph, conversational ones on recency.
INTENT_WEIGHT_SCALES: dict[str, dict[str, float]] = {
    "factual": {},
    "procedural": {"lexical": 1.2},
    "conversational": {"recency": 2.0},
    "exploratory": {"graph": 2.0, "vector": 1.2},
    "temporal": {"temporal": 1.5, "recency": 1.5},
}
