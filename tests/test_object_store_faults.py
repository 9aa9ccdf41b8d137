"""A store at a URI under faults (issue 55, F3 F6 F7): an object store that does not answer, storage
options that are refused, objects planted under a snapshot folder, a snapshot copy damaged here or
missing at the URI. moto's S3 server on loopback (a process, stopped by its PID) behind a gate that
refuses connections on demand; file:// URIs for the rest."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time

import httpx
import pytest

from conftest import ROOT
from lab import workspace
from lab.embed.fake import FakeEmbedder
from lab.errors import ValidationError
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.store.settings import StoreSettings

RECORDS = [{"namespace": "n", "content": f"memory {i}: the {w} report is due on day {i}"}
           for i, w in enumerate(["budget", "travel", "garden", "violin", "mortgage", "marathon"] * 4)]


@pytest.fixture(scope="module")
def moto():
    pytest.importorskip("moto")
    from moto_store import Moto

    with Moto() as server:
        yield server


@pytest.fixture
def on_moto(moto, monkeypatch):
    from moto_store import aws_env

    for name, value in aws_env(moto.url).items():
        monkeypatch.setenv(name, value)
    return moto


def lab(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)


def test_keys_that_would_leave_the_snapshot_folder_are_skipped_and_the_snapshot_still_loads(tmp_path, on_moto, caplog):
    on_moto.bucket("planted")
    uri = "s3://planted/team"
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(uri, embedder=FakeEmbedder(), create=True, settings=on) as pipe:
        pipe.save_many(RECORDS, progress=False)
    s3 = on_moto.client()
    folder = "team/indexes/n"
    absolute, climbed = tmp_path / "planted-absolute.txt", tmp_path / "planted-climb.txt"
    s3.put_object(Bucket="planted", Key=f"{folder}/{absolute}", Body=b"x")  # folder + '//' + the absolute path
    s3.put_object(Bucket="planted", Key=f"{folder}/" + "../" * 12 + str(climbed).lstrip("/"), Body=b"y")
    s3.put_object(Bucket="planted", Key=f"{folder}/./dot.txt", Body=b"z")
    manifest = s3.get_object(Bucket="planted", Key=f"{folder}/manifest.json")["Body"].read()
    s3.put_object(Bucket="planted", Key=f"{folder}/manifest.json", Body=manifest + b" ")  # newer: readers fetch

    on = StoreSettings(tmp_path / "machine-b")
    caplog.set_level(logging.DEBUG)
    with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
        assert far.search(RECORDS[3]["content"], "n", k=1)[0].content == RECORDS[3]["content"]
    assert not absolute.exists() and not climbed.exists()
    assert not any(p.name.startswith("planted-") or p.name == "dot.txt" for p in (tmp_path / "machine-b").rglob("*"))
    skipped = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skipped) == 1 and "3 object(s) under indexes/n skipped" in skipped[0] and "s3://planted/team" in skipped[0]
    # the snapshot was used as it is (the stray keys are not part of it): no rebuild
    assert "failed verification" not in caplog.text and "no usable snapshot" not in caplog.text

    # the next writer's upload replaces the folder: the planted objects are gone
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(uri, embedder=FakeEmbedder(), settings=on) as pipe:
        pipe.save("the harp lesson moved to Thursday", "n")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="planted", Prefix=folder + "/")["Contents"]]
    assert not [k for k in keys if "planted-" in k or "dot.txt" in k], keys


def test_an_unreachable_store_is_one_line_naming_it_without_credentials(tmp_path, moto):
    from moto_store import SECRET, Gate, moto_env

    moto.bucket("gone")
    gate = Gate(moto.port).open()
    env = moto_env(gate, LAB_STORE_CACHE=str(tmp_path / "cache"))
    assert lab("init", "--store", "s3://gone/st", "--model", "fake-hash-256", env=env).returncode == 0
    gate.shut()
    for args in (("stats", "--store", "s3://gone/st"), ("search", "x", "--store", "s3://gone/st", "--namespace", "n")):
        got = lab(*args, env=env)
        said = got.stderr.strip().splitlines()
        assert got.returncode == 5 and len(said) == 1, got.stderr
        assert said[0].startswith("error: store s3://gone/st is unreachable (") and "then retry" in said[0]
        assert SECRET not in got.stdout + got.stderr and "Traceback" not in got.stderr


def test_a_server_answers_503_while_its_object_store_is_gone_and_recovers(tmp_path, moto):
    from moto_store import SECRET, Gate, aws_env
    from serving import Server, write_bundle

    moto.bucket("served")
    gate = Gate(moto.port).open()
    env = {**aws_env(gate.url), "LAB_STORE_CACHE": str(tmp_path / "cache"),
           "LAB_STORAGE_OPTIONS": json.dumps({"aws_secret_access_key": SECRET})}
    search = {"namespace": "n", "query": "Alice lives in Paris", "k": 1}
    srv = Server(write_bundle(tmp_path / "bundle"), "s3://served/st", env=env, log=tmp_path / "serve.log")
    with srv:
        with srv.client() as c:
            assert c.post("/v1/namespaces", json={"name": "n"}).status_code in (200, 201)
            assert c.post("/v1/memories", json={"namespace": "n", "content": "Alice lives in Paris"}).status_code == 201
            assert c.post("/v1/search", json=search).status_code == 200
            gate.shut()
            time.sleep(1.5)  # past refresh_seconds: the next search looks for other writers' commits
            for method, path, body in (("POST", "/v1/search", search), ("GET", "/v1/namespaces/n/stats", None),
                                       ("POST", "/v1/memories", {"namespace": "n", "content": "during the outage"})):
                r = c.request(method, path, json=body, timeout=120)
                error = r.json()["error"]
                assert (r.status_code, error["code"]) == (503, "unavailable"), (path, r.text)
                assert "store is unreachable" in error["message"] and SECRET not in r.text
                assert "served/st" not in r.text and "127.0.0.1" not in r.text  # no URI, no endpoint
            ready = c.get("/ready")  # the documented Ready body, not the error one
            assert ready.status_code == 503 and ready.json() == {"ready": False, "error": "the store is unreachable"}
            assert c.get("/health").status_code == 200  # liveness: the process answers
            gate.open()
            hits = c.post("/v1/search", json=search).json()["results"]
            assert hits[0]["content"] == "Alice lives in Paris" and c.get("/ready").status_code == 200
    log = srv.log()
    assert "Traceback" not in log and SECRET not in log
    assert "store s3://served/st is unreachable" in log


def test_storage_options_refused_name_the_option_never_a_value():
    secret = "sekrit-options-99"
    for text, names in (('{"aws_secret_access_key": "%s", "x": [1]}' % secret, "'x' (an array)"),
                        ('{"aws_secret_access_key": "%s", "aws_region": null}' % secret, "'aws_region' (null)"),
                        ('{"aws_secret_access_key": "%s",' % secret, "not JSON at line 1"),
                        ('"%s"' % secret, "got a string"), ('["%s"]' % secret, "got an array")):
        with pytest.raises(ValidationError) as caught:
            workspace.Workspace.resolve({"LAB_STORAGE_OPTIONS": text})
        said = str(caught.value)
        assert said.startswith("storage_options from $LAB_STORAGE_OPTIONS: ") and names in said, said
        assert secret not in said and caught.value.field == "storage_options"


def test_credentials_in_a_store_uri_are_refused_and_not_echoed(tmp_path):
    from lab.store.location import locate

    for uri in ("s3://AKIAUSER:sekrit-uri-1@bucket/st", "s3://sekrit-uri-1@bucket/st", "s3://bucket/st?key=sekrit-uri-1"):
        with pytest.raises(ValidationError) as caught:
            locate(uri, tmp_path)
        assert "credentials or a query in a store URI are refused" in str(caught.value)
        assert "sekrit-uri-1" not in str(caught.value) and caught.value.field == "store"
    assert not list(tmp_path.iterdir())  # no working folder named after a key


def test_fetch_places_a_key_only_inside_its_folder(tmp_path):
    from lab.store.location import inside

    (tmp_path / "snap").mkdir()
    os.symlink(tmp_path, tmp_path / "snap" / "link")
    refused = ("", "/etc/passwd", "a//b", "../x", "a/../../x", "./a", "a/.", "a\\..\\b", "a\x00b", "link/x", "link")
    assert [n for n in refused if inside(tmp_path / "snap", n) is not None] == []
    assert inside(tmp_path / "snap", "bm25/vocab.index.json") == tmp_path / "snap" / "bm25" / "vocab.index.json"


def test_a_damaged_copy_here_is_fetched_again_not_rebuilt(tmp_path, caplog):
    uri = (tmp_path / "bucket" / "st").as_uri()
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(uri, embedder=FakeEmbedder(), create=True, settings=on) as pipe:
        pipe.save_many(RECORDS, progress=False)
    on = StoreSettings(tmp_path / "machine-b")
    with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
        far.search("violin", "n", k=1)
        copy = far.indexes.directory("n")
    (copy / "labels.parquet").write_bytes(b"damaged on this machine")  # the manifest still matches the URI's
    caplog.set_level(logging.DEBUG)
    with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
        assert far.search(RECORDS[5]["content"], "n", k=1)[0].content == RECORDS[5]["content"]
    assert "failed verification" not in caplog.text and "no usable snapshot" not in caplog.text


def test_a_snapshot_missing_at_the_uri_is_uploaded_again_by_the_next_writer(tmp_path):
    at_uri = tmp_path / "bucket" / "st"
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(at_uri.as_uri(), embedder=FakeEmbedder(), create=True, settings=on) as pipe:
        pipe.save_many(RECORDS, progress=False)
    (at_uri / "indexes" / "n" / "manifest.json").unlink()  # an upload cut off before its manifest
    with Pipeline.open(at_uri.as_uri(), embedder=FakeEmbedder(), settings=on) as pipe:  # a writer that writes nothing
        pipe.search("violin", "n", k=1)
    from lab.index.snapshot import verify

    assert verify(at_uri / "indexes" / "n", "n")["n_labels"] == len(RECORDS)
