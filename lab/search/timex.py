"""Time expressions in memory text, resolved against the memory's own time.

What any conversation has: each turn's session date (``created_at``) and the relative expressions
its speakers use ("yesterday", "last Tuesday", "two weeks ago"). A memory that holds one is
*dated evidence*: it can answer "when?". Its *event time* is the expression resolved against the
memory's own created_at ("I went yesterday", said on 8 May, happened on 7 May); a memory without
one happened when it was said. Nothing here depends on a dataset's wording beyond English time
words.
"""
from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Callable

import numpy as np
import polars as pl

from lab.search.analysis import MONTH_RE

WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_DAYS = "|".join(WEEKDAYS)
_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "few": 3, "couple of": 2, "a couple of": 2, "a few": 3}
_NUMBER = r"(\d+|a couple of|couple of|a few|few|an|a|one|two|three|four|five|six|seven|eight|nine|ten)"
_UNIT_DAYS = {"day": 1, "week": 7, "weekend": 7, "month": 30, "year": 365}

# one pattern for "does this text hold a time expression" (lower-cased text; polars' regex syntax)
TIME_EXPRESSION = (
    rf"\b(yesterday|today|tonight|tomorrow|this (morning|afternoon|evening|week|weekend|month|year|"
    rf"summer|spring|fall|autumn|winter)|last (night|week|weekend|month|year|summer|spring|fall|autumn|winter|"
    rf"{_DAYS})|next (week|weekend|month|year|{_DAYS})|(on|this|last|next) ({_DAYS})|"
    rf"{_NUMBER} (days?|weeks?|weekends?|months?|years?) (ago|before|earlier|later)|"
    rf"(in|since|during) ({MONTH_RE})|({MONTH_RE}) \d{{1,2}}|\d{{1,2}}(st|nd|rd|th)? ({MONTH_RE})|"
    rf"(in|since) (19|20)\d\d|recently|the other day)\b"
)


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS.get(word, 1)


def _past_weekday(weekday: str, said: datetime) -> int:
    """Days back from ``said`` to the latest such weekday before it."""
    return -(((said.weekday() - WEEKDAYS.index(weekday)) % 7) or 7)


def _next_weekday(weekday: str, said: datetime) -> int:
    """Days on from ``said`` to the next such weekday after it."""
    return ((WEEKDAYS.index(weekday) - said.weekday()) % 7) or 7


Rule = Callable[[re.Match, datetime], int]


def _fixed(days: int) -> Rule:
    return lambda m, said: days


# (pattern, days from when the memory was said to its event): the first that matches resolves it
_RELATIVE: tuple[tuple[re.Pattern, Rule], ...] = (
    (re.compile(r"\byesterday\b|\blast night\b"), _fixed(-1)),
    (re.compile(r"\btomorrow\b"), _fixed(1)),
    (re.compile(rf"\b{_NUMBER} (day|week|weekend|month|year)s? (ago|before|earlier)\b"),
     lambda m, said: -_count(m[1]) * _UNIT_DAYS[m[2]]),
    (re.compile(rf"\b{_NUMBER} (day|week|weekend|month|year)s? later\b"),
     lambda m, said: _count(m[1]) * _UNIT_DAYS[m[2]]),
    (re.compile(r"\blast (week|weekend)\b"), _fixed(-7)),
    (re.compile(r"\blast month\b"), _fixed(-30)),
    (re.compile(r"\blast year\b"), _fixed(-365)),
    (re.compile(r"\bnext (week|weekend)\b"), _fixed(7)),
    (re.compile(r"\bnext month\b"), _fixed(30)),
    (re.compile(rf"\b(?:last|on) ({_DAYS})\b"), lambda m, said: _past_weekday(m[1], said)),  # "on Friday I ran"
    (re.compile(rf"\b(?:next|this) ({_DAYS})\b"), lambda m, said: _next_weekday(m[1], said)),
)


# any of the relative expressions above, in polars' regex syntax: the rows none of them matches
# skip the Python loop (at a million memories a tenth are dated, and the loop over all of them took
# five seconds, paid by the first temporal search)
ANY_RELATIVE = "|".join(f"(?:{pattern.pattern})" for pattern, _ in _RELATIVE)


def offset_days(text: str, said: datetime) -> int | None:
    """Days from when ``text`` was said to the event it dates (None: it names no relative time)."""
    low = text.lower()
    for pattern, rule in _RELATIVE:
        m = pattern.search(low)
        if m is not None:
            return rule(m, said)
    return None


def dated(text_lower: pl.Series) -> np.ndarray:
    """Per memory: whether its (lower-cased) text holds a time expression."""
    if text_lower.len() == 0:
        return np.zeros(0, dtype=bool)
    return text_lower.str.contains(TIME_EXPRESSION).fill_null(False).to_numpy().astype(bool)


def event_seconds(text_lower: pl.Series, created_s: np.ndarray, is_dated: np.ndarray) -> np.ndarray:
    """Per memory: the epoch seconds of the event it tells of (its own time unless a relative
    expression moves it)."""
    out = np.asarray(created_s, dtype=np.float64).copy()
    at = np.flatnonzero(is_dated)
    if len(at):
        relative = text_lower.gather(at).str.contains(ANY_RELATIVE).fill_null(False).to_numpy().astype(bool)
        at = at[relative]
        texts = text_lower.gather(at).to_list()
        for p, text in zip(at.tolist(), texts):
            said = datetime.fromtimestamp(float(created_s[p]), tz=timezone.utc)
            days = offset_days(text or "", said)
            if days:
                out[p] = (said + timedelta(days=days)).timestamp()
    return out
