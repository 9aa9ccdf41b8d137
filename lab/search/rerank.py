"""A rerank server's stage after fusion (``rerank.server`` in a search configuration).

Each query's fused top ``rerank.top_n`` goes, with the query, to the server's ``/rerank`` route in
one request; the memories come back re-ordered by the scores it answers (ties keep their fused
order), and the rest of the ranking follows unchanged. Two request shapes cover the servers in use:

- ``cohere`` (Cohere, Jina, Voyage, infinity, vLLM): ``{"model", "query", "documents", "top_n"}``,
  answered ``{"results": [{"index", "relevance_score"}]}``;
- ``tei`` (text-embeddings-inference): ``{"query", "texts"}``, answered ``[{"index", "score"}]``.

The server is named as an embedding server is (``lab.embed.server_spec``): ``rerank:MODEL@BASE_URL``
(its key from ``RERANK_API_KEY`` when set) or ``rerank:FILE.yaml`` with ``kind: rerank``, the same
secrets rules, bounds and retries. A memory's text is its title and content, as lexical search reads it.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence

import polars as pl

from lab.config import RerankConfig
from lab.embed.server import ServerClient, route_url
from lab.embed.server_spec import ServerSpec, parse_server_model

_clients: dict[str, ServerClient] = {}  # by server name: one HTTP client (its connections) per process


def memory_text(title: str | None, content: str) -> str:
    """What a rerank server reads of a memory: its title and content, as lexical search does."""
    return f"{title}\n{content}" if title else content


def reranker(name: str) -> ServerClient:
    """The client of the rerank server ``name`` (its file read once per process)."""
    if name not in _clients:
        _clients[name] = ServerClient(parse_server_model(name, kind="rerank"))
    return _clients[name]


def rerank_scores(client: ServerClient, query: str, documents: Sequence[str]) -> list[float]:
    """The server's score for each of ``documents`` (in their order); a malformed answer is one
    error naming the server."""
    spec: ServerSpec = client.spec
    if not documents:
        return []
    if spec.shape == "tei":
        body: dict[str, Any] = {"query": query, "texts": list(documents)}
    else:
        body = {"model": spec.model, "query": query, "documents": list(documents), "top_n": len(documents),
                "return_documents": False}
    answer, _ = client.post("/rerank", body)
    items = answer.get("results") if isinstance(answer, dict) else answer
    shown = route_url(spec.shown_url, "/rerank")
    if not isinstance(items, list):
        raise client.error(f"{shown}: the answer holds no list of results (a {spec.shape}-shaped answer was expected)")
    scores: list[float | None] = [None] * len(documents)
    key = "score" if spec.shape == "tei" else "relevance_score"
    for item in items:
        at = item.get("index") if isinstance(item, dict) else None
        score = item.get(key, item.get("score")) if isinstance(item, dict) else None
        if not isinstance(at, int) or not 0 <= at < len(documents) or scores[at] is not None:
            raise client.error(f"{shown}: an answer's index {at!r} is not one of 0..{len(documents) - 1} (or repeats)")
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
            raise client.error(f"{shown}: the score of document {at} is {score!r}, not a finite number")
        scores[at] = float(score)
    if any(s is None for s in scores):
        raise client.error(f"{shown}: the answer scores {sum(s is not None for s in scores)} of {len(documents)} "
                           "documents (cut short?)")
    return scores  # type: ignore[return-value]


def reranked(run: pl.DataFrame, config: RerankConfig, queries: Mapping[str, str],
             texts: Callable[[list[str]], Mapping[str, str]]) -> pl.DataFrame:
    """``run`` (qid, memory_id, rank, score, ...: a fused ranking) with each query's top
    ``config.top_n`` re-ordered by the rerank server: ranks renumbered, the reranked rows' score the
    server's. ``texts`` gives memory id -> text for the ids asked."""
    if config.server is None or not run.height:
        return run
    client = reranker(config.server)
    top = run.filter(pl.col("rank") <= config.top_n).sort("qid", "rank")
    text_of = texts(top["memory_id"].unique(maintain_order=True).to_list())
    groups = [(qid, ids) for qid, ids in top.group_by("qid", maintain_order=True).agg(pl.col("memory_id")).iter_rows()]

    def one(group: tuple[str, list[str]]) -> list[float]:
        qid, ids = group
        return rerank_scores(client, queries[qid], [text_of.get(m, "") for m in ids])

    with ThreadPoolExecutor(max(1, min(client.spec.concurrency, len(groups))), thread_name_prefix="lab-rerank") as pool:
        scored = list(pool.map(one, groups))
    rows = []
    for (qid, ids), scores in zip(groups, scored):
        # by the server's score, ties in fused order
        order = sorted(range(len(ids)), key=lambda i: (-scores[i], i))
        rows += [(qid, ids[i], new + 1, scores[i]) for new, i in enumerate(order)]
    new_top = pl.DataFrame(rows, schema={"qid": run.schema["qid"], "memory_id": run.schema["memory_id"],
                                         "_rank": pl.Int64, "_score": pl.Float64}, orient="row")
    out = run.join(new_top, on=["qid", "memory_id"], how="left")
    return (out.with_columns(pl.coalesce("_rank", pl.col("rank").cast(pl.Int64)).cast(run.schema["rank"]).alias("rank"),
                             pl.coalesce("_score", pl.col("score").cast(pl.Float64)).cast(run.schema["score"]).alias("score"))
            .drop("_rank", "_score").sort("qid", "rank"))
