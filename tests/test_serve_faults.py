"""The server's defects from the fault probe (issue 28), against a real `lab serve` with auth on:
metrics and documents behind the key, a yes/no /ready for strangers, failed logins rate-limited,
a streamed body over the limit refused with 413, superseded_by held to its own namespace, 405
naming every method, and an unexpected error that leaves the connection usable."""
from __future__ import annotations

import asyncio

import pytest

from serving import Server, write_bundle

from lab.serve.app import Unexpected
from lab.serve.auth import add_key

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    bundle = write_bundle(tmp / "bundle")
    keys = tmp / "keys.yaml"
    admin = add_key(keys, "admin", "write", ["*"])
    team = add_key(keys, "team", "write", ["team-a/*"])
    with Server(bundle, tmp / "store", "--auth", "on", "--keys-file", str(keys), "--rate", "20", "--burst", "30",
                "--max-body-bytes", "4000") as srv:
        with srv.client(admin) as c:
            for ns in ("team-a/x", "secret-project"):
                assert c.post("/v1/namespaces", json={"name": ns}).status_code == 201
                assert c.post("/v1/memories", json={"namespace": ns, "content": f"a memory of {ns}"}).status_code == 201
        yield srv, admin, team


def test_metrics_need_a_key_and_name_only_readable_namespaces(secured):
    srv, admin, team = secured
    with srv.client() as anon:
        assert anon.get("/metrics").status_code == 401
        assert anon.get("/openapi.json").status_code == 401
        assert anon.get("/docs").status_code == 401
        assert anon.get("/health").status_code == 200
        assert anon.get("/ready").json() == {"ready": True}  # yes or no, nothing else
    with srv.client(team) as c:
        text = c.get("/metrics").text
        assert 'lab_memories{namespace="team-a/x"} 1.0' in text and "secret-project" not in text
        assert c.get("/ready").json()["namespaces"] == 2
        assert "/v1/search" in c.get("/openapi.json").json()["paths"]
    with srv.client(admin) as c:
        assert 'lab_memories{namespace="secret-project"} 1.0' in c.get("/metrics").text


def test_failed_authentications_are_rate_limited_per_address(secured):
    srv, admin, _ = secured
    with srv.client() as anon:
        codes = [anon.get("/v1/namespaces", headers={"X-API-Key": f"lab_guess{i}"}).status_code for i in range(40)]
    assert codes[0] == 401 and 429 in codes
    with srv.client(admin) as c:  # a valid key has its own bucket: guessing does not lock it out
        assert c.get("/v1/namespaces").status_code == 200


def test_a_streamed_body_over_the_limit_gets_413(secured):
    srv, admin, _ = secured

    def chunks():
        for _ in range(10):
            yield b'{"namespace": "team-a/x", "content": "' + b"x" * 1000

    with srv.client(admin) as c:
        r = c.post("/v1/memories", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and "4000 bytes" in r.json()["error"]["message"]
        small = iter([b'{"namespace": "team-a/x", ', b'"content": "streamed and small"}'])
        assert c.post("/v1/memories", content=small, headers={"Content-Type": "application/json"}).status_code == 201


def test_superseded_by_names_a_memory_of_the_same_namespace(secured):
    srv, admin, _ = secured
    with srv.client(admin) as c:
        mine = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "old fact"}).json()["id"]
        newer = c.post("/v1/memories", json={"namespace": "team-a/x", "content": "new fact"}).json()["id"]
        other = c.get("/v1/memories", params={"namespace": "secret-project"}).json()["items"][0]["id"]
        answers = []
        for target in (other, "team-a-x:no-such-memory"):
            r = c.patch(f"/v1/memories/{mine}", json={"superseded_by": target})
            assert r.status_code == 404 and "superseded_by" in r.json()["error"]["message"], r.text
            answers.append(r.json()["error"]["message"].replace(target, "ID"))
        assert answers[0] == answers[1]  # another namespace's memory is answered as if absent
        assert c.patch(f"/v1/memories/{mine}", json={"superseded_by": mine}).status_code == 422
        assert c.patch(f"/v1/memories/{mine}", json={"superseded_by": newer}).json()["superseded_by"] == newer


def test_405_lists_every_method_of_the_path_and_patterns_are_in_the_document(secured):
    srv, admin, _ = secured
    with srv.client(admin) as c:
        r = c.post("/v1/memories/some-id")
        assert r.status_code == 405
        assert set(r.headers["allow"].split(", ")) == {"GET", "PATCH", "DELETE"}  # no HEAD: not answered
        # every method the path answers (GET /v1/memories/batch reads a memory with that id), but a
        # namespace's statistics are read-only
        assert set(c.put("/v1/memories/batch").headers["allow"].split(", ")) == {"POST", "GET", "PATCH", "DELETE"}
        stats = c.delete("/v1/namespaces/team-a/x/stats")
        assert stats.status_code == 405 and stats.headers["allow"] == "GET" and "read-only" in stats.text
        assert c.put("/v1/namespaces/team-a/x/stats").headers["allow"] == "GET"
        doc = c.get("/openapi.json").json()
        params = {p["name"]: p["schema"] for p in doc["paths"]["/v1/memories/{id}"]["get"]["parameters"]}
        assert "pattern" in params["id"]
        assert c.get("/v1/memories/..%2Fetc").status_code == 422


def test_an_unexpected_error_is_answered_without_closing_the_connection():
    sent: list[dict] = []

    async def broken(scope, receive, send):
        raise RuntimeError("a bug")

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    # no exception escapes (the server closes the connection on one that does), and a 500 is sent
    asyncio.run(Unexpected(broken)({"type": "http", "method": "GET", "path": "/x", "headers": []}, receive, send))
    assert sent[0]["status"] == 500 and b"internal error" in sent[1]["body"]
