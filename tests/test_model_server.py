"""Embeddings from an OpenAI-compatible server (lab.embed.server), against a recording fake server:
both ways of naming one, the cache, secrets, bounds, retries and every fault the issue lists."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from lab.config import EmbedConfig, SaveConfig
from lab.embed import make_embedder
from lab.embed.fake import FakeEmbedder
from lab.embed.server import ServerError
from lab.errors import ConflictError, ValidationError
from lab.pipeline import Pipeline
from tests.model_server import ModelServer

KEY = "sk-test-0123456789abcdefSECRET"
WORDS = ["apple", "birch", "cobalt", "dune", "ember", "fjord", "garnet", "harbor", "iris", "juniper", "kelp", "lagoon"]
TEXTS = [f"note about {w}: the quarterly {w} report was filed" for w in WORDS]


@pytest.fixture()
def server():
    with ModelServer(dim=64) as s:
        yield s


def model_file(tmp_path: Path, base_url: str, **settings) -> str:
    import yaml

    spec = {"kind": "openai-embeddings", "model": "fake-embed", "base_url": base_url, **settings}
    path = tmp_path / "model.yaml"
    path.write_text(yaml.safe_dump(spec))
    return f"openai:{path}"


def embedder(name: str, env: dict | None = None, monkeypatch=None):
    if env and monkeypatch is not None:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
    return make_embedder(EmbedConfig(model=name, cache=False))


def test_vectors_equal_the_model_behind_the_server_and_the_id_names_model_and_url(server):
    model = embedder(f"openai:fake-embed@{server.base_url}")
    assert model.model_id == f"openai:fake-embed@{server.base_url}"
    got = model.embed(TEXTS)
    assert got.shape == (12, 64) and model.dim == 64
    np.testing.assert_allclose(got, FakeEmbedder(64).embed(TEXTS), atol=1e-6)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0)
    body = server.requests[-1]["body"]
    assert body["model"] == "fake-embed" and body["encoding_format"] == "float"


def test_batches_and_concurrency_stay_within_the_declared_limits(server, tmp_path):
    model = embedder(model_file(tmp_path, server.base_url, batch_size=2, concurrency=3))
    server.faults = [{"delay": 0.15}] * 12
    model.embed(TEXTS)
    embeds = [r for r in server.requests if r["path"].endswith("/embeddings")]
    assert all(len(r["body"]["input"]) <= 2 for r in embeds)
    assert sum(len(r["body"]["input"]) for r in embeds) == 12  # no probe: the first answer gives the dimension
    assert 2 <= server.most_in_flight <= 3, server.most_in_flight


def test_prefixes_and_dimension_from_a_file_change_the_id_and_transport_settings_do_not(server, tmp_path):
    plain = embedder(f"openai:fake-embed@{server.base_url}")
    transport = embedder(model_file(tmp_path, server.base_url, batch_size=7, concurrency=2, timeout_s=5))
    assert transport.model_id == plain.model_id  # same vectors: one cache, one store model
    prefixed = embedder(model_file(tmp_path, server.base_url, query_prefix="query: ", passage_prefix="passage: ",
                                   dimensions=64))
    assert prefixed.model_id.startswith(plain.model_id + "#") and not prefixed.symmetric
    prefixed.embed_queries(["billing"])
    assert server.requests[-1]["body"]["input"] == ["query: billing"]
    prefixed.embed(["billing"])
    assert server.requests[-1]["body"]["input"] == ["passage: billing"]


def test_a_second_run_makes_no_calls_and_a_store_records_the_model_id(server, tmp_path):
    name = f"openai:fake-embed@{server.base_url}"
    records = [{"content": t} for t in TEXTS]
    cache = tmp_path / "cache"
    with Pipeline.open(tmp_path / "a", SaveConfig(embed=EmbedConfig(model=name)), create=True, cache_dir=cache) as pipe:
        pipe.save_many(records, namespace="ns", progress=False)
        assert pipe.store.info.embed_model == name
    first = len(server.requests)
    assert first >= 2
    # another store of the same texts: every vector comes from the cache, and the dimension too (no probe)
    with Pipeline.open(tmp_path / "b", SaveConfig(embed=EmbedConfig(model=name)), create=True, cache_dir=cache) as pipe:
        pipe.save_many(records, namespace="ns", progress=False)
    assert len(server.requests) == first
    # reopening the first store asks nothing either (its dimension is recorded)
    with Pipeline.open(tmp_path / "a", cache_dir=cache) as pipe:
        vector = pipe.cache.embed(pipe.embedder, [TEXTS[0]], queries=True)[0]
        hits = pipe.retriever.search_response(TEXTS[0], "ns", 3, query_vector=vector).results
        assert hits[0].content == TEXTS[0]
    assert len(server.requests) == first


def test_the_key_is_sent_from_the_declared_variable_and_never_shown(tmp_path, monkeypatch):
    monkeypatch.setenv("MY_EMBED_KEY", KEY)
    with ModelServer(dim=64, key=KEY) as server:
        name = model_file(tmp_path, server.base_url, reads_env=["MY_EMBED_KEY"], auth={"env": "MY_EMBED_KEY"})
        model = embedder(name)
        model.embed(["hello"])
        assert server.requests[-1]["headers"]["Authorization"] == f"Bearer {KEY}"
        assert KEY not in model.model_id and KEY not in repr(model.spec)
        monkeypatch.setenv("MY_EMBED_KEY", "sk-wrong-key-000000000000")
        with pytest.raises(ServerError) as refused:
            embedder(name).embed(["hello"])
        message = str(refused.value)
        assert "refused the key (401)" in message and "$MY_EMBED_KEY" in message
        assert "sk-wro" not in message and "0000" not in message, "the key (or the part the server quoted) is shown"
        assert "\n" not in message


def test_an_undeclared_key_variable_is_refused_by_name(tmp_path, server):
    with pytest.raises(ValidationError, match=r"\$\{OTHER_KEY\}.*does not declare"):
        embedder(model_file(tmp_path, server.base_url, reads_env=["MY_KEY"], auth={"env": "OTHER_KEY"}))


def test_429_and_5xx_are_retried_after_retry_after(server, tmp_path):
    model = embedder(model_file(tmp_path, server.base_url, dimensions=64))
    server.faults = [{"status": 429, "retry_after": "0.3"}, {"status": 503}]
    started = time.monotonic()
    got = model.embed(["a", "b"])
    assert time.monotonic() - started >= 0.3, "Retry-After was not honoured"
    assert got.shape == (2, 64)
    assert [r["fault"].get("status") for r in server.requests] == [429, 503, None]


def test_a_slow_answer_is_abandoned_at_timeout_and_retried(server, tmp_path):
    model = embedder(model_file(tmp_path, server.base_url, dimensions=64, timeout_s=0.3))
    server.faults = [{"delay": 1.0}]
    assert model.embed(["a"]).shape == (1, 64)
    assert len(server.requests) == 2


def test_the_deadline_bounds_a_call_whatever_the_server_does(server, tmp_path):
    model = embedder(model_file(tmp_path, server.base_url, dimensions=64, deadline_s=1.0))
    server.faults = [{"status": 503, "retry_after": "0.4"}] * 20
    started = time.monotonic()
    with pytest.raises(ServerError, match=r"no usable answer within deadline_s 1 \(\d attempt\(s\); last: 503"):
        model.embed(["a"])
    assert time.monotonic() - started < 1.5
    server.faults = [{"drip": 3.0}]  # a body dripped a byte at a time never trips a read timeout
    model = embedder(model_file(tmp_path, server.base_url, dimensions=64, deadline_s=1.0, retries=0))
    started = time.monotonic()
    with pytest.raises(ServerError, match="did not finish within the deadline"):
        model.embed(["a"])
    assert time.monotonic() - started < 1.6


@pytest.mark.parametrize("fault, message", [
    ({"dim": 32}, r"answered 32-dimensional vectors, expected 64"),
    ({"nan": True}, r"vector of text 0 holds NaN"),
    ({"cut": "json"}, r"not whole JSON \(cut short\?\)"),
    ({"cut": "vectors"}, r"holds 1 vectors for 2 texts"),
])
def test_a_wrong_answer_is_refused_naming_what_is_wrong(server, tmp_path, fault, message):
    model = embedder(model_file(tmp_path, server.base_url, dimensions=64, retries=0))
    server.faults = [fault]
    with pytest.raises(ServerError, match=message):
        model.embed(["a", "b"])


def test_an_unreachable_server_is_one_line_naming_the_url_within_the_deadline(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = embedder(model_file(tmp_path, f"http://127.0.0.1:{port}/v1", dimensions=8, deadline_s=1.5))
    started = time.monotonic()
    with pytest.raises(ServerError) as failed:
        model.embed(["a"])
    assert time.monotonic() - started < 2.5
    message = str(failed.value)
    assert f"http://127.0.0.1:{port}/v1/embeddings" in message and "cannot reach" in message and "\n" not in message


def test_a_model_the_server_does_not_serve_is_named(server):
    with pytest.raises(ServerError, match=r"404 for model 'text-embedding-9'.*does it serve that model"):
        embedder(f"openai:text-embedding-9@{server.base_url}").embed(["a"])


def test_a_dimension_change_between_runs_is_refused_naming_both(tmp_path):
    name_for = {}
    with ModelServer(dim=64) as server:
        name_for[64] = f"openai:fake-embed@{server.base_url}"
        with Pipeline.open(tmp_path / "s", SaveConfig(embed=EmbedConfig(model=name_for[64])), create=True,
                           cache_dir=tmp_path / "c") as pipe:
            pipe.save_many([{"content": "first"}], namespace="ns", progress=False)
        server.embed_fn = FakeEmbedder(32).embed  # the server now serves another model under the name
        with Pipeline.open(tmp_path / "s", cache_dir=tmp_path / "c") as pipe:
            with pytest.raises(ServerError, match="answered 32-dimensional vectors, expected 64"):
                pipe.save_many([{"content": "second"}], namespace="ns", progress=False)
            assert pipe.store.memories("ns").height == 1  # nothing already stored was lost


def test_a_server_dying_mid_ingest_loses_nothing_acknowledged_and_a_rerun_completes_from_the_cache(tmp_path):
    many = [{"content": f"memory {i} about the deploy checklist of cluster {i}"} for i in range(150)]
    with ModelServer(dim=64) as server:
        name = model_file(tmp_path, server.base_url, dimensions=64, retries=0, batch_size=64, concurrency=1)
        with Pipeline.open(tmp_path / "s", SaveConfig(embed=EmbedConfig(model=name)), create=True,
                           cache_dir=tmp_path / "c") as pipe:
            pipe.save_many(many[:4], namespace="ns", progress=False)  # acknowledged before the server dies
            server.faults = [{}, {}, {"status": 500}]  # embedding ahead: 64 + 64 texts answered, then a 500
            with pytest.raises(ServerError, match=r"no usable answer after 1 attempt\(s\) \(retries 0\).*last: 500"):
                pipe.save_many(many[4:], namespace="ns", progress=True)
            assert pipe.store.memories("ns")["content"].to_list() == [m["content"] for m in many[:4]]
        sent = server.texts_embedded()
        # a new process: the vectors answered before the failure were written to the cache
        with Pipeline.open(tmp_path / "s", cache_dir=tmp_path / "c") as pipe:
            report = pipe.save_many(many, namespace="ns", progress=True)
            assert pipe.store.memories("ns").height == 150 and len(report.created) == 146
        assert server.texts_embedded() - sent == 146 - 128, "the rerun embedded texts the cache already held"


def test_lab_eval_through_a_keyed_server_writes_the_key_nowhere(tmp_path):
    """`lab eval --model openai:FILE` tracked in MLflow: the key is in no run folder file, no MLflow
    record or artifact, no output line, while the server saw it on every request."""
    import os
    import subprocess
    import sys

    with ModelServer(dim=64, key=KEY) as server:
        name = model_file(tmp_path, server.base_url, reads_env=["MY_EMBED_KEY"], auth={"env": "MY_EMBED_KEY"})
        env = {**os.environ, "MY_EMBED_KEY": KEY, "LAB_EVAL_ROOT": str(tmp_path / "eval"),
               "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
        got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--preset", "bm25", "--model",
                              name, "--out", str(tmp_path / "runs"), "--tracking-uri",
                              f"sqlite:///{tmp_path / 'mlflow.db'}"],
                             capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
        assert got.returncode == 0, got.stderr[-2000:]
        assert server.requests and all(r["headers"]["Authorization"] == f"Bearer {KEY}" for r in server.requests)
    assert KEY not in got.stdout + got.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != "model.yaml"]
    assert any(p.suffix == ".db" for p in written) and any("runs" in p.parts for p in written)
    leaked = [str(p) for p in written if KEY.encode() in p.read_bytes()]
    assert not leaked, f"the key was written to {leaked}"


def test_a_key_in_the_base_url_never_reaches_a_log_line_or_an_error(tmp_path, monkeypatch, caplog):
    import logging

    monkeypatch.setenv("URL_KEY", KEY)
    with ModelServer(dim=64) as server:
        name = model_file(tmp_path, f"{server.base_url}?api-key=${{URL_KEY}}", reads_env=["URL_KEY"], retries=0)
        model = embedder(name)
        assert KEY not in model.model_id and "api-key=***" in model.model_id
        with caplog.at_level(logging.DEBUG, logger="httpx"):
            model.embed(["hello"])
        assert any("/embeddings" in r.getMessage() for r in caplog.records), "httpx logged no request line"
        assert KEY not in caplog.text
        server.faults = [{"status": 500}]
        with pytest.raises(ServerError) as failed:
            model.embed(["again"])
        assert KEY not in str(failed.value) and "last: 500" in str(failed.value)


def test_the_client_loggers_are_left_as_found_after_a_request(server):
    import logging

    from lab.config.file_env import CLIENT_LOGGERS

    # as found, not "without filters": a command run earlier in this process (lab.cli's
    # quiet_chatty_libraries) may have put its own filter on httpx's loggers
    before = {name: list(logging.getLogger(name).filters) for name in CLIENT_LOGGERS}
    embedder(f"openai:fake-embed@{server.base_url}").embed(["hello"])
    assert {name: list(logging.getLogger(name).filters) for name in CLIENT_LOGGERS} == before


def test_a_model_file_whose_yaml_aliases_explode_is_refused(tmp_path):
    from lab.config.reading import YAML_ALIAS_NODES
    from tests.test_adapter_security import bomb

    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(9))
    with pytest.raises(ValidationError, match=f"more than {YAML_ALIAS_NODES} nodes"):
        make_embedder(EmbedConfig(model=f"openai:{path}", cache=False))
