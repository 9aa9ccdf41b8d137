"""A LongMemEval question's retrieval corpus as LongMemEval's own retrieval code builds it.

Granularity ``turn``: one item per turn of the chosen roles (``user``: the user turns, the official
corpus; ``all``: every turn), with corpus id ``<session id>_<turn number from 1>`` (the number
counts every turn of the session, so ids stay put around skipped ones). Granularity ``session``:
one item per session, its chosen turns' texts joined by one space, with the session id as its
corpus id. Inside a session whose id contains ``answer`` (the official answer sessions), an item
holding no evidence (``has_answer``) has ``answer`` renamed ``noans`` in its id; the gold of a
question is then every corpus id that still contains ``answer``, which is how the official code
finds it. The item's timestamp is its session's date as the file writes it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lab.errors import ValidationError

GRANULARITIES = ("turn", "session")
CORPORA = ("user", "all")


@dataclass(frozen=True)
class Item:
    corpus_id: str  # as the official code names it
    text: str
    timestamp: str  # the session's date, as written in the file
    session: str  # the haystack's session id
    turn: int | None  # the turn's position in its session (from 0); None at session granularity
    role: str | None
    evidence: bool  # holds a has_answer turn of the corpus
    repeat: int = 0  # the session's earlier appearances in this haystack (a haystack may repeat one)


def check_protocol(granularity: str, corpus: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValidationError(f"granularity must be one of {', '.join(GRANULARITIES)}, got {granularity!r}",
                              field="granularity")
    if corpus not in CORPORA:
        raise ValidationError(f"corpus must be one of {', '.join(CORPORA)} (user: the user turns, the official "
                              f"corpus; all: every turn), got {corpus!r}", field="corpus")


def _renamed(cid: str, session: str, evidence: bool) -> str:
    return cid.replace("answer", "noans") if "answer" in session and not evidence else cid


def corpus_items(question: dict[str, Any], granularity: str = "turn", corpus: str = "user") -> list[Item]:
    """Every corpus item of ``question`` (a checked question of the official format), in the
    haystack's order; empty texts included, as the official corpus holds them."""
    items: list[Item] = []
    times: dict[str, int] = {}
    for sid, date, turns in zip(question["haystack_session_ids"], question["haystack_dates"],
                                question["haystack_sessions"]):
        sid = str(sid)
        times[sid] = repeat = times.get(sid, -1) + 1
        chosen = [(t, turn) for t, turn in enumerate(turns) if corpus == "all" or turn.get("role") == "user"]
        if granularity == "session":
            evidence = any(turn.get("has_answer") is True for _, turn in chosen)
            items.append(Item(_renamed(sid, sid, evidence), " ".join(turn["content"] for _, turn in chosen),
                              str(date), sid, None, None, evidence, repeat))
            continue
        for t, turn in chosen:
            evidence = turn.get("has_answer") is True
            items.append(Item(_renamed(f"{sid}_{t + 1}", sid, evidence), turn["content"], str(date), sid, t,
                              turn.get("role"), evidence, repeat))
    return items


def gold_ids(corpus_ids: list[str]) -> list[str]:
    """The official gold: every corpus id that contains ``answer``."""
    return sorted({c for c in corpus_ids if "answer" in c})


def has_target(question: dict[str, Any], corpus: str = "user") -> bool:
    """Whether the official scoring keeps the question: some turn of the corpus's roles (the user's,
    for the official corpus) is marked ``has_answer``; the others are left out of the means."""
    return any(turn.get("has_answer") is True for turns in question["haystack_sessions"] for turn in turns
               if corpus == "all" or turn.get("role") == "user")


def gold_problems(question: dict[str, Any]) -> list[str]:
    """What in ``question``'s gold does not agree with its haystack, each said naming the sessions:
    an answer session missing from the haystack, evidence outside the answer sessions, an answer
    session whose id the official scoring cannot recognise (it finds gold by ``answer`` in ids)."""
    haystack = [str(s) for s in question["haystack_session_ids"]]
    answers = [str(s) for s in question["answer_session_ids"]]
    problems = []
    missing = [s for s in answers if s not in set(haystack)]
    if missing:
        problems.append(f"answer session(s) {missing} not in the haystack")
    outside = sorted({sid for sid, turns in zip(haystack, question["haystack_sessions"])
                      if sid not in set(answers) and any(t.get("has_answer") is True for t in turns)})
    if outside:
        problems.append(f"evidence turns (has_answer) in session(s) {outside}, which are not answer sessions")
    unnamed = [s for s in answers if s in set(haystack) and "answer" not in s]
    if unnamed:
        problems.append(f"answer session(s) {unnamed} have no 'answer' in their id, so the official scoring "
                        "cannot see them as gold")
    return problems
