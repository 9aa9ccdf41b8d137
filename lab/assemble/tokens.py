"""Token counters: exact (the embedding model's own tokenizer) and a fast estimator.

The estimator takes the larger of characters / 4 and words x 1.5: prose lands near the real
WordPiece count, and text with long rare words or symbols (codes, URLs, CJK runs) is not
underestimated by the word rule alone.
"""
from __future__ import annotations

import re
from typing import Protocol, Sequence

import numpy as np

from lab.embed.st import HFTokenizer, model_dir
from lab.errors import ValidationError

_WORD = re.compile(r"\S+")


class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...

    def count_many(self, texts: Sequence[str]) -> list[int]: ...

    def truncate(self, text: str, max_tokens: int) -> str: ...


def _n_words(text: str) -> int:
    """``len(text.split())``. Printable text (no whitespace but the ASCII space) with single spaces
    and no space at either end has exactly one more word than spaces: counting them is a few C
    scans that allocate nothing, cheaper than a memo lookup, so nothing is memoised."""
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text.count(" ") + 1 if text else 0
    return len(text.split())


class EstimateCounter:
    """max(ceil(chars / 4), ceil(words * 1.5)); no tokenizer, microseconds per item."""
    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        return max(-(-len(text) // 4), -(-3 * _n_words(text) // 2))

    def bounds(self, chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Lower and upper bounds of the count of texts of ``chars`` characters, without reading
        them: at least chars / 4; at most as if every other character started a word."""
        low = -(-chars // 4)
        return low, np.maximum(low, -(-3 * ((chars + 1) // 2) // 2))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        # integer ceilings inline: this runs for every candidate of every assembly
        words = _n_words
        return [max(-(-len(t) // 4), -(-3 * words(t) // 2)) for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        return _truncate_by_words(self, text, max_tokens)


class ExactCounter:
    """Word pieces of the embedding model's tokenizer (no special tokens, no truncation)."""
    name = "exact"

    def __init__(self, tokenizer=None) -> None:
        if tokenizer is None:
            tokenizer = HFTokenizer(model_dir())
        self._tok = tokenizer
        self._memo: dict[str, int] = {}  # re-assembling the same candidates must not re-tokenize

    def count(self, text: str) -> int:
        return self.count_many([text])[0] if text else 0

    def count_many(self, texts: Sequence[str]) -> list[int]:
        memo = self._memo
        todo = [t for t in dict.fromkeys(texts) if t not in memo]
        if todo:
            if len(memo) > 200_000:
                memo.clear()
            counts = self._tok.count_many(todo) if hasattr(self._tok, "count_many") else [self._tok.count(t) for t in todo]
            memo.update(zip(todo, counts))
        return [memo[t] if t else 0 for t in texts]

    def truncate(self, text: str, max_tokens: int) -> str:
        spans = self._tok.spans(text) if hasattr(self._tok, "spans") else None
        if spans is None:
            return _truncate_by_words(self, text, max_tokens)
        if len(spans) <= max_tokens:
            return text
        if max_tokens <= 0:
            return ""
        # cut after the last whole token that fits; a word split mid-way is still within budget
        return text[: spans[max_tokens - 1][1]].rstrip()


def _truncate_by_words(counter: TokenCounter, text: str, max_tokens: int) -> str:
    """The longest whole-word prefix whose count is <= max_tokens (binary search on word ends)."""
    if counter.count(text) <= max_tokens:
        return text
    ends = [m.end() for m in _WORD.finditer(text)]
    lo, hi = 0, len(ends)  # invariant: prefix of `lo` words fits, of `hi` words does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if counter.count(text[: ends[mid - 1]]) <= max_tokens:
            lo = mid
        else:
            hi = mid
    if lo == 0:
        # not even one word fits: cut the first word by characters (estimator: 4 chars a token)
        cut = text[: max(0, max_tokens * 4)]
        while cut and counter.count(cut) > max_tokens:
            cut = cut[:-1]
        return cut
    return text[: ends[lo - 1]]


COUNTERS = ("estimate", "exact")


def make_counter(name: str, tokenizer=None) -> TokenCounter:
    """A counter by name; ``exact`` uses ``tokenizer`` or loads the bundled model's tokenizer."""
    if name == "estimate":
        return EstimateCounter()
    if name == "exact":
        return ExactCounter(tokenizer)
    raise ValidationError(f"unknown token counter {name!r}; known: {list(COUNTERS)}")
