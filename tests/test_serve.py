"""`lab serve` end to end: a real server subprocess on a loopback port, spoken to over HTTP."""
from __future__ import annotations

import concurrent.futures as cf
import os
import subprocess
import sys

import pytest
import yaml

from serving import ROOT, Server, acknowledged_survive_sigkill, write_bundle

from lab.errors import ValidationError
from lab.serve.auth import KeyRing, RateLimiter, add_key, hash_key
from lab.serve.settings import load_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    return write_bundle(tmp_path_factory.mktemp("bundle") / "bundle")


@pytest.fixture(scope="module")
def server(bundle, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("served")
    with Server(bundle, tmp / "store", "--max-body-bytes", "20000") as srv:
        yield srv


def mem(c, ns, content, **kw):
    r = c.post("/v1/memories", json={"namespace": ns, "content": content, **kw})
    assert r.status_code == 201, r.text
    return r.json()


def lexical_ids(c, ns, query):
    """Results the BM25 signal found (the fake embedder's vectors find everything in a tiny namespace)."""
    r = c.post("/v1/search", json={"namespace": ns, "query": query})
    assert r.status_code == 200, r.text
    return [h["memory_id"] for h in r.json()["results"] if "lexical" in h["signals"]]


def search_ids(c, ns, query, **kw):
    r = c.post("/v1/search", json={"namespace": ns, "query": query, **kw})
    assert r.status_code == 200, r.text
    return [h["memory_id"] for h in r.json()["results"]]


# --------------------------------------------------------------------------- no server needed
def test_settings_come_from_flags_then_environment_then_file(tmp_path):
    conf = tmp_path / "serve.yaml"
    conf.write_text(yaml.safe_dump({"port": 9001, "rate": 5, "host": "0.0.0.0"}))
    env = {"LAB_SERVE_PORT": "9002"}
    s = load_settings({"port": None, "host": None}, env=env, config_file=conf)
    assert (s.port, s.rate, s.host, s.auth_on) == (9002, 5.0, "0.0.0.0", True)  # auth: on off loopback
    assert load_settings({"port": 9003}, env=env, config_file=conf).port == 9003
    assert not load_settings({}, env={}).auth_on  # loopback by default: auth off
    with pytest.raises(ValidationError, match=r"setting port from \$LAB_SERVE_PORT: 'eighty' is not an integer"):
        load_settings({}, env={"LAB_SERVE_PORT": "eighty"})
    assert load_settings({}, env={"LAB_SERVE_QUERY_EMBEDDERS": "0"}).query_embedders == 0  # in process
    with pytest.raises(ValidationError, match=r"setting query_embedders from \$LAB_SERVE_QUERY_EMBEDDERS must be a finite number >= 0 and <= 16, got -1"):
        load_settings({}, env={"LAB_SERVE_QUERY_EMBEDDERS": "-1"})
    with pytest.raises(ValidationError, match=r"setting model_threads from \$LAB_SERVE_MODEL_THREADS must be a finite number > 0 and <= 64, got 0"):
        load_settings({}, env={"LAB_SERVE_MODEL_THREADS": "0"})
    assert load_settings({}, env={"LAB_SERVE_EMBED_TIMEOUT_S": "2.5"}).embed_timeout_s == 2.5
    with pytest.raises(ValidationError, match=r"setting embed_timeout_s from \$LAB_SERVE_EMBED_TIMEOUT_S must be a finite number >= 1 and <= 86400, got -1.0"):
        load_settings({}, env={"LAB_SERVE_EMBED_TIMEOUT_S": "-1"})
    conf.write_text(yaml.safe_dump({"prot": 1}))
    with pytest.raises(ValidationError, match=r"unknown setting\(s\) \['prot'\]"):
        load_settings({}, env={}, config_file=conf)


def test_keys_are_stored_hashed_and_grant_namespace_patterns(tmp_path):
    keys = tmp_path / "keys.yaml"
    secret = add_key(keys, "team", "write", ["team-a/*", "project-x"])
    text = keys.read_text()
    assert secret not in text and hash_key(secret) in text
    ring = KeyRing.load(keys, env={"LAB_API_KEYS": '[{"name": "env", "key": "s3cret", "namespaces": "*"}]'})
    team, env_key = ring.find(secret), ring.find("s3cret")
    assert team.can("team-a/notes", write=True) and team.can("project-x")
    assert not team.can("team-a") and not team.can("team-b/notes") and not team.can("project-xy")
    assert env_key.can("anything") and not env_key.can("anything", write=True)  # read is the default scope
    assert ring.find("wrong") is None
    keys.write_text(yaml.safe_dump({"keys": [{"name": "x", "key": "plain", "namespaces": ["*"]}]}))
    with pytest.raises(ValidationError, match="secrets are not kept in a keys file"):
        KeyRing.load(keys, env={})
    with pytest.raises(ValidationError, match="namespace pattern '../x'"):
        KeyRing.load(None, env={"LAB_API_KEYS": '[{"name": "y", "key": "k", "namespaces": ["../x"]}]'})


def test_token_bucket_refills_at_its_rate():
    now = [0.0]
    limiter = RateLimiter(rate=2, burst=3, clock=lambda: now[0])
    assert [limiter.take("a") for _ in range(3)] == [0, 0, 0]
    assert limiter.take("a") == pytest.approx(0.5)
    assert limiter.take("b") == 0  # buckets are per caller
    now[0] = 0.5
    assert limiter.take("a") == 0


def test_serve_refuses_a_bundle_that_is_not_go_and_auth_without_keys(tmp_path):
    nogo = write_bundle(tmp_path / "nogo", verdict="NO-GO")
    lab = [sys.executable, "-m", "lab", "serve", "--store", str(tmp_path / "s"), "--port", "1"]
    got = subprocess.run([*lab, "--bundle", str(nogo)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert got.returncode == 4 and "its gate verdict is 'NO-GO', not GO" in got.stderr
    go = write_bundle(tmp_path / "go")
    got = subprocess.run([*lab, "--bundle", str(go), "--host", "0.0.0.0"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120, env={**os.environ, "LAB_API_KEYS": ""})
    assert got.returncode == 2 and "no API keys" in got.stderr
    got = subprocess.run([*lab], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'empty.db'}"})
    assert got.returncode == 3 and "no registered model version models:/lab-memory@champion" in got.stderr


# --------------------------------------------------------------------------- one server
def test_every_write_is_seen_by_the_next_request(server):
    with server.client() as c:
        assert c.post("/v1/namespaces", json={"name": "team-a/notes"}).status_code == 201
        assert c.post("/v1/namespaces", json={"name": "team-a/notes"}).status_code == 409
        a = mem(c, "team-a/notes", "the billing service runs on postgres", tags=["billing"], type="fact")
        assert a["status"] == "created"
        assert search_ids(c, "team-a/notes", "billing postgres")[0] == a["id"]  # the very next request
        batch = c.post("/v1/memories/batch", json={"memories": [
            {"namespace": "team-a/notes", "content": "deploys happen on tuesdays"},
            {"namespace": "team-a/notes", "content": "the billing service runs on postgres"},
            {"namespace": "team-a/notes", "content": "deploys happen on tuesdays"}]}).json()
        assert [m["status"] for m in batch["memories"]] == ["created", "duplicate", "duplicate"]
        assert batch["memories"][1]["id"] == a["id"] and batch["memories"][0]["id"] == batch["memories"][2]["id"]
        got = c.get(f"/v1/memories/{a['id']}").json()
        assert got["content"] == "the billing service runs on postgres" and got["tags"] == ["billing"]

        patched = c.patch(f"/v1/memories/{a['id']}", json={"content": "the billing service moved to mysql"})
        assert patched.status_code == 200 and patched.json()["content"].endswith("mysql")
        assert a["id"] in lexical_ids(c, "team-a/notes", "mysql")
        assert a["id"] not in lexical_ids(c, "team-a/notes", "postgres")
        assert c.delete(f"/v1/memories/{a['id']}").json() == {"id": a["id"], "deleted": 1, "hard": False}
        assert a["id"] not in search_ids(c, "team-a/notes", "mysql billing")
        assert c.get(f"/v1/memories/{a['id']}").json()["valid"] is False
        assert c.delete(f"/v1/memories/{a['id']}", params={"hard": "true"}).status_code == 200
        assert c.get(f"/v1/memories/{a['id']}").status_code == 404


def test_list_pages_with_a_cursor_edges_and_namespace_stats(server):
    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "pages"})
        ids = [mem(c, "pages", f"note number {i}", created_at=f"2026-01-0{i}T00:00:00Z")["id"] for i in range(1, 6)]
        seen, cursor = [], None
        while True:
            page = c.get("/v1/memories", params={"namespace": "pages", "limit": 2, **({"cursor": cursor} if cursor else {})}).json()
            seen += [m["id"] for m in page["items"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            mem(c, "pages", f"written while paging {len(seen)}")  # newer: must not shift the pages
        assert seen == ids[::-1]
        assert c.post("/v1/edges", json={"edges": [{"src": ids[0], "dst": ids[1], "relation": "supersedes"}]}).json() == {"added": 1}
        edges = c.get("/v1/edges", params={"namespace": "pages"}).json()["items"]
        assert [(e["src"], e["dst"], e["relation"]) for e in edges] == [(ids[0], ids[1], "supersedes")]
        stats = c.get("/v1/namespaces/pages/stats").json()
        assert stats["memories"] == 7 and stats["edges"] == 1 and stats["index"]["live_chunks"] >= 7
        assert c.delete("/v1/edges", params={"src": ids[0], "dst": ids[1]}).json() == {"added": -1}
        assert c.get("/v1/edges", params={"namespace": "pages"}).json()["items"] == []
        assert "pages" in c.get("/v1/namespaces").json()["items"]
        assert c.delete("/v1/namespaces/pages").json() == {"name": "pages", "memories": 7}
        assert c.post("/v1/search", json={"namespace": "pages", "query": "note"}).status_code == 404


def test_a_write_by_another_process_is_seen_within_the_refresh_interval(server):
    import time

    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "shared"})
        mem(c, "shared", "written through the server")
        with Pipeline.open(server.store, embedder=FakeEmbedder()) as pipe:  # another writer, same store
            other = pipe.save("written beside the server by a batch job", namespace="shared").created[0]
        deadline = time.monotonic() + 10
        while other not in lexical_ids(c, "shared", "batch job") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert other in lexical_ids(c, "shared", "batch job")
        assert mem(c, "shared", "and the server writes on after it")["status"] == "created"
        assert c.get(f"/v1/memories/{other}").status_code == 200


def test_context_has_zones_usage_and_citations(server):
    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "ctx"})
        for i in range(12):
            mem(c, "ctx", f"the deploy pipeline step {i} runs the integration tests")
        r = c.post("/v1/context", json={"namespace": "ctx", "query": "deploy pipeline tests", "budget": 60,
                                        "format": "markdown"}).json()
        assert 0 < r["used"] <= r["budget"] == 60
        assert set(r["zones"]) == {"critical", "middle", "recency"}
        assert [x["memory_id"] for x in r["citations"]] == [i["memory_id"] for i in r["items"]]
        assert all(x["marker"] in r["text"] or f"**{x['marker']}**" in r["text"] for x in r["citations"])
        assert any(s["reason"] == "no-space" for s in r["skipped"])


def test_a_bundle_with_a_learned_fuser_is_served_and_explained(tmp_path):
    """Export carries the learned model in the bundle's configuration; the server ranks by it and
    explains each result by the model's features."""
    import math
    from dataclasses import replace

    from lab.config import LearnedFusion
    from lab.search.presets import preset

    model = LearnedFusion(features=("base_rel", "coverage", "in:lexical"), mean=(0.5, 0.2, 0.5), scale=(0.3, 0.2, 0.5),
                          coef=(1.5, 0.75, 0.5), intercept=-1.0, trained_on="by hand")
    config = replace(preset("lab"), name="lab-learned", fusion=replace(preset("lab").fusion, learned=model))
    learned_bundle = write_bundle(tmp_path / "bundle", config=config)
    with Server(learned_bundle, tmp_path / "store") as srv, srv.client() as c:
        c.post("/v1/namespaces", json={"name": "n"})
        for i, text in enumerate(["the pool size is 64", "Priya owns the pool service", "lunch was pasta"]):
            mem(c, "n", text, id=f"n:m{i}")
        r = c.post("/v1/search", json={"namespace": "n", "query": "pool size", "explain": True})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["config"] == "lab-learned" and body["results"][0]["memory_id"] == "n:m0"
        for hit in body["results"]:
            assert set(hit["learned"]) == {"base_rel", "coverage", "in:lexical", "bias"}
            assert hit["score"] == pytest.approx(1 / (1 + math.exp(-sum(hit["learned"].values()))), abs=1e-5)
        plain = c.post("/v1/search", json={"namespace": "n", "query": "pool size"}).json()
        assert [h["memory_id"] for h in plain["results"]] == [h["memory_id"] for h in body["results"]]
        assert all("learned" not in h or h["learned"] is None for h in plain["results"])


def test_errors_name_the_problem_and_leak_nothing(server):
    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "errs"})
        cases = [
            (c.post("/v1/search", json={"namespace": "errs", "query": "x", "k": 0}), 422, "body.k"),
            (c.post("/v1/search", json={"namespace": "errs", "query": "x", "kk": 3}), 422, "body.kk"),
            (c.post("/v1/memories", json={"namespace": "errs", "content": "x", "created_at": "yesterday"}), 422, "body.created_at"),
            (c.post("/v1/memories", content=b"{not json", headers={"content-type": "application/json"}), 422, None),
            (c.post("/v1/namespaces", json={"name": "../../etc"}), 422, None),
            (c.get("/v1/memories/errs:nope"), 404, None),
            (c.post("/v1/search", json={"namespace": "missing", "query": "x"}), 404, None),
            (c.post("/v1/memories", json={"namespace": "errs", "content": "x" * 30_000}), 413, None),
            (c.get("/v1/nothing-here"), 404, None),
        ]
        for response, status, field in cases:
            body = response.json()["error"]
            assert response.status_code == status == body["status"], response.text
            if field:
                assert body["field"] == field and field.split(".")[-1] in body["message"], body
            text = response.text
            assert "Traceback" not in text and str(server.store) not in text and "/tmp" not in text, text
        assert "known:" not in c.post("/v1/search", json={"namespace": "missing", "query": "x"}).text
        ready = c.get("/ready").json()
        # a folder named bundle is named by the folder it is in (the gate run's), never by its path
        assert ready["served"]["source"] == f"bundle {server.bundle.parent.name}" and "/" not in str(ready["served"])


def _batched(c) -> tuple[int, int]:
    """(searches, searches answered alone) from the server's metrics."""
    lines = dict(line.rsplit(" ", 1) for line in c.get("/metrics").text.splitlines()
                 if line.startswith("lab_search_batch_size_"))
    return int(float(lines["lab_search_batch_size_sum"])), int(float(lines['lab_search_batch_size_bucket{le="1.0"}']))


def test_concurrent_searches_are_answered_together_as_each_would_be_alone(server):
    topics = ["billing runs on postgres", "deploys happen on tuesdays", "the cache is redis", "Priya owns payments",
              "the outage was ERR-4471", "backups run nightly"]
    with server.client() as c:
        for ns in ("burst-a", "burst-b"):
            c.post("/v1/namespaces", json={"name": ns})
            r = c.post("/v1/memories/batch", json={"memories": [
                {"namespace": ns, "content": f"{t} ({ns} note {i})", "type": "event" if i % 2 else "fact"}
                for i, t in enumerate(topics * 3)]})
            assert r.status_code == 201, r.text
        asks = [{"namespace": ns, "query": q, "k": k, **({"filters": {"types": ["event"]}} if f else {})}
                for ns in ("burst-a", "burst-b") for q, k, f in
                [("billing database", 3, False), ("who owns payments", 5, True), ("deploy day", 1, False),
                 ("outage code", 8, True), ("redis", 4, False), ("nightly backups", 2, True), ("tuesday", 7, False)]]
        asks.append({"namespace": "burst-none", "query": "billing"})  # its error must stay its own

        def ask(body):
            r = c.post("/v1/search", json=body)
            return r.status_code, [(h["memory_id"], h["score"]) for h in r.json().get("results", [])]

        alone = [ask(body) for body in asks]
        assert [code for code, _ in alone] == [200] * (len(asks) - 1) + [404]
        assert all(len(hits) == body["k"] for (_, hits), body in zip(alone[:-1], asks))
        before = _batched(c)
        for _ in range(10):  # until the server has answered some of them in one batch
            with cf.ThreadPoolExecutor(len(asks)) as pool:
                assert list(pool.map(ask, asks)) == alone
            total, single = (a - b for a, b in zip(_batched(c), before))
            if single < total:
                break
        assert single < total, "no two concurrent searches were answered together"

        # the query-embedding process killed under load: no 500, at worst a 503 asking to retry,
        # and the next searches are answered by a new process
        worker = subprocess.run(["pgrep", "-P", str(server.proc.pid), "-f", "lab.embed.worker"],
                                capture_output=True, text=True).stdout.split()
        assert len(worker) == 1, worker
        with cf.ThreadPoolExecutor(8) as pool:
            pending = [pool.submit(c.post, "/v1/search", json=body) for body in asks[:-1] * 2]
            os.kill(int(worker[0]), 9)
            answers = [f.result() for f in pending]
        assert {r.status_code for r in answers} <= {200, 503}
        for r in answers:
            if r.status_code == 503:
                assert r.headers["Retry-After"] == "1" and "retry" in r.json()["error"]["message"]
        assert [ask(body) for body in asks] == alone


def test_metrics_and_openapi(server):
    with server.client() as c:
        c.post("/v1/namespaces", json={"name": "met"})
        mem(c, "met", "a memory to count")
        search_ids(c, "met", "count")
        text = c.get("/metrics").text
        assert 'lab_http_requests_total{method="POST",route="/v1/search",status="200"}' in text
        assert 'lab_memories{namespace="met"} 1.0' in text
        assert "lab_search_duration_seconds_count" in text and "lab_commit_group_size_bucket" in text
        doc = c.get("/openapi.json").json()
        assert {"/v1/search", "/v1/context", "/v1/memories", "/v1/memories/batch", "/v1/edges", "/v1/namespaces",
                "/health", "/ready", "/metrics"} <= set(doc["paths"])
        assert c.get("/docs").status_code == 200


# (schemathesis over the served OpenAPI document, no 5xx and every status, type and body as
# documented, no traceback in the log: the fault suite, group schema, in CI its short form; the full
# form runs every phase with more examples, with the chat proxy on, and again with auth on.)


# --------------------------------------------------------------------------- auth
def test_keys_namespaces_scopes_and_rate_limit(bundle, tmp_path):
    keys = tmp_path / "keys.yaml"
    admin = add_key(keys, "admin", "write", ["*"])
    team = add_key(keys, "team", "write", ["team-a/*"])
    reader = add_key(keys, "reader", "read", ["*"])
    # this server embeds queries in its own process (query_embedders 0), the other path
    with Server(bundle, tmp_path / "store", "--auth", "on", "--keys-file", str(keys), "--rate", "2", "--burst", "20",
                env={"LAB_SERVE_QUERY_EMBEDDERS": "0"}) as srv:
        with srv.client(admin) as c:
            for ns in ("team-a/x", "other"):
                assert c.post("/v1/namespaces", json={"name": ns}).status_code == 201
        with srv.client() as anon:
            r = anon.post("/v1/search", json={"namespace": "other", "query": "x"})
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
            assert anon.get("/health").status_code == 200  # liveness needs no key
            assert anon.get("/v1/namespaces", headers={"X-API-Key": "lab_wrong"}).status_code == 401
            assert anon.get("/v1/namespaces", headers={"X-API-Key": team}).json()["items"] == ["team-a/x"]
        with srv.client(team) as c:
            assert mem(c, "team-a/x", "team memory")["status"] == "created"
            assert c.post("/v1/search", json={"namespace": "other", "query": "x"}).status_code == 403
            assert c.post("/v1/memories", json={"namespace": "other", "content": "x"}).status_code == 403
        with srv.client(reader) as c:
            assert c.post("/v1/search", json={"namespace": "team-a/x", "query": "team"}).status_code == 200
            denied = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "x"})
            assert denied.status_code == 403 and "read-only" in denied.json()["error"]["message"]
            codes = [c.get("/v1/namespaces").status_code for _ in range(25)]
            assert 429 in codes
            limited = c.get("/v1/namespaces")
            assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1


# --------------------------------------------------------------------------- durability
def test_acknowledged_writes_survive_sigkill_and_are_group_committed(bundle, tmp_path):
    srv = Server(bundle, tmp_path / "store", "--rate", "1000000", "--burst", "1000000").start()
    try:
        with srv.client() as c:  # group commit: concurrent creates share commits
            c.post("/v1/namespaces", json={"name": "grouped"})
            with cf.ThreadPoolExecutor(16) as pool:
                got = list(pool.map(lambda i: c.post("/v1/memories", json={"namespace": "grouped", "content": f"grouped {i}"}).status_code,
                                    range(64)))
            assert got == [201] * 64
            lines = {line.split(" ")[0]: float(line.split(" ")[1]) for line in c.get("/metrics").text.splitlines()
                     if line.startswith("lab_commit_group_size_")}
            assert lines["lab_commit_group_size_sum"] >= 64 and lines["lab_commit_group_size_count"] < 64
        for _ in range(2):
            outcome = acknowledged_survive_sigkill(srv)
            assert outcome["acknowledged"] >= 60 and outcome["lost"] == []
    finally:
        srv.stop()
