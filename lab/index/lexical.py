"""BM25 over chunk text with bm25s: English stopwords, Snowball stemming, exact scores."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import bm25s
from bm25s.tokenization import _infer_stopwords
import numpy as np

from lab.config import LexicalIndexConfig


class LexicalAnalyzer:
    """Lower-case, split on words, drop stopwords, stem: the same for documents and queries.

    The output is exactly ``bm25s.tokenize(..., return_ids=False)``'s (a test holds the two equal
    on real text), without its per-call costs: it rebuilds the stopword set for every text and a
    vocabulary for every call, which made analysing search candidates' texts (the coverage
    feature) a third of a search's time at 100,000 memories.
    """

    TOKEN_PATTERN = r"(?u)\b\w\w+\b"  # bm25s's (scikit-learn's) default
    STEM_CACHE = 500_000  # words
    TERM_SET_CACHE = 250_000  # texts (a frozenset of a turn's terms is about a kilobyte)

    def __init__(self, config: LexicalIndexConfig) -> None:
        self.config = config
        self._stemmer = None
        if config.stemmer:  # LexicalIndexConfig has checked the name
            import Stemmer

            self._stemmer = Stemmer.Stemmer(config.stemmer)
        self._stems: dict[str, str] = {}
        self._term_sets: dict[str, frozenset[str]] = {}
        self._split = re.compile(self.TOKEN_PATTERN).findall
        # bm25s's own mapping of a stopwords name ("en": 33 words, "en_plus": NLTK's 179, a
        # language name, or None) to its word list
        self._stopwords = frozenset(_infer_stopwords(config.stopwords))

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        split, stop = self._split, self._stopwords
        words = [[w for w in split(text.lower()) if w not in stop] for text in texts]
        if self._stemmer is None:
            return words
        return [self._stem(ws) for ws in words]

    def term_sets(self, texts: Sequence[str]) -> list[frozenset[str]]:
        """Each text's distinct terms, memoised by text: the memo outlives the namespace views
        that a write replaces, so a search after a write does not analyse its candidates again."""
        memo = self._term_sets
        found = {t: memo.get(t) for t in texts}  # a local copy: another thread may clear the memo
        missing = [t for t, terms in found.items() if terms is None]
        if missing:
            if len(memo) + len(missing) > self.TERM_SET_CACHE:
                memo.clear()
            fresh = dict(zip(missing, map(frozenset, self.tokens(missing))))
            memo.update(fresh)
            found.update(fresh)
        return [found[t] for t in texts]

    @property
    def term_set_room(self) -> int:
        """How many more texts the term-set memo holds before it starts over."""
        return max(self.TERM_SET_CACHE - len(self._term_sets), 0)

    def _stem(self, words: list[str]) -> list[str]:
        # A dict lookup per word is several times cheaper than PyStemmer's call per text, and a
        # corpus's vocabulary repeats; the cache is bounded for unbounded (adversarial) input.
        cache = self._stems
        try:
            return [cache[w] for w in words]
        except KeyError:
            stems = self._stemmer.stemWords(words)
            if len(cache) > self.STEM_CACHE:
                cache.clear()
            cache.update(zip(words, stems))
            return stems


class LexicalIndex:
    """A bm25s index over a list of documents; scores every document for a query."""

    def __init__(self, config: LexicalIndexConfig, analyzer: LexicalAnalyzer | None = None) -> None:
        self.config = config
        self.analyzer = analyzer or LexicalAnalyzer(config)
        self._model: bm25s.BM25 | None = None
        self.n_docs = 0

    def build(self, texts: Sequence[str]) -> "LexicalIndex":
        self.n_docs = len(texts)
        if not texts:
            self._model = None
            return self
        tokens = self.analyzer.tokens(texts)
        if not any(tokens):  # only stopwords or symbols (bm25s cannot index an empty vocabulary)
            self._model = None
            return self
        model = bm25s.BM25(k1=self.config.k1, b=self.config.b, method=self.config.method)
        model.index(tokens, show_progress=False)
        self._model = model
        return self

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every document (0 where no query term matches)."""
        if self._model is None:
            return np.zeros(self.n_docs, dtype=np.float32)
        vocab = self._model.vocab_dict
        terms = [t for t in self.analyzer.tokens([query])[0] if t in vocab]
        if not terms:
            return np.zeros(self.n_docs, dtype=np.float32)
        return np.asarray(self._model.get_scores(terms), dtype=np.float32)

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        (path / "lab-lexical.json").write_text(json.dumps({"n_docs": self.n_docs}), encoding="utf-8")
        if self._model is not None:
            self._model.save(str(path), show_progress=False)

    @classmethod
    def load(cls, path: Path, config: LexicalIndexConfig, analyzer: LexicalAnalyzer | None = None) -> "LexicalIndex":
        obj = cls(config, analyzer)
        obj.n_docs = json.loads((path / "lab-lexical.json").read_text(encoding="utf-8"))["n_docs"]
        if obj.n_docs:
            obj._model = bm25s.BM25.load(str(path), show_progress=False, verbosity=0)
        return obj
