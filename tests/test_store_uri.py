"""A store at a URI (lab.store.location): tables, info and index snapshots at the URI, through
deltalake and pyarrow's filesystem; lock and index copies in a working folder of this machine.
Tested with file:// URIs, which take exactly the object-storage path on a local disk (no object
store is reachable from these machines)."""
from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from lab import workspace
from lab.embed.fake import FakeEmbedder
from lab.errors import ConflictError, ValidationError
from lab.pipeline import Pipeline
from lab.retriever import Retriever
from lab.store.settings import StoreSettings

RECORDS = [{"namespace": "n", "content": f"memory {i}: the {w} report is due on day {i}"}
           for i, w in enumerate(["budget", "travel", "garden", "violin", "mortgage", "marathon"] * 5)]


def contents(store) -> list[tuple]:
    memories = store.memories().sort("id").select("id", "namespace", "content").rows()
    chunks = store.chunks(embeddings=False).sort("chunk_id").select("chunk_id", "memory_id", "text").rows()
    return [memories, chunks]


def test_a_store_at_a_uri_keeps_its_files_there_and_reads_like_a_folder(tmp_path, caplog):
    on = StoreSettings(tmp_path / "machine-a")
    uri = (tmp_path / "bucket" / "stores" / "team").as_uri()
    with Pipeline.open(uri, embedder=FakeEmbedder(), create=True, settings=on) as pipe, \
            Pipeline.open(tmp_path / "folder", embedder=FakeEmbedder(), create=True) as local:
        pipe.save_many(RECORDS, progress=False)
        local.save_many(RECORDS, progress=False)
        assert pipe.store.where == uri and contents(pipe.store) == contents(local.store)
        working = pipe.store.root
    at_uri = tmp_path / "bucket" / "stores" / "team"
    assert {p.name for p in at_uri.iterdir()} == {"lab-store.json", "tables", "indexes"}
    assert (at_uri / "indexes" / "n" / "manifest.json").is_file()  # the snapshot beside the tables
    assert working.parent == tmp_path / "machine-a" and (working / ".lab-write.lock").exists()
    from lab.store.store import Store

    with pytest.raises(ConflictError, match="a store exists already at " + uri):
        Store.create(uri, embed_model="fake", dim=8, save_config={}, settings=on)

    # another machine (another working folder) reads it: the snapshot is fetched, not rebuilt
    on = StoreSettings(tmp_path / "machine-b")
    caplog.set_level(logging.DEBUG, logger="lab.index.manager")
    with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far, Retriever.open(tmp_path / "folder",
                                                                            embedder=FakeEmbedder()) as near:
        query = "when is the violin report due"
        assert [h.memory_id for h in far.search(query, "n", k=5)] == [h.memory_id for h in near.search(query, "n", k=5)]
    assert "no usable snapshot" not in caplog.text
    assert (tmp_path / "machine-b").is_dir() and not any("machine-a" in str(p) for p in (tmp_path / "machine-b").rglob("*"))

    # a write on machine a is seen by machine b's next open, with the newer snapshot
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(uri, embedder=FakeEmbedder(), settings=on) as pipe:
        added = pipe.save("the harp lesson moved to Thursday", "n").created[0]
    on = StoreSettings(tmp_path / "machine-b")
    with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
        assert far.search("the harp lesson moved to Thursday", "n", k=1)[0].memory_id == added
    assert "no usable snapshot" not in caplog.text

    # a deleted namespace leaves no snapshot at the URI either
    on = StoreSettings(tmp_path / "machine-a")
    with Pipeline.open(uri, embedder=FakeEmbedder(), settings=on) as pipe:
        pipe.delete_namespace("n")
    assert not (at_uri / "indexes" / "n").exists()


def test_a_store_is_opened_with_the_settings_handed_to_it_not_the_installed_workspace(tmp_path):
    """The edge hands the store its settings (issue 56): an installed workspace below the edges is
    not read, and no settings means an uninstalled Workspace()'s defaults, as before."""
    workspace.use(store_cache=tmp_path / "installed", write_lock_timeout=7, embed_cache=tmp_path / "installed-cache")
    uri = (tmp_path / "bucket" / "handed").as_uri()
    with Pipeline.open(uri, embedder=FakeEmbedder(), create=True,
                       settings=StoreSettings(tmp_path / "handed", lock_timeout=3)) as pipe:
        assert pipe.store.root.parent == tmp_path / "handed" and pipe.store.settings.lock_timeout == 3
    assert not (tmp_path / "installed").exists() and not (tmp_path / "installed-cache").exists()
    with Pipeline.open(tmp_path / "folder", embedder=FakeEmbedder(), create=True) as pipe:
        assert pipe.store.settings == StoreSettings.of(workspace.Workspace()) == StoreSettings(
            workspace.Workspace().store_cache, {}, workspace.Workspace().write_lock_timeout, None)
        assert pipe.cache is None or pipe.cache.dir.parent == tmp_path / "folder" / "cache" / "embeddings"


def test_a_prefix_holding_something_else_is_refused_and_a_bad_scheme_is_named(tmp_path):
    on = StoreSettings(tmp_path / "cache")
    (tmp_path / "bucket" / "other").mkdir(parents=True)
    (tmp_path / "bucket" / "other" / "notes.txt").write_text("not a store")
    with pytest.raises(ConflictError, match="is not empty and holds no lab store; choose an empty prefix"):
        Pipeline.open((tmp_path / "bucket" / "other").as_uri(), embedder=FakeEmbedder(), create=True, settings=on)
    with pytest.raises(ValidationError, match=r"store s4://b/x: unknown scheme 's4://'; a store is a folder or a URI"):
        Pipeline.open("s4://b/x", embedder=FakeEmbedder(), create=True, settings=on)
    with pytest.raises(ValidationError, match=r"storage_options from \$LAB_STORAGE_OPTIONS: expected a JSON object"):
        workspace.Workspace.resolve({"LAB_STORAGE_OPTIONS": '["AWS_REGION"]'})
    assert workspace.Workspace.resolve({"LAB_STORAGE_OPTIONS": '{"AWS_ALLOW_HTTP": true}'}).storage == {
        "AWS_ALLOW_HTTP": "true"}


def test_the_cli_and_a_real_server_work_on_a_store_at_a_uri(tmp_path):
    from serving import Server, write_bundle

    uri = (tmp_path / "bucket" / "s1").as_uri()
    env = {**os.environ, "LAB_STORE_CACHE": str(tmp_path / "cache")}
    records = tmp_path / "in.jsonl"
    records.write_text('{"namespace": "n", "content": "Alice lives in Paris"}\n'
                       '{"namespace": "n", "content": "Bob has a grey cat named Pixel"}\n')

    def lab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, env=env, cwd=ROOT,
                              timeout=300)

    assert lab("init", "--store", uri, "--model", "fake-hash-256").returncode == 0
    assert "2 new" in lab("ingest", str(records), "--store", uri).stdout
    found = lab("search", "Alice lives in Paris", "--store", uri, "--namespace", "n", "--k", "1")
    assert found.returncode == 0 and "Alice lives in Paris" in found.stdout
    checked = lab("store", "check", "--store", uri)
    assert checked.returncode == 0 and "0 error(s)" in checked.stdout
    bad = lab("search", "x", "--store", "s4://b/x", "--namespace", "n")
    assert bad.returncode == 2 and "unknown scheme 's4://'" in bad.stderr

    bundle = write_bundle(tmp_path / "bundle")
    with Server(bundle, uri, env={"LAB_STORE_CACHE": str(tmp_path / "server-cache")}, log=tmp_path / "serve.log") as srv:
        with srv.client() as c:
            saved = c.post("/v1/memories", json={"namespace": "n", "content": "Carol plays the cello"}).json()["id"]
            hits = c.post("/v1/search", json={"query": "Carol plays the cello", "namespace": "n", "k": 1}).json()
            assert hits["results"][0]["memory_id"] == saved
    shutil.rmtree(tmp_path / "cache")  # the CLI's working folder gone: everything is at the URI
    again = lab("search", "Carol plays the cello", "--store", uri, "--namespace", "n", "--k", "1")
    assert again.returncode == 0 and saved in again.stdout


def test_a_store_on_an_s3_api_through_deltalake_and_pyarrow(tmp_path, monkeypatch):
    """moto's S3 server on loopback: the store's tables, info and snapshots are objects in a
    bucket, with credentials and endpoint from the environment as for any S3-compatible store."""
    pytest.importorskip("moto")
    from serving import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-p", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
                            "AWS_ENDPOINT_URL": endpoint, "AWS_ALLOW_HTTP": "true"}.items():
            monkeypatch.setenv(name, value)
        import boto3
        import httpx

        for _ in range(100):  # the server takes a moment to listen
            try:
                httpx.get(endpoint, timeout=1)
                break
            except httpx.HTTPError:
                import time

                time.sleep(0.1)
        s3 = boto3.client("s3", endpoint_url=endpoint)
        s3.create_bucket(Bucket="memories")
        on = StoreSettings(tmp_path / "machine-a")
        uri = "s3://memories/stores/team"
        with Pipeline.open(uri, embedder=FakeEmbedder(), create=True, settings=on) as pipe:
            pipe.save_many(RECORDS, progress=False)
            written = contents(pipe.store)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="memories")["Contents"]}
        assert "stores/team/lab-store.json" in keys and "stores/team/indexes/n/manifest.json" in keys
        assert any(k.startswith("stores/team/tables/chunks/_delta_log/") for k in keys)
        on = StoreSettings(tmp_path / "machine-b")
        with Retriever.open(uri, embedder=FakeEmbedder(), settings=on) as far:
            assert contents(far.store) == written
            assert far.search(RECORDS[3]["content"], "n", k=1)[0].content == RECORDS[3]["content"]
        assert (tmp_path / "machine-b").is_dir()
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)


def test_errors_hide_the_store_uri_and_a_path_only_where_it_stands_whole():
    from lab.errors import NotFoundError
    from lab.serve.errors import public_message

    said = NotFoundError("unknown namespace 's' in s3://team/mem and /srv/s (create it with POST /v1/namespaces)")
    assert public_message(said, ("/srv/s", "s3://team/mem")) == \
        "unknown namespace 's' in <store> and <store> (create it with POST /v1/namespaces)"
