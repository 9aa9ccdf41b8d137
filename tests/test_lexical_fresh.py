"""A memory saved after the index was built is scored with the whole namespace's BM25 statistics:
found by its own words at once, ranked exactly as after a compact (issue 58)."""
from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.config import IndexConfig, LexicalIndexConfig, SaveConfig
from lab.config.save import BM25_METHODS
from lab.embed.fake import FakeEmbedder
from lab.index.lexical import CorpusStats, LexicalAnalyzer, LexicalIndex
from lab.pipeline import Pipeline

NEW = "Quokka rotation zebrafish canary deploy checklist for the billing cluster"


def _real_texts(n: int = 600) -> list[str]:
    from conftest import require_dataset

    conv = json.loads(require_dataset("locomo/locomo10-dev.json").read_text(encoding="utf-8"))[0]["conversation"]
    return [t["text"] for turns in conv.values() if isinstance(turns, list) for t in turns][:n]


@pytest.mark.parametrize("method", BM25_METHODS)
def test_scores_equal_bm25s_on_real_text_for_every_variant(method):
    """lab keeps raw counts and scores at query time; the figures must stay bm25s's own."""
    import bm25s

    texts = _real_texts()
    config = LexicalIndexConfig(method=method)
    analyzer = LexicalAnalyzer(config)
    index = LexicalIndex(config, analyzer).build(texts)
    stats = CorpusStats(index.n_docs, int(index.doc_len.sum()), lambda t: int(index.doc_freqs()[index.vocab[t]]))
    theirs = bm25s.BM25(k1=config.k1, b=config.b, method=method)
    theirs.index(analyzer.tokens(texts), show_progress=False)
    for query in ("when did Caroline go to the LGBTQ support group", "Melanie painted a sunrise",
                  "adoption agencies counseling", "camping with the kids"):
        terms = [t for t in analyzer.tokens([query])[0] if t in index.vocab]
        ours, want = index.scores(terms, stats), theirs.get_scores(terms)
        hit = ours != 0  # a document with no query term is no lexical hit (bm25l/bm25+ give it a floor)
        assert hit.any()
        np.testing.assert_allclose(ours[hit], want[hit], rtol=2e-5)
        assert (want[~hit] <= (want[hit].min() if method in ("bm25l", "bm25+") else 0)).all()


def _fill(pipe: Pipeline, texts: list[str], ns: str = "n") -> None:
    pipe.save_many([{"namespace": ns, "content": t} for t in texts], progress=False)


def _ranked(pipe: Pipeline, query: str, preset: str, ns: str = "n") -> list[tuple[str, float]]:
    return [(h.memory_id, round(h.score, 12)) for h in pipe.search(query, ns, k=20, preset=preset)]


def test_a_memory_saved_after_the_build_is_first_for_its_own_words(tmp_path):
    """The issue's reproduction on the demo data: 21st under bm25 before, 1st after a compact."""
    from pathlib import Path

    pipe = Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True)
    pipe.ingest(Path(__file__).resolve().parent.parent / "datasets" / "demo", progress=False)
    ns = "atlas"
    pipe.search("deploy", ns, preset="bm25")  # the index is built
    new = pipe.save(NEW, namespace=ns).created[0]
    assert pipe.index(ns).delta_size >= 1  # the saved memory is in the delta, not merged
    before = _ranked(pipe, "Quokka rotation zebrafish canary deploy", "bm25", ns)
    assert before[0][0] == new
    pipe.compact()
    assert pipe.build_index(ns).delta_size == 0  # one main segment over every memory, as a fresh build
    assert _ranked(pipe, "Quokka rotation zebrafish canary deploy", "bm25", ns) == before
    pipe.close()


WORDS = "quokka deploy billing cluster canary rotation zebrafish invoice garden violin marathon".split()
OPS = st.lists(st.one_of(st.tuples(st.just("save"), st.lists(st.sampled_from(WORDS), min_size=1, max_size=6)),
                         st.tuples(st.just("delete"), st.integers(0, 1000)),
                         st.tuples(st.just("revert"), st.integers(0, 1000)),  # edited and edited back
                         st.tuples(st.just("reload"), st.just(0))),  # the saved index read back
               min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS, merge_at=st.integers(1, 8), method=st.sampled_from(BM25_METHODS))
def test_search_after_saves_and_deletes_equals_search_after_a_rebuild(tmp_path_factory, ops, merge_at, method):
    """Random saves, deletes, edits undone and reloads of the saved index after the build (some past
    the merge threshold, merged in the background), under every BM25 variant: bm25 and lab then
    rank exactly as a store rebuilt from the same memories."""
    root = tmp_path_factory.mktemp("s")
    config = SaveConfig(index=IndexConfig(delta_merge_threshold=merge_at, lexical=LexicalIndexConfig(method=method)))
    pipe = Pipeline.open(root / "live", config, embedder=FakeEmbedder(), create=True)
    _fill(pipe, [f"note {i} about {WORDS[i % len(WORDS)]} and {WORDS[(3 * i) % len(WORDS)]}" for i in range(12)])
    pipe.search("deploy", "n", preset="bm25")
    for op, arg in ops:
        ids = sorted(pipe.list("n")["id"].to_list())
        if op == "save":
            pipe.save(" ".join(arg), namespace="n")
        elif op == "delete" and len(ids) > 1:
            pipe.delete(ids[arg % len(ids)], hard=True)
        elif op == "revert" and ids:
            mid = ids[arg % len(ids)]
            content = pipe.list("n").filter(pl.col("id") == mid)["content"][0]
            pipe.update(mid, content=content + " edited")
            pipe.update(mid, content=content)
        elif op == "reload":
            pipe.index("n").wait_for_merge()
            pipe.close()
            pipe = Pipeline.open(root / "live", config, embedder=FakeEmbedder())
    pipe.index("n").wait_for_merge()
    fresh = Pipeline.open(root / "fresh", config, embedder=FakeEmbedder(), create=True)
    kept = pipe.list("n").sort("id")
    fresh.save_many([{"namespace": "n", "id": i, "content": c} for i, c in zip(kept["id"], kept["content"])],
                    progress=False)
    for query in ("quokka deploy", "billing cluster canary", "zebrafish violin note edited"):
        for preset in ("bm25", "lab"):
            got = _ranked(pipe, query, preset)
            assert got == _ranked(fresh, query, preset), (preset, query)
    pipe.close()
    fresh.close()


@pytest.mark.parametrize("kind", ["folder", "uri"])
def test_every_face_finds_a_saved_memory_first_under_bm25_at_once(tmp_path, kind):
    """The CLI (a later `lab ingest` of one memory), REST and MCP (each serving bm25), on a folder
    and on a store at a URI: the saved memory is first for its own words right after the save is
    acknowledged, in a namespace whose index was built before it (the demo)."""
    import asyncio
    import os
    import subprocess
    import sys

    from serving import ROOT, Server, write_bundle

    store = str(tmp_path / "store") if kind == "folder" else (tmp_path / "bucket" / "s").as_uri()
    env = {**os.environ, "LAB_STORE_CACHE": str(tmp_path / "cache")}

    def lab(*args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done

    lab("init", "--store", store, "--model", "fake-hash-256")
    lab("ingest", str(ROOT / "datasets" / "demo"), "--store", store)  # the index is built and saved
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"namespace": "atlas", "content": NEW}) + "\n")
    lab("ingest", str(one), "--store", store)
    found = json.loads(lab("search", "Quokka rotation zebrafish canary deploy", "--store", store, "--namespace",
                           "atlas", "--preset", "bm25", "--k", "3", "--json").stdout)
    assert found[0]["content"] == NEW

    bundle = write_bundle(tmp_path / "bundle", preset="bm25")
    with Server(bundle, store, env={"LAB_STORE_CACHE": str(tmp_path / "server-cache")}, log=tmp_path / "serve.log") as srv:
        with srv.client() as c:
            saved = c.post("/v1/memories", json={"namespace": "atlas", "content": "Wombat ledger 7731 reconciles "
                                                                                   "the billing cluster"}).json()["id"]
            hits = c.post("/v1/search", json={"query": "Wombat ledger 7731", "namespace": "atlas", "k": 3}).json()
            assert hits["config"] == "bm25" and hits["results"][0]["memory_id"] == saved

    pytest.importorskip("mcp")
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT), env=env, args=[
        "-m", "lab", "mcp", "--bundle", str(bundle), "--store", store, "--namespace", "atlas"])

    async def session() -> tuple[str, list[str]]:
        async with Client(params) as c:
            saved = (await c.call_tool("memory_save", {"content": "Okapi escalation rota for the payments "
                                                                  "gateway"})).structured_content
            found = (await c.call_tool("memory_search", {"query": "Okapi escalation rota", "k": 3})).structured_content
            return saved["id"], [r["memory_id"] for r in found["results"]]

    saved_id, ranked = asyncio.run(session())
    assert ranked[0] == saved_id
