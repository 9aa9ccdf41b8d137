"""Searches answered together (one candidate table, one fusion) give what each gives alone."""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from lab.config import FilterConfig
from lab.errors import ValidationError
from lab.search.candidates import Query
from lab.search.searcher import SearchRequest, search_many
from lab.search.fusion import fuse
from lab.search.presets import resolve

TOPICS = ["the puppy is called Biscuit", "we moved to Lisbon in May", "the billing job runs nightly on postgres",
          "Priya owns the Ledgerline service", "my sister plays the cello", "the outage code was ERR-4471",
          "we hiked the Alps last summer", "the deploy freeze starts friday"]
QUERIES = ["what is the puppy called", "where did we move", "which database does billing use",
           "who owns Ledgerline", "what does my sister play", "error code of the outage", "deploy freeze"]


@pytest.fixture
def conversations(pipe):
    """Three episodes of turns (so the plain view, episode context and neighbour boost all play)."""
    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    rows = []
    for e in range(3):
        for t, topic in enumerate(TOPICS):
            rows.append({"id": f"e{e}t{t}", "namespace": "c", "content": f"{topic} (episode {e}, turn {t})",
                         "created_at": t0 + timedelta(days=e, minutes=t), "type": "fact" if t % 3 else "event",
                         "metadata": {"episode": f"E{e}"}})
    pipe.save_many(rows, progress=False)
    return pipe


def test_a_batch_answers_each_query_as_it_would_be_answered_alone(conversations):
    r = conversations.retriever
    config = resolve("lab")
    vectors = r.embed_queries(QUERIES)
    ks = [3, None, 10, 1, 5, 2, 24]
    explain = [False, True, False, False, True, False, False]
    requests = [SearchRequest(q, v, k, x) for q, v, k, x in zip(QUERIES, vectors, ks, explain)]
    together = r.search_many(requests, "c", config=config)
    assert [t.query for t in together] == QUERIES
    for req, got in zip(requests, together):
        alone = r.search_response(req.query, "c", req.k, config=config, explain=req.explain, query_vector=req.vector)
        assert got.results == alone.results, req.query  # ids, ranks, scores, signals, counterfactuals
        assert got.analysis == alone.analysis
        assert len(got.results) == min(req.k or config.fusion.top_k, 24)
        assert all((h.counterfactual is not None) == req.explain for h in got.results)
    # each query keeps its own ranking: the batch is not one ranking cut in pieces
    assert together[0].results[0].memory_id != together[3].results[0].memory_id
    # and it is the ranking of evaluation's own path (candidates, then fuse), which shares no
    # code with search_many past the candidate table
    for qid, (req, got) in enumerate(zip(requests, together)):
        cands = r.candidates([Query(str(qid), req.query, "c")], config, query_vectors=req.vector[None, :])
        ranked = fuse(cands, replace(config.fusion, top_k=req.k or config.fusion.top_k))
        assert ranked["memory_id"].to_list() == [h.memory_id for h in got.results]
        assert ranked["score"].to_list() == [h.score for h in got.results]


def test_a_batch_under_filters_and_the_retriever_embedding_what_is_missing(conversations):
    r = conversations.retriever
    config = replace(resolve("lab"), filters=FilterConfig(types=("event",)))
    requests = [SearchRequest(q) for q in QUERIES[:3]]
    together = r.search_many(requests, "c", config=config)
    for req, got in zip(requests, together):
        assert got.results and {h.type for h in got.results} == {"event"}
        assert got.results == r.search(req.query, "c", config=config)


def test_a_bad_request_in_a_batch_is_named(conversations):
    r = conversations.retriever
    snap, config = r.snapshot("c"), resolve("lab")
    v = r.embed_queries(["x"])[0]
    with pytest.raises(ValidationError, match=r"request 1 \('who'\) has no query vector"):
        search_many(snap, [SearchRequest("what", v), SearchRequest("who")], config)
    with pytest.raises(ValidationError, match="k must be a finite number >= 1, got 0"):
        search_many(snap, [SearchRequest("what", v), SearchRequest("who", v, k=0)], config)
    with pytest.raises(ValidationError, match="search request 1: query must be a non-empty string"):
        r.search_many([SearchRequest("what"), SearchRequest("  ")], "c")
    assert search_many(snap, [], config) == []


def _prepared_fields(prep) -> dict:
    rows = prep.rows
    return {"qids": prep.qids.to_list(), "memory_ids": prep.memory_ids.to_list(), "signals": prep.signals,
            "pair_q": prep.pair_q.tolist(), "pair_m": prep.pair_m.tolist(), "pair_col": prep.pair_col.tolist(),
            "rows": [a.tolist() for a in (rows.pair, rows.signal, rows.rank, rows.score, rows.list_id)],
            "n_lists": rows.n_lists, "intent": prep.intent.tolist(),
            "features": {k: v.tolist() for k, v in sorted(prep.features.items())}}


@pytest.fixture(scope="module")
def moved_store(tmp_path_factory):
    """Episodes of turns saved in two rounds with ids in no particular order, so the second round
    lands in a view moved on by a save (ids inserted between the ones read), and one deleted."""
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    p = Pipeline.open(tmp_path_factory.mktemp("moved") / "store", embedder=FakeEmbedder(), create=True)
    t0 = datetime(2024, 3, 1, tzinfo=timezone.utc)
    rows = [{"id": f"{(e * 37 + t * 11) % 97:02d}-e{e}t{t}", "namespace": "c",
             "content": f"{topic} (episode {e}, turn {t})", "created_at": t0 + timedelta(days=e, minutes=t),
             "type": "fact" if t % 3 else "event", "metadata": {"episode": f"E{e}"}}
            for e in range(4) for t, topic in enumerate(TOPICS)]
    p.save_many(rows[:16], progress=False)
    p.retriever.search("puppy", "c")  # the view is read here; the next saves move it on
    p.save_many(rows[16:], progress=False)
    p.delete(rows[3]["id"])
    yield p
    p.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(preset=st.sampled_from(["lab", "rrf-k2", "bm25", "vector", "stackmemory", "maia"]),
       picked=st.lists(st.integers(0, len(QUERIES) - 1), min_size=1, max_size=4),
       k=st.one_of(st.none(), st.integers(1, 30)), threshold=st.sampled_from([None, 0.2, 0.9]))
@example(preset="maia", picked=[0, 3], k=None, threshold=None)  # its frequency and graph lists come back empty
def test_a_search_is_what_fusing_its_candidate_table_gives(moved_store, preset, picked, k, threshold):
    """search_many encodes candidates from view positions, never writing out the table of strings
    that evaluation fuses: the encoding, the ranking, each result's signals and the abstention's
    evidence must all be those of the table's own path."""
    from lab.config import AbstainConfig
    from lab.search.abstain import best_scores
    from lab.search.candidates import candidate_codes, candidate_runs
    from lab.search.fusion import fuse_detailed, prepare
    from lab.search.fusion.prepare import prepare_codes
    r = moved_store.retriever
    config = replace(resolve(preset), abstain=AbstainConfig(threshold=threshold))
    texts = [QUERIES[i] for i in picked]
    vectors = r.embed_queries(texts)
    snap = r.snapshot("c")
    queries = [Query(f"{i:06d}", t, "c") for i, t in enumerate(texts)]
    runs = candidate_runs({"c": snap}, queries, vectors, config)
    table = runs.table()
    assert _prepared_fields(prepare_codes(candidate_codes(runs))) == _prepared_fields(prepare(table))
    got = search_many(snap, [SearchRequest(t, v, k) for t, v in zip(texts, vectors)], config)
    ranked, contrib = fuse_detailed(table, replace(config.fusion, top_k=k or config.fusion.top_k))
    best = best_scores(table)
    for q, response in zip(queries, got):
        want = ranked.filter(ranked["qid"] == q.qid)
        assert [(h.memory_id, h.rank, h.score) for h in response.results] == list(
            want.select("memory_id", "rank", "score").iter_rows())
        for h in response.results:
            mine = contrib.filter((contrib["qid"] == q.qid) & (contrib["memory_id"] == h.memory_id))
            assert [(s, d.rank, d.score, d.contribution) for s, d in h.signals.items()] == list(
                mine.select("signal", "rank", "score", "contribution").iter_rows())
        assert response.abstention.score == (None if q.qid not in best else round(best[q.qid], 6))
