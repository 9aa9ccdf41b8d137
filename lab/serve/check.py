"""Before a write: which stored memories a new text repeats or may contradict (MIE's check).

An agent about to save "Alice moved to Berlin" should learn that "Alice lives in Paris" is
stored, so it can update that memory instead of adding a second, conflicting one. The nearest
memories come from the served search; this module judges each against the new text:

- *duplicate*: the same content, stored already (the store would not save it twice);
- *possible contradiction*: about the same thing (at least half of the shorter text's content
  words shared) yet differing in a detail that usually carries the fact: a number, a negation,
  or a capitalised name; or a memory already linked to one of them by a ``contradicts`` edge;
- *related*: anything else the search found.

The judgement is lexical and deliberately simple: it says *possible* and shows the differing
words, so the agent (or a person) decides.
"""
from __future__ import annotations

import re
from typing import Any

_WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*|\d+(?:[.,:/]\d+)*")
NEGATIONS = frozenset({"no", "not", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "without",
                       "don't", "doesn't", "didn't", "isn't", "wasn't", "aren't", "weren't", "won't", "can't",
                       "hasn't", "haven't", "hadn't", "shouldn't", "wouldn't", "couldn't", "no longer"})
STOPWORDS = frozenset("""a an the and or but if of to in on at by for with from as is are was were be been being
it its this that these those i you he she we they me him her us them my your his our their do does did has have
had will would can could should may might must shall so than then there here what which who whom when where why
how all any some just also very into about over after before up down out off again more most such only own same
too s t""".split())
SAME_SUBJECT = 0.5  # share of the shorter text's content words the two must have in common


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def content_terms(text: str) -> set[str]:
    return {w.lower() for w in words(text) if w.lower() not in STOPWORDS and w.lower() not in NEGATIONS}


def details(text: str) -> dict[str, set[str]]:
    """The words that usually carry a fact's value: numbers, negations, capitalised names (a
    word opening a sentence is not taken for a name)."""
    numbers, negations, names = set(), set(), set()
    for match in _WORD.finditer(text):
        w, before = match.group(), text[:match.start()].rstrip()
        if w[0].isdigit():
            numbers.add(w)
        elif w.lower() in NEGATIONS:
            negations.add(w.lower())
        elif w[0].isupper() and before and before[-1] not in ".!?:;\"'" and w.lower() not in STOPWORDS:
            names.add(w.lower())
    return {"numbers": numbers, "negations": negations, "names": names}


def overlap(a: str, b: str) -> float:
    """Shared content words over the shorter text's content words (0 when either has none)."""
    ta, tb = content_terms(a), content_terms(b)
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / min(len(ta), len(tb))


def judge(new: str, stored: str) -> tuple[str, dict[str, list[str]]]:
    """("duplicate" | "contradiction" | "related", the differing detail words by kind)."""
    if new.strip() == stored.strip():
        return "duplicate", {}
    if overlap(new, stored) < SAME_SUBJECT:
        return "related", {}
    mine, theirs = details(new), details(stored)
    differ = {kind: sorted(mine[kind] ^ theirs[kind]) for kind in mine if mine[kind] ^ theirs[kind]}
    return ("contradiction" if differ else "related"), differ


def assess(new: str, hits: list[dict[str, Any]]) -> dict[str, Any]:
    """The check's answer for ``new`` given the served search's hits for it (``SearchHit.to_dict``)."""
    nearest, contradictions, duplicate = [], [], None
    linked = {c for h in hits for c in (h.get("contradicts") or [])}
    for hit in hits:
        verdict, differ = judge(new, hit["content"])
        if verdict == "related" and hit["memory_id"] in linked:
            verdict = "contradiction"
        entry = {"memory_id": hit["memory_id"], "rank": hit["rank"], "score": hit["score"], "content": hit["content"],
                 "verdict": verdict, "overlap": round(overlap(new, hit["content"]), 3)}
        if differ:
            entry["differs_in"] = differ
        nearest.append(entry)
        if verdict == "duplicate" and duplicate is None:
            duplicate = hit["memory_id"]
        elif verdict == "contradiction":
            contradictions.append(entry)
    if duplicate:
        advice = f"already stored as {duplicate}: do not save it again"
    elif contradictions:
        first = contradictions[0]["memory_id"]
        advice = (f"{len(contradictions)} stored memor{'y' if len(contradictions) == 1 else 'ies'} may contradict it: "
                  f"update {first} (memory_update) or save it and link them (memory_link relation contradicts "
                  "or supersedes)")
    else:
        advice = "nothing stored says otherwise: save it"
    return {"duplicate_of": duplicate, "possible_contradictions": contradictions, "nearest": nearest,
            "advice": advice}
