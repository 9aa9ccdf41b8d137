"""The rerank stage (lab.search.rerank) against a recording rerank server that scores by shared
words: both request shapes, the search and evaluation paths, secrets and malformed answers."""
from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from lab import workspace
from lab.config import RerankConfig, SearchConfig
from lab.embed.fake import FakeEmbedder
from lab.embed.server import ServerError
from lab.eval.goldens import load_golden
from lab.eval.runner import EvalOptions, evaluate
from lab.eval.stores import eval_retriever
from lab.search import rerank as rr
from tests.conftest import ROOT
from tests.model_server import ModelServer, shared_words

DOCS = {"a": "the billing cluster deploy", "b": "quokka rotation zebrafish canary deploy", "c": "weekend plans",
        "d": "canary deploy checklist", "e": "zebrafish canary"}
RUN = pl.DataFrame({"qid": ["q1"] * 5 + ["q2"] * 2, "memory_id": ["a", "b", "c", "d", "e", "c", "a"],
                    "rank": [1, 2, 3, 4, 5, 1, 2], "score": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3]})
QUERIES = {"q1": "zebrafish canary deploy", "q2": "billing plans"}


@pytest.fixture(autouse=True)
def fresh_clients():
    rr._clients.clear()
    yield
    rr._clients.clear()


def texts(ids):
    return {m: DOCS[m] for m in ids}


def rerank_file(tmp_path: Path, base_url: str, **settings) -> str:
    import yaml

    path = tmp_path / "rerank.yaml"
    path.write_text(yaml.safe_dump({"kind": "rerank", "model": "fake-rerank", "base_url": base_url, **settings}))
    return f"rerank:{path}"


def expected_order(qid: str, ids: list[str]) -> list[str]:
    scores = [shared_words(QUERIES[qid], DOCS[m]) for m in ids]
    return [ids[i] for i in sorted(range(len(ids)), key=lambda i: (-scores[i], i))]


@pytest.mark.parametrize("shape", ["cohere", "tei"])
def test_the_fused_top_n_is_reordered_by_the_server_and_the_rest_follows(tmp_path, shape):
    with ModelServer() as server:
        name = (f"rerank:fake-rerank@{server.base_url}" if shape == "cohere"
                else rerank_file(tmp_path, server.root_url, shape="tei"))
        out = rr.reranked(RUN, RerankConfig(server=name, top_n=4), QUERIES, texts)
        q1 = out.filter(pl.col("qid") == "q1").sort("rank")["memory_id"].to_list()
        assert q1 == expected_order("q1", ["a", "b", "c", "d"]) + ["e"]  # e was 5th: beyond top_n, kept 5th
        assert out.filter(pl.col("qid") == "q1").sort("rank")["rank"].to_list() == [1, 2, 3, 4, 5]
        assert out.filter(pl.col("qid") == "q2").sort("rank")["memory_id"].to_list() == expected_order("q2", ["c", "a"])
        reranked_score = out.filter((pl.col("qid") == "q1") & (pl.col("rank") == 1))["score"][0]
        assert reranked_score == pytest.approx(1.0)  # the server's score replaces the fused one
        request = next(r for r in server.requests if "zebrafish" in r["body"]["query"])
        if shape == "cohere":
            assert request["path"] == "/v1/rerank" and request["body"]["model"] == "fake-rerank"
            assert request["body"]["documents"] == [DOCS[m] for m in ["a", "b", "c", "d"]]
        else:
            assert request["path"] == "/rerank" and request["body"]["texts"] == [DOCS[m] for m in ["a", "b", "c", "d"]]


def test_the_key_is_sent_from_rerank_api_key_and_a_refusal_does_not_show_it(monkeypatch):
    key = "rk-live-ABCDEFGH12345678"
    with ModelServer(key=key) as server:
        monkeypatch.setenv("RERANK_API_KEY", key)
        rr.reranked(RUN, RerankConfig(server=f"rerank:fake-rerank@{server.base_url}"), QUERIES, texts)
        assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {key}"
        rr._clients.clear()
        monkeypatch.setenv("RERANK_API_KEY", "rk-wrong-ZZZZZZZZ0000")
        with pytest.raises(ServerError) as refused:
            rr.reranked(RUN, RerankConfig(server=f"rerank:fake-rerank@{server.base_url}"), QUERIES, texts)
        assert "refused the key (401)" in str(refused.value) and "$RERANK_API_KEY" in str(refused.value)
        assert "rk-wro" not in str(refused.value) and "0000" not in str(refused.value)


@pytest.mark.parametrize("answer, message", [
    ({"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 0.5}]}, r"index 0 .*repeats"),
    ({"results": [{"index": 0, "relevance_score": "high"}, {"index": 1, "relevance_score": 0.5}]}, r"'high', not a finite"),
    ({"results": [{"index": 0, "relevance_score": 1.0}]}, r"scores 1 of 2 documents \(cut short\?\)"),
    ({"ranking": []}, r"holds no list of results"),
])
def test_a_malformed_rerank_answer_is_refused_naming_what_is_wrong(answer, message):
    class Canned:
        spec = rr.parse_server_model("rerank:m@http://127.0.0.1:9", kind="rerank")

        def post(self, route, body):
            return answer, {}

        def error(self, problem):
            return ServerError(problem)

    with pytest.raises(ServerError, match=message):
        rr.rerank_scores(Canned(), "q", ["one", "two"])


def test_a_search_config_with_a_rerank_stage_reorders_search_and_evaluation(tmp_path):
    workspace.use(eval_root=tmp_path / "eval")
    dataset = load_golden(ROOT / "goldens" / "demo.yaml")
    retriever = eval_retriever(dataset, embedder=FakeEmbedder(), root=tmp_path / "eval")
    try:
        with ModelServer() as server:
            plain = SearchConfig(name="plain")
            staged = SearchConfig(name="staged", rerank=RerankConfig(server=f"rerank:fake-rerank@{server.base_url}",
                                                                     top_n=10))
            question = dataset.questions.row(0, named=True)
            before = retriever.search(question["question"], question["namespace"], 10, config=plain)
            after = retriever.search(question["question"], question["namespace"], 10, config=staged)
            assert sorted(r.memory_id for r in after) == sorted(r.memory_id for r in before)
            got = [shared_words(question["question"], f"{r.title}\n{r.content}" if r.title else r.content) for r in after]
            assert got == sorted(got, reverse=True), "results not in the rerank server's order"
            asked = len(server.requests)
            base = evaluate(retriever, dataset, plain, EvalOptions(ks=(1, 10)))
            reranked = evaluate(retriever, dataset, staged, EvalOptions(ks=(1, 10)))
            assert len(server.requests) - asked == dataset.questions.height  # one request per question
            assert not reranked.run.equals(base.run)
    finally:
        retriever.close()
