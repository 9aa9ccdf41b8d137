"""Near-duplicate detection for assembly: word-trigram shingles, Jaccard, prefix filtering.

Two texts are near-duplicates when the Jaccard similarity of their sets of word trigrams is at or
above a threshold. Words are the runs of letters and digits of the case-folded text (punctuation
ignored); a text of fewer than three words has one shingle, its whole word sequence. Shingles are
48-bit hashes of the trigrams (a collision between two distinct trigrams has odds of about 2^-48).

Signatures are computed for many texts at once: one string join, one byte translation, one split
and a few numpy passes serve every text of the batch. That matters because a new query brings
texts never seen before, and shingling them one by one in Python costs several times more.
Signatures are memoised per text, since sweeps and sliders re-assemble the same candidates.
"""
from __future__ import annotations

import re
import threading
from typing import Iterator, Sequence

import numpy as np

_WORDS = re.compile(r"[^\W_]+")
# Every ASCII byte that is not a letter, a digit or NUL becomes a space: after this translation a
# word is a run of bytes above the space (letters, digits, UTF-8 bytes of regex-tokenised Unicode
# words), and NUL separates the texts of a batch.
_ASCII_BREAKS = bytes(b for b in range(1, 128) if not chr(b).isalnum())
_FOLD = bytes.maketrans(_ASCII_BREAKS, b" " * len(_ASCII_BREAKS))
_BITS = 48
_MASK = (1 << _BITS) - 1
_M64 = (1 << 64) - 1
# fixed odd multipliers: hashes are the same in every process (Python's str hash is salted)
_rng = np.random.default_rng(20261122)
_POS = _rng.integers(1, 1 << 63, 64, dtype=np.uint64) | np.uint64(1)  # per byte position in a word
_MIX = [int(x) | 1 for x in _rng.integers(1, 1 << 63, 6, dtype=np.uint64)]
_MIX_U = [np.uint64(x) for x in _MIX]
_MAX_BATCH = (1 << (64 - _BITS)) - 1  # texts per batch: the text index lives in the top 16 bits


class Signature:
    """A text's shingles (sorted, distinct) and its prefix for one threshold (see ``Deduper``)."""

    __slots__ = ("_pool", "_start", "_end", "prefix", "_set")

    def __init__(self, pool: np.ndarray, start: int, end: int, prefix: tuple[int, ...]) -> None:
        self._pool, self._start, self._end, self.prefix = pool, start, end, prefix
        self._set: frozenset | None = None

    @property
    def shingles(self) -> np.ndarray:
        return self._pool[self._start:self._end]

    def __len__(self) -> int:
        return self._end - self._start

    def as_set(self) -> frozenset:
        if self._set is None:  # built on first exact check, then kept (a Python set intersects fastest)
            self._set = frozenset(self.shingles.tolist())
        return self._set

    def jaccard(self, other: "Signature") -> float:
        inter = len(self.as_set() & other.as_set())
        return inter / (len(self) + len(other) - inter)


class SignatureMemo:
    """Signatures by (text, threshold), at most ``limit`` of them (emptied when full). Safe to share
    between threads: a server's assembly threads use one; a lookup never depends on an entry
    staying in it (another thread may empty it at any moment)."""

    def __init__(self, limit: int = 65536) -> None:
        self.limit = limit
        self._map: dict[tuple[str, float], Signature] = {}
        self._lock = threading.Lock()

    def get_many(self, texts: Sequence[str], threshold: float) -> list[Signature | None]:
        with self._lock:
            return [self._map.get((t, threshold)) for t in texts]

    def put_many(self, threshold: float, fresh: dict[str, Signature]) -> None:
        with self._lock:
            if len(self._map) + len(fresh) > self.limit:
                self._map.clear()
            self._map.update(((t, threshold), sig) for t, sig in fresh.items())

    def clear(self) -> None:
        with self._lock:
            self._map.clear()


MEMO = SignatureMemo()  # the process's: signatures depend on the text alone, so any caller may share them


def clear_memo() -> None:
    MEMO.clear()


def signatures(texts: Sequence[str], threshold: float, memo: SignatureMemo | None = None) -> list[Signature]:
    """Signatures of ``texts`` for ``threshold``, from the memo or computed in one batch."""
    memo = MEMO if memo is None else memo
    out = memo.get_many(texts, threshold)
    todo = [i for i, s in enumerate(out) if s is None]
    if todo:
        fresh: dict[str, Signature] = {}
        distinct = list(dict.fromkeys(texts[i] for i in todo))  # each distinct text once
        for lo in range(0, len(distinct), _MAX_BATCH):
            part = distinct[lo:lo + _MAX_BATCH]
            fresh.update(zip(part, _batch(part, threshold)))
        memo.put_many(threshold, fresh)
        for i in todo:
            out[i] = fresh[texts[i]]
    return out  # type: ignore[return-value]


def _words(text: str) -> list[bytes]:
    low = text.lower()
    if not low.isascii():
        low = " ".join(_WORDS.findall(low))
    return low.replace("\x00", " ").encode().translate(_FOLD).split()


def _word_hash(word: bytes) -> int:
    h = sum(byte * int(_POS[i & 63]) for i, byte in enumerate(word))
    return (h + len(word) * _MIX[0]) & _M64


def _short_hash(hashes: Sequence[int]) -> int:
    """The one shingle of a text of fewer than three words."""
    h = _MIX[3 + len(hashes)]
    for i, w in enumerate(hashes):
        h += w * _MIX[1 + i]
    return (h & _M64) >> (64 - _BITS)


def shingle_set(text: str) -> set[int]:
    """The shingles of one text, computed plainly: the reference the batch path is tested against."""
    hs = [_word_hash(w) for w in _words(text)]
    if len(hs) < 3:
        return {_short_hash(hs)}
    return {((a * _MIX[0] + b * _MIX[1] + c * _MIX[2]) & _M64) >> (64 - _BITS) for a, b, c in zip(hs, hs[1:], hs[2:])}


def _batch(texts: list[str], threshold: float) -> list[Signature]:
    n_texts = len(texts)
    if any("\x00" in t for t in texts):  # NUL separates the texts here; inside one it is a word break
        texts = [t.replace("\x00", " ") for t in texts]
    joined = "\x00".join(texts).lower()
    if not joined.isascii():
        # Unicode text: its words by the regex, re-joined by spaces (they hold no ASCII punctuation,
        # so the byte translation leaves them whole)
        joined = "\x00".join(t if t.isascii() else " ".join(_WORDS.findall(t)) for t in joined.split("\x00"))
    b = np.frombuffer(joined.encode().translate(_FOLD), dtype=np.uint8)
    n = b.size
    is_word = b > 32
    edge = np.diff(is_word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edge == 1)
    ends = np.flatnonzero(edge == -1)
    # word hash: sum of byte * weight(position in word), plus length * a constant (mod 2^64)
    first = np.zeros(n, dtype=np.int64)
    first[starts] = starts
    rel = (np.arange(n) - np.maximum.accumulate(first)) & 63
    contrib = b.astype(np.uint64) * _POS[rel]
    contrib[~is_word] = 0
    with np.errstate(over="ignore"):
        cum = np.concatenate((np.zeros(1, dtype=np.uint64), np.cumsum(contrib, dtype=np.uint64)))
        hw = cum[ends] - cum[starts] + (ends - starts).astype(np.uint64) * _MIX_U[0]
    text_of = np.searchsorted(np.flatnonzero(b == 0), starts)  # which text each word belongs to
    counts = np.bincount(text_of, minlength=n_texts)
    keys = []
    if hw.size >= 3:
        ok = text_of[2:] == text_of[:-2]  # all three words in one text
        with np.errstate(over="ignore"):
            tri = hw[:-2][ok] * _MIX_U[0] + hw[1:-1][ok] * _MIX_U[1] + hw[2:][ok] * _MIX_U[2]
        keys.append((text_of[:-2][ok].astype(np.uint64) << np.uint64(_BITS)) | (tri >> np.uint64(64 - _BITS)))
    short = np.flatnonzero(counts < 3).tolist()
    if short:
        first_word = np.concatenate(([0], np.cumsum(counts)[:-1])).tolist()
        hw_list = hw.tolist()
        keys.append(np.asarray(
            [(t << _BITS) | _short_hash(hw_list[first_word[t]:first_word[t] + int(counts[t])]) for t in short],
            dtype=np.uint64))
    key = np.sort(np.concatenate(keys))
    key = key[np.concatenate(([True], key[1:] != key[:-1]))]
    pool = key & np.uint64(_MASK)
    bounds = np.searchsorted(key >> np.uint64(_BITS), np.arange(n_texts + 1, dtype=np.uint64))
    # every prefix in one gather: the first `keep` shingles of each text's sorted run
    size = np.diff(bounds)
    keep = np.minimum(size, np.maximum(1, size - np.ceil(threshold * size - 1e-9).astype(np.int64) + 1))
    offsets = np.concatenate(([0], np.cumsum(keep)[:-1]))
    prefix_values = pool[np.repeat(bounds[:-1] - offsets, keep) + np.arange(int(keep.sum()))].tolist()
    out = []
    at = 0
    for t, (start, end, k) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist(), keep.tolist())):
        out.append(Signature(pool, start, end, tuple(prefix_values[at:at + k])))
        at += k
    return out


class Deduper:
    """Near-duplicate lookup against the items placed so far, by prefix filtering (a similarity-join
    technique): with the shingles of every set in one global order, two sets with Jaccard >= t
    share at least one of each set's first ``len - ceil(t * len) + 1`` shingles. Only those prefixes
    are indexed and probed; candidates found that way are then checked exactly."""

    def __init__(self, threshold: float) -> None:
        self.threshold = threshold
        self.postings: dict[int, list[int]] = {}
        self.placed: list[tuple[Signature, object]] = []

    def find(self, sig: Signature) -> object | None:
        """The placed item ``sig`` near-duplicates (the first placed, if several), or None."""
        return next(self.matches(sig), None)

    def matches(self, sig: Signature) -> Iterator[object]:
        """Every placed item ``sig`` near-duplicates, in the order they were placed."""
        postings = self.postings
        hits = [j for sh in sig.prefix if sh in postings for j in postings[sh]]
        if not hits:
            return
        n, t = len(sig), self.threshold
        for j in sorted(set(hits)):
            other, item = self.placed[j]
            m = len(other)
            # size filter: Jaccard >= t needs t * n <= m <= n / t (most prefix hits are common
            # trigrams shared by texts of very different lengths)
            if m < t * n - 1e-9 or m * t > n + 1e-9:
                continue
            if sig.jaccard(other) >= t:
                yield item

    def add(self, sig: Signature, item: object) -> None:
        j = len(self.placed)
        self.placed.append((sig, item))
        for sh in sig.prefix:
            self.postings.setdefault(sh, []).append(j)
