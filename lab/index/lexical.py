"""BM25 over chunk text with bm25s: English stopwords, Snowball stemming, exact scores."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import bm25s
import numpy as np

from lab.config import LexicalIndexConfig


class LexicalAnalyzer:
    """Lower-case, split on words, drop stopwords, stem: the same for documents and queries."""

    def __init__(self, config: LexicalIndexConfig) -> None:
        self.config = config
        self._stemmer = None
        if config.stemmer:
            import Stemmer

            self._stemmer = Stemmer.Stemmer(config.stemmer)

    def tokens(self, texts: Sequence[str]) -> list[list[str]]:
        return bm25s.tokenize(
            list(texts),
            stopwords=self.config.stopwords,
            stemmer=self._stemmer,
            return_ids=False,
            show_progress=False,
        )


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
    def load(cls, path: Path, config: LexicalIndexConfig) -> "LexicalIndex":
        obj = cls(config)
        obj.n_docs = json.loads((path / "lab-lexical.json").read_text(encoding="utf-8"))["n_docs"]
        if obj.n_docs:
            obj._model = bm25s.BM25.load(str(path), show_progress=False, verbosity=0)
        return obj
