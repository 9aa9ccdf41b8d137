"""BM25 over chunk text: bm25s's analysis and variants (English stopwords, Snowball stemming), postings
of raw counts scored with the whole corpus's statistics, so segments written apart score as one."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

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
            pass
        # Only the words not seen before go to the stemmer, and numbers never do: they are their
        # own stems, and a store whose texts carry ids or counts would otherwise fill the cache
        # with one-off words and stem every such text whole (a test holds this equal to PyStemmer)
        found = {w: cache.get(w) for w in words}  # a local copy: another thread may clear the cache
        new = [w for w, stem in found.items() if stem is None and not (w.isascii() and w.isdigit())]
        if new:
            fresh = dict(zip(new, self._stemmer.stemWords(new)))
            if len(cache) + len(fresh) > self.STEM_CACHE:
                cache.clear()
            cache.update(fresh)
            found.update(fresh)
        return [found[w] or w for w in words]


# BM25 variants as bm25s defines them (Kamphuis et al., ECIR 2020): the inverse document frequency
# of a term in ``df`` of ``n`` documents, and the term-frequency component (``tf`` times in a document
# of ``dl`` terms, ``avgdl`` on average). A test holds lab's scores equal to bm25s's for each.
def _idf(method: str, df: float, n: float) -> float:
    if method == "robertson":
        return math.log(max((n - df + 0.5) / (df + 0.5), 1.0))
    if method == "lucene":
        return math.log(1 + (n - df + 0.5) / (df + 0.5))
    if method == "atire":
        return math.log(n / df)
    if method == "bm25l":
        return math.log((n + 1) / (df + 0.5))
    return math.log((n + 1) / df)  # bm25+


def _tfc(method: str, tf: np.ndarray, dl: np.ndarray, avgdl: float, k1: float, b: float,
         delta: float) -> np.ndarray:
    norm = 1 - b + b * dl / avgdl
    if method in ("robertson", "lucene"):
        return tf / (k1 * norm + tf)
    if method == "atire":
        return tf * (k1 + 1) / (tf + k1 * norm)
    if method == "bm25l":
        c = tf / norm
        return (k1 + 1) * (c + delta) / (k1 + c + delta)
    return (k1 + 1) * tf / (k1 * norm + tf) + delta  # bm25+


BM25_DELTA = {"bm25l": 0.5, "bm25+": 0.5}  # bm25s's default delta, for the two variants that use one


@dataclass(frozen=True)
class CorpusStats:
    """What a BM25 score needs of the whole corpus: its document count, total length, and a
    term's document frequency (``df``: a function, so the statistics may span several segments)."""

    n_docs: int
    total_len: int
    df: Callable[[str], int]

    @property
    def avgdl(self) -> float:
        return self.total_len / self.n_docs if self.n_docs else 1.0


class LexicalIndex:
    """One segment of analysed documents as postings of raw term counts (term -> documents, counts)
    with each document's length; scored with statistics handed in (`CorpusStats`), so a segment
    written after another scores its documents exactly as one index over both would.

    bm25s precomputes each posting's score with its own corpus's statistics, which a second segment
    cannot share: its definitions of the variants are kept (`_idf`, `_tfc`), the counts are lab's.
    """

    def __init__(self, config: LexicalIndexConfig, analyzer: LexicalAnalyzer | None = None) -> None:
        self.config = config
        self.analyzer = analyzer or LexicalAnalyzer(config)
        self.vocab: dict[str, int] = {}
        self.indptr = np.zeros(1, dtype=np.int64)
        self.docs = np.zeros(0, dtype=np.int32)
        self.tfs = np.zeros(0, dtype=np.float32)
        self.doc_len = np.zeros(0, dtype=np.int32)

    @property
    def n_docs(self) -> int:
        return len(self.doc_len)

    def build(self, texts: Sequence[str]) -> "LexicalIndex":
        tokens = self.analyzer.tokens(texts)
        n = len(tokens)
        self.doc_len = np.fromiter(map(len, tokens), dtype=np.int64, count=n).astype(np.int32)
        vocab = self.vocab = {}
        ids = np.fromiter((vocab.setdefault(t, len(vocab)) for doc in tokens for t in doc), dtype=np.int64,
                          count=int(self.doc_len.sum()))
        doc = np.repeat(np.arange(n, dtype=np.int64), self.doc_len)
        # one key per (term, document): sorted, they are the postings in term order, documents ascending
        keys, counts = np.unique(ids * max(n, 1) + doc, return_counts=True)
        terms = keys // max(n, 1)
        self.docs = (keys % max(n, 1)).astype(np.int32)
        self.tfs = counts.astype(np.float32)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(terms, minlength=len(vocab)))]).astype(np.int64)
        return self

    def doc_freqs(self) -> np.ndarray:
        """Each term's document count in this segment (by term id)."""
        return np.diff(self.indptr)

    def postings(self, term: str) -> tuple[np.ndarray, np.ndarray]:
        """(documents, counts) of ``term`` in this segment (empty when it has none)."""
        t = self.vocab.get(term)
        if t is None:
            return self.docs[:0], self.tfs[:0]
        return self.docs[self.indptr[t]:self.indptr[t + 1]], self.tfs[self.indptr[t]:self.indptr[t + 1]]

    def scores(self, terms: Sequence[str], stats: CorpusStats) -> np.ndarray:
        """BM25 score of every document of this segment for the analysed query ``terms`` (a term
        repeated counts again, as in bm25s), with the whole corpus's ``stats``; 0 where no term
        matches. Float64 throughout, in query-term order: the same document and statistics give
        the same score bit for bit, whichever segment holds it."""
        c = self.config
        out = np.zeros(self.n_docs, dtype=np.float64)
        delta = BM25_DELTA.get(c.method, 0.0)
        absent = 0.0  # BM25L/BM25+: what every query term gives a document without it (bm25s's non-occurrence)
        hit = np.zeros(self.n_docs, dtype=bool)
        for term in terms:
            df = stats.df(term)
            if df <= 0:  # in no live chunk of the corpus: no part of any score
                continue
            idf = _idf(c.method, df, stats.n_docs)
            missing = 0.0
            if c.method in BM25_DELTA:  # every query term of the corpus, in this segment or not
                missing = idf * float(_tfc(c.method, np.zeros(1), np.full(1, stats.avgdl), stats.avgdl, c.k1, c.b,
                                           delta)[0])
                absent += missing
            docs, tfs = self.postings(term)
            if not len(docs):
                continue
            gain = idf * _tfc(c.method, tfs.astype(np.float64), self.doc_len[docs].astype(np.float64), stats.avgdl,
                              c.k1, c.b, delta)
            out[docs] += gain - missing  # a term lists a document once: no two gains land on one place
            hit[docs] = True
        if absent:  # bm25s adds it to every document; only a document with a query term is a hit here
            out[hit] += absent
        return out

    def save(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        terms = sorted(self.vocab, key=self.vocab.__getitem__)
        (path / "vocab.json").write_text(json.dumps(terms, ensure_ascii=False), encoding="utf-8")
        np.savez(path / "postings.npz", indptr=self.indptr, docs=self.docs, tfs=self.tfs, doc_len=self.doc_len)

    @classmethod
    def load(cls, path: Path, config: LexicalIndexConfig, analyzer: LexicalAnalyzer | None = None) -> "LexicalIndex":
        obj = cls(config, analyzer)
        terms = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
        obj.vocab = {t: i for i, t in enumerate(terms)}
        with np.load(path / "postings.npz") as arrays:
            obj.indptr, obj.docs, obj.tfs, obj.doc_len = (arrays[k] for k in ("indptr", "docs", "tfs", "doc_len"))
        if len(obj.indptr) != len(terms) + 1 or len(obj.docs) != len(obj.tfs) or (
                len(obj.docs) and int(obj.docs.max()) >= len(obj.doc_len)):
            raise ValueError(f"lexical postings in {path} disagree with their vocabulary or documents")
        return obj
