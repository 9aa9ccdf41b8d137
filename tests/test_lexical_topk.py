"""The pruned top-k BM25 search (lab.index.lexical_topk) equals collapsing every posting's score:
the same memories, the same floats, the same order, on random corpora with common and rare terms,
filters, a delta segment and every BM25 variant."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import lab.index.lexical_topk as topk
from lab.config import LexicalIndexConfig
from lab.index.lexical import CorpusStats, LexicalAnalyzer, LexicalIndex
from lab.index.view_index import collapse

COMMON = ["john", "maria", "weekend"]  # in most documents
RARE = ["mentor", "reward", "basketball", "museum", "poetry", "shelter", "coconut", "yoga", "studio", "medal"]


def corpus(rng: np.random.Generator, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        words = [w for w in COMMON if rng.random() < 0.6]
        words += list(rng.choice(RARE, size=int(rng.integers(0, 4)), replace=True))
        texts.append(" ".join(words) or "nothing")
    return texts


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10_000), n_main=st.integers(5, 200), n_delta=st.integers(0, 20),
       method=st.sampled_from(["lucene", "robertson", "atire", "bm25l", "bm25+"]), k=st.integers(1, 12),
       allowed_share=st.sampled_from([1.0, 0.7, 0.2]), share=st.sampled_from([0.02, 0.3]),
       query=st.lists(st.sampled_from(COMMON + RARE + ["absent"]), min_size=1, max_size=6))
def test_pruned_top_k_equals_every_posting_scored(seed, n_main, n_delta, method, k, allowed_share, share, query):
    rng = np.random.default_rng(seed)
    config = LexicalIndexConfig(method=method)
    analyzer = LexicalAnalyzer(config)
    texts = corpus(rng, n_main + n_delta)
    main = LexicalIndex(config, analyzer).build(texts[:n_main])
    parts = [(main, np.arange(n_main, dtype=np.int64))]
    if n_delta:
        parts.append((LexicalIndex(config, analyzer).build(texts[n_main:]), np.arange(n_main, n_main + n_delta)))
    df = {}
    for index, _ in parts:
        for term in index.vocab:
            df[term] = df.get(term, 0) + len(index.postings(term)[0])
    stats = CorpusStats(n_main + n_delta, int(sum(int(i.doc_len.sum()) for i, _ in parts)), lambda t: df.get(t, 0))
    memory_of = [f"m{i // 2:04d}" for i in range(n_main + n_delta)]  # two chunks a memory
    allowed = rng.random(n_main + n_delta) < allowed_share

    def keep(labels):
        return allowed[labels]

    def fold(labels, scores, n):
        return collapse(labels, scores, memory_of, n)

    q = " ".join(query)
    labels, scores = topk.score_terms(analyzer.tokens([q])[0], stats, parts)
    ok = keep(labels)
    expected = fold(labels[ok], scores[ok], k) if ok.any() else []
    old = topk.COMMON_SHARE
    topk.COMMON_SHARE = share
    try:
        got = topk.top_lexical(q, stats, parts, analyzer, k, keep, fold)
    finally:
        topk.COMMON_SHARE = old
    assert got == expected  # ids, order and scores bit for bit


def test_pruning_happens_and_stays_exact_on_many_skewed_corpora(monkeypatch):
    """Seeds where the pruned path is taken (the hypothesis test also covers its fallbacks)."""
    monkeypatch.setattr(topk, "COMMON_SHARE", 0.3)  # the names (60% of chunks) common, the rest rare
    pruned = 0
    for seed in range(60):
        rng = np.random.default_rng(seed)
        config = LexicalIndexConfig(method=["lucene", "robertson", "atire"][seed % 3])
        analyzer = LexicalAnalyzer(config)
        texts = corpus(rng, 400)
        main = LexicalIndex(config, analyzer).build(texts[:380])
        delta = LexicalIndex(config, analyzer).build(texts[380:])
        parts = [(main, np.arange(380, dtype=np.int64)), (delta, np.arange(380, 400, dtype=np.int64))]
        df = {}
        for index, _ in parts:
            for term in index.vocab:
                df[term] = df.get(term, 0) + len(index.postings(term)[0])
        stats = CorpusStats(400, int(main.doc_len.sum() + delta.doc_len.sum()), lambda t: df.get(t, 0))
        memory_of = [f"m{i // 3:04d}" for i in range(400)]
        allowed = rng.random(400) < 0.8
        keep = lambda labels: allowed[labels]  # noqa: E731
        fold = lambda labels, scores, n: collapse(labels, scores, memory_of, n)  # noqa: E731
        q = " ".join([COMMON[seed % 3], *rng.choice(RARE, size=2, replace=False)])
        labels, scores = topk.score_terms(analyzer.tokens([q])[0], stats, parts)
        ok = keep(labels)
        k = 1 + seed % 10
        expected = fold(labels[ok], scores[ok], k)
        terms = analyzer.tokens([q])[0]
        plan = topk._split(main, terms, stats)
        direct = topk._pruned(main, parts[0][1], terms, stats, parts[1:], plan, k, keep, fold) if plan else None
        pruned += direct is not None
        assert direct is None or direct == expected, (seed, q)
        assert topk.top_lexical(q, stats, parts, analyzer, k, keep, fold) == expected, (seed, q)
    assert pruned >= 30, f"the pruned path was taken for {pruned} of 60 queries"


def test_the_common_term_is_pruned_on_a_skewed_corpus():
    """The case it is for: a speaker's name in most chunks, rare words deciding the top."""
    config = LexicalIndexConfig()
    analyzer = LexicalAnalyzer(config)
    texts = [f"john said something about the weather on day {i}" for i in range(3000)]
    texts += [f"john talked with his mentor about the reward number {i}" for i in range(30)]
    main = LexicalIndex(config, analyzer).build(texts)
    df = {t: len(main.postings(t)[0]) for t in main.vocab}
    stats = CorpusStats(main.n_docs, int(main.doc_len.sum()), lambda t: df.get(t, 0))
    parts = [(main, np.arange(len(texts), dtype=np.int64))]
    memory_of = [f"m{i:05d}" for i in range(len(texts))]
    fold = lambda labels, scores, n: collapse(labels, scores, memory_of, n)  # noqa: E731
    terms = analyzer.tokens(["john mentor reward"])[0]
    plan = topk._split(main, terms, stats)
    assert plan is not None and [terms[i] for i in plan[0]] == ["mentor", "reward"]
    got = topk._pruned(main, parts[0][1], terms, stats, [], plan, 10, lambda labels: np.ones(len(labels), bool), fold)
    assert got is not None, "the rare terms' floor should have cleared the common term's bound"
    assert {m for m, _ in got} <= {f"m{i:05d}" for i in range(3000, 3030)}
