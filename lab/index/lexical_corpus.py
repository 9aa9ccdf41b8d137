"""A view's BM25 over chunk labels: a main segment built at once, a delta segment of what was saved
since, deletions as masks, and every score computed with the statistics of the live documents of
both segments together.

A search right after a save therefore scores the new memory exactly as a search after a rebuild
(``store compact``) would: the same document count, average length and document frequencies,
hence the same float for the same document. bm25s precomputes each posting's score with its own
corpus's statistics, so a delta beside it could only be scored with the delta's (a new memory
ranked 21st for its own words until a compact). Counting, and scoring at query time, was chosen
over rebuilding one index on every save: a rebuild costs seconds at a million chunks, the
statistics a few array updates per saved chunk.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from lab.config import LexicalIndexConfig
from lab.index.lexical import CorpusStats, LexicalAnalyzer, LexicalIndex


@dataclass(frozen=True)
class _Counts:
    """The live documents' statistics, replaced whole on every change (a search holds one)."""

    n_docs: int = 0
    total_len: int = 0
    main_df: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # by main term id
    delta_df: dict[str, int] = field(default_factory=dict)


class LexicalCorpus:
    """BM25 over the labels of ``texts`` (the view's list, label -> chunk text, which only grows):
    ``main`` covers ``main_labels`` (ascending), the delta the labels added since. The caller holds
    its lock around every change and passes only live labels to ``remove``; a search takes
    references under it and scores without it."""

    def __init__(self, config: LexicalIndexConfig, analyzer: LexicalAnalyzer, texts: list[str]) -> None:
        self.config = config
        self.analyzer = analyzer
        self.texts = texts
        self.main = LexicalIndex(config, analyzer)
        self.main_labels = np.zeros(0, dtype=np.int64)
        self.delta_labels: list[int] = []
        self._delta: LexicalIndex | None = None
        self._delta_for = 0
        self._counts = _Counts()
        self._lengths: dict[int, int] = {}  # delta label -> its analysed length

    @property
    def delta_size(self) -> int:
        return len(self.delta_labels)

    # ------------------------------------------------------------------ changes
    def build(self, labels: np.ndarray, live: np.ndarray) -> None:
        """A main segment over ``labels`` (each live), the delta empty."""
        labels = np.asarray(labels, dtype=np.int64)
        self.install(labels, LexicalIndex(self.config, self.analyzer).build([self.texts[i] for i in labels]),
                     set(self.delta_labels), live)

    def restore(self, main: LexicalIndex, main_labels: np.ndarray, delta_labels: list[int], live: np.ndarray) -> None:
        """A saved index's segments (its statistics counted again from them and ``live``)."""
        self.delta_labels = list(delta_labels)
        self.install(main_labels, main, set(), live)

    def install(self, labels: np.ndarray, main: LexicalIndex, covered: set[int], live: np.ndarray) -> None:
        """``main``, built over ``labels``, becomes the main segment; the delta keeps the labels not
        in ``covered`` (saved while it was built). The statistics are counted again: the main
        segment's, less its labels no longer ``live`` (deleted while it was built), and the live
        delta labels' (a delta is small: at most the merge threshold and what came during a merge)."""
        self.main, self.main_labels = main, np.asarray(labels, dtype=np.int64)
        self.delta_labels = [x for x in self.delta_labels if x not in covered]
        self._delta, self._delta_for = None, 0
        self._lengths = {}
        main_df, total = main.doc_freqs().astype(np.int64), int(main.doc_len.sum())
        dead = ~live[self.main_labels] if len(self.main_labels) else np.zeros(0, dtype=bool)
        if dead.any():  # counted off the postings: a dead label's text may be gone (a reloaded index has "")
            term_of = np.repeat(np.arange(len(main_df)), np.diff(main.indptr))
            main_df -= np.bincount(term_of[dead[main.docs]], minlength=len(main_df))
            total -= int(main.doc_len[dead].sum())
        self._counts = _Counts(int((~dead).sum()), total, main_df, {})
        self.add([x for x in self.delta_labels if live[x]], extend=False)

    def add(self, labels: Sequence[int], extend: bool = True) -> None:
        """New live labels, into the delta (``extend`` False: already listed there)."""
        c = self._counts
        delta_df, total = dict(c.delta_df), c.total_len
        for label, tokens in zip(labels, self.analyzer.tokens([self.texts[i] for i in labels])):
            self._lengths[label] = len(tokens)
            total += len(tokens)
            for term in set(tokens):
                delta_df[term] = delta_df.get(term, 0) + 1
        if extend:
            self.delta_labels.extend(labels)
        self._counts = _Counts(c.n_docs + len(labels), total, c.main_df, delta_df)

    def remove(self, labels: Sequence[int]) -> None:
        """Live labels masked: their terms no longer count."""
        c = self._counts
        main_df, delta_df, total = c.main_df.copy(), dict(c.delta_df), c.total_len
        at = np.searchsorted(self.main_labels, np.asarray(labels, dtype=np.int64))
        for label, pos in zip(labels, at.tolist()):
            terms = self.analyzer.term_sets([self.texts[label]])[0]
            if pos < len(self.main_labels) and self.main_labels[pos] == label:
                total -= int(self.main.doc_len[pos])
                main_df[[self.main.vocab[t] for t in terms]] -= 1
                continue
            total -= self._lengths.pop(label)
            for t in terms:
                delta_df[t] -= 1
                if not delta_df[t]:
                    del delta_df[t]
        self._counts = _Counts(c.n_docs - len(labels), total, main_df, delta_df)

    # ------------------------------------------------------------------ search
    def _delta_index(self) -> tuple[LexicalIndex | None, np.ndarray]:
        labels = np.asarray(self.delta_labels, dtype=np.int64)
        if not len(labels):
            return None, labels
        if self._delta is None or self._delta_for != len(labels):
            self._delta = LexicalIndex(self.config, self.analyzer).build([self.texts[i] for i in labels])
            self._delta_for = len(labels)
        return self._delta, labels

    def segments(self) -> tuple[CorpusStats, list[tuple[LexicalIndex, np.ndarray]]]:
        """The statistics and the (segment, its labels) pairs a search scores: take them under the
        caller's lock, score without it."""
        c, vocab = self._counts, self.main.vocab

        def df(term: str) -> int:
            t = vocab.get(term)
            return (int(c.main_df[t]) if t is not None else 0) + c.delta_df.get(term, 0)

        delta, delta_labels = self._delta_index()
        parts = [(self.main, self.main_labels)] + ([(delta, delta_labels)] if delta is not None else [])
        return CorpusStats(c.n_docs, c.total_len, df), parts
