"""The top k memories of a BM25 query without scoring every posting of its common terms (MaxScore).

At a million chunks a question names a speaker ("john": a third of all chunks) beside a few rare
words; scoring every posting cost 20-30 ms a query, most of it for the common term, and a served
search at 50 a second fell behind. A common term adds little: at most its idf times the largest
term-frequency component (under 1 for lucene and robertson, k1 + 1 for atire). So:

1. the main segment's query terms are split: the *common* ones (postings over ``COMMON_SHARE`` of
   the segment) and the rest; the rest are scored in full, which gives each chunk they reach a
   lower bound of its score;
2. the k-th best memory by those lower bounds (live and allowed chunks, the delta segment scored
   whole beside them) is a floor ``theta`` no top-k memory is below; a chunk none of the rest reach
   scores at most ``bound``, the common terms' largest possible sum, so when ``bound < theta`` no such
   chunk can be in the top k, nor tie with it;
3. the chunks whose lower bound plus ``bound`` reaches ``theta`` are scored exactly, every term in
   query order through binary searches into its postings: the same float operations in the same
   order as the full scan (``LexicalIndex.scores``), hence the same score bit for bit.

Where ``bound < theta`` does not hold (or a variant adds a score to chunks without a term: BM25L and
BM25+), every posting is scored as before. ``tests/test_lexical_topk.py`` holds the two equal.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from lab.index.lexical import BM25_DELTA, CorpusStats, LexicalAnalyzer, LexicalIndex, _idf, _tfc

COMMON_SHARE = 0.02  # a term in more than this share of the main segment's chunks is scored last, if at all
SAFETY = 1e-9  # relative slack on the bound: rounding never decides what is left out
PROBE = 8  # documents per result scored in full first, for a higher floor
MOVES = 3  # common terms made rare, one at a time, before every posting is scored instead


def score_terms(terms: Sequence[str], stats: CorpusStats, parts: list[tuple[LexicalIndex, np.ndarray]]
                ) -> tuple[np.ndarray, np.ndarray]:
    """(labels, BM25 scores > 0) of the analysed query ``terms`` over the segments: every posting."""
    label_parts, score_parts = [], []
    for index, labels in parts:
        if not index.n_docs:
            continue
        scores = index.scores(terms, stats)
        nonzero = np.flatnonzero(scores > 0)
        label_parts.append(labels[nonzero])
        score_parts.append(scores[nonzero])
    if not label_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    return np.concatenate(label_parts), np.concatenate(score_parts)


def top_lexical(query: str, stats: CorpusStats, parts: list[tuple[LexicalIndex, np.ndarray]], analyzer: LexicalAnalyzer,
                k: int, keep: Callable[[np.ndarray], np.ndarray],
                collapse: Callable[[np.ndarray, np.ndarray, int], list[tuple[str, float]]]) -> list[tuple[str, float]]:
    """The top ``k`` memories for ``query``: ``collapse(labels, scores, k)`` of the chunks ``keep``
    passes (a boolean per label), equal to collapsing every chunk's score (see the module's docstring)."""
    terms = analyzer.tokens([query])[0]
    main, main_labels = parts[0]
    plan = _split(main, terms, stats) if main.n_docs else None
    if plan is not None:
        found = _pruned(main, main_labels, terms, stats, parts[1:], plan, k, keep, collapse)
        if found is not None:
            return found
    labels, scores = score_terms(terms, stats, parts)
    ok = keep(labels) if len(labels) else np.zeros(0, dtype=bool)
    return collapse(labels[ok], scores[ok], k) if ok.any() else []


def _split(main: LexicalIndex, terms: Sequence[str], stats: CorpusStats) -> tuple[list[int], list[tuple[int, float]]] | None:
    """(positions in ``terms`` of the rare terms, [(position, largest possible score) of each common
    term, longest postings first]), or None where pruning cannot help or cannot be exact."""
    c = main.config
    if c.method in BM25_DELTA:
        return None
    most = (c.k1 + 1) if c.method == "atire" else 1.0  # the term-frequency component's supremum
    rare, common = [], []
    for i, term in enumerate(terms):
        df = stats.df(term)
        if df <= 0:
            continue
        n = len(main.postings(term)[0])
        if n > COMMON_SHARE * main.n_docs:
            common.append((n, i, _idf(c.method, df, stats.n_docs) * most))
        else:
            rare.append(i)
    if not common:
        return None
    common.sort(key=lambda x: (-x[0], x[1]))
    return rare, [(i, most_score) for _, i, most_score in common]


def _gains(main: LexicalIndex, term: str, stats: CorpusStats) -> tuple[np.ndarray, np.ndarray]:
    """(documents, gains) of one term over its postings (for lower bounds: any summation order)."""
    c = main.config
    docs, tfs = main.postings(term)
    gain = _idf(c.method, stats.df(term), stats.n_docs) * _tfc(
        c.method, tfs.astype(np.float64), main.doc_len[docs].astype(np.float64), stats.avgdl, c.k1, c.b, 0.0)
    return docs, gain


def _pruned(main: LexicalIndex, main_labels: np.ndarray, terms: Sequence[str], stats: CorpusStats,
            rest: list[tuple[LexicalIndex, np.ndarray]], plan: tuple[list[int], list[tuple[int, float]]], k: int,
            keep: Callable[[np.ndarray], np.ndarray], collapse) -> list[tuple[str, float]] | None:
    rare, common = plan
    delta_labels, delta_scores = score_terms(terms, stats, rest)  # small: scored whole, final scores
    delta_ok = keep(delta_labels) if len(delta_labels) else np.zeros(0, dtype=bool)
    # the rare terms' sum per document they reach: a lower bound of its score (sorted by document)
    reached, lower = _merged(np.zeros(0, dtype=np.int64), np.zeros(0), [_gains(main, terms[i], stats) for i in rare])
    moves = 0
    while True:
        # every term adds a gain >= 0 (idf >= 0 for these variants)
        bound = sum(most for _, most in common) * (1 + SAFETY) + SAFETY
        ok = keep(main_labels[reached]) if len(reached) else np.zeros(0, dtype=bool)
        floor = collapse(np.concatenate([main_labels[reached][ok], delta_labels[delta_ok]]),
                         np.concatenate([lower[ok], delta_scores[delta_ok]]), k)
        theta = floor[-1][1] * (1 - SAFETY) - SAFETY if len(floor) == k else 0.0
        if theta > bound:
            break
        if len(common) <= 1 or moves == MOVES:
            return None  # no floor above what a chunk without a rare term may score: every posting is needed
        moves += 1
        i, _ = common.pop()  # the shortest of the common terms becomes a rare one
        reached, lower = _merged(reached, lower, [_gains(main, terms[i], stats)])
    # a higher floor from exact scores: the best lower bounds scored in full first (the common
    # terms lift them), so far fewer documents are left within reach of it
    best = np.flatnonzero(ok)
    if len(best) > PROBE * k:
        best = np.sort(best[np.argpartition(-lower[best], PROBE * k)[:PROBE * k]])
    probe = _exact(main, terms, stats, reached[best])
    floor = collapse(np.concatenate([main_labels[reached[best]], delta_labels[delta_ok]]),
                     np.concatenate([probe, delta_scores[delta_ok]]), k)
    if len(floor) == k:
        theta = max(theta, floor[-1][1] * (1 - SAFETY) - SAFETY)
    wanted = reached[(lower + bound >= theta) & ok]
    final = _exact(main, terms, stats, wanted)
    labels = np.concatenate([main_labels[wanted], delta_labels[delta_ok]])
    scores = np.concatenate([final, delta_scores[delta_ok]])
    hit = scores > 0
    return collapse(labels[hit], scores[hit], k)


def _merged(docs: np.ndarray, sums: np.ndarray, more: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(documents, summed gains) with ``more`` (documents, gains) pairs added: sorted runs merged by
    a stable sort (a merge of runs, not a full sort), equal documents summed."""
    cat = np.concatenate([docs, *(d for d, _ in more)])
    gains = np.concatenate([sums, *(g for _, g in more)])
    if not len(cat):
        return cat.astype(np.int64), gains
    order = np.argsort(cat, kind="stable")
    cat, gains = cat[order], gains[order]
    starts = np.flatnonzero(np.concatenate([[True], cat[1:] != cat[:-1]]))
    return cat[starts], np.add.reduceat(gains, starts)


def _exact(index: LexicalIndex, terms: Sequence[str], stats: CorpusStats, docs: np.ndarray) -> np.ndarray:
    """The scores of ``docs`` (sorted document numbers of ``index``), as ``LexicalIndex.scores``
    computes them: each term in query order, its gain looked up where the document holds it."""
    c = index.config
    out = np.zeros(len(docs), dtype=np.float64)
    if not len(docs):
        return out
    dl = index.doc_len[docs].astype(np.float64)
    for term in terms:
        df = stats.df(term)
        if df <= 0:
            continue
        t_docs, tfs = index.postings(term)
        if not len(t_docs):
            continue
        at = np.minimum(np.searchsorted(t_docs, docs), len(t_docs) - 1)
        has = t_docs[at] == docs
        if not has.any():
            continue
        idf = _idf(c.method, df, stats.n_docs)
        gain = idf * _tfc(c.method, tfs[at[has]].astype(np.float64), dl[has], stats.avgdl, c.k1, c.b, 0.0)
        out[has] += gain - 0.0  # as the full scan adds (gain - missing), missing 0 outside BM25L/BM25+
    return out
