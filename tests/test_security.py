"""The security issue's defects (issue 41), each against a real `lab serve` on loopback: caller-chosen
ids that probed and squatted other namespaces, MCP sessions not bound to keys, Host/Origin/body
type with auth off, and the chat proxy's gzip, secrets, NaN, key forwarding and cut-off saves.
Every refusal is asserted by its reason (the message), not only its status."""
from __future__ import annotations

import hashlib
import json
import time

import httpx
import pytest

from serving import ChatUpstream, Server, write_bundle

from lab.serve.auth import add_key

pytestmark = pytest.mark.slow

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
SECRET_UPSTREAM = "http://user:hunter2@127.0.0.1:1/v1?api-key=SECRETQ"


def default_id(namespace: str, content: str) -> str:
    """lab's own id for a text (NS:sha256(NS\\0content)[:16]): what an attacker can compute."""
    return namespace + ":" + hashlib.sha256(f"{namespace}\x00{content}".encode()).hexdigest()[:16]


@pytest.fixture(scope="module")
def guarded(tmp_path_factory):
    """Auth on, MCP at /mcp (3 sessions per key), the proxy to an upstream with a query string."""
    tmp = tmp_path_factory.mktemp("guarded")
    keys_file = tmp / "keys.yaml"
    keys = {name: add_key(keys_file, name, scope, patterns) for name, scope, patterns in (
        ("all", "write", ["*"]), ("a", "write", ["team-a/*"]), ("b", "write", ["team-b"]), ("r", "read", ["*"]))}
    with ChatUpstream() as upstream, Server(
            write_bundle(tmp / "bundle"), tmp / "store", "--auth", "on", "--keys-file", str(keys_file), "--mcp",
            "--mcp-sessions-per-key", "3", "--rate", "1000", "--burst", "1000",
            "--proxy-upstream", upstream.url + "?api-version=2024-06-01") as srv:
        with srv.client(keys["all"]) as c:
            for ns in ("team-a/x", "team-b"):
                assert c.post("/v1/namespaces", json={"name": ns}).status_code == 201
        yield srv, keys, upstream


@pytest.fixture(scope="module")
def open_door(tmp_path_factory):
    """Auth off (the loopback default), MCP and the proxy (to an upstream URL holding secrets)."""
    tmp = tmp_path_factory.mktemp("open")
    with ChatUpstream() as upstream, Server(write_bundle(tmp / "bundle"), tmp / "store", "--mcp",
                                            "--proxy-upstream", upstream.url, "--proxy-save", "on") as srv:
        with srv.client() as c:
            assert c.post("/v1/namespaces", json={"name": "me"}).status_code == 201
        yield srv, upstream


# ------------------------------------------------------------------ ids across namespaces
def test_an_id_in_another_namespace_neither_answers_nor_blocks_its_owner(guarded):
    srv, keys, _ = guarded
    secret = "the launch code is 4711"
    with srv.client(keys["b"]) as b:
        stored = b.post("/v1/memories", json={"namespace": "team-b", "content": secret}).json()["id"]
    assert stored == default_id("team-b", secret)
    later = "the launch code will be 0815"  # team-b saves this only after the attacker tried its id
    with srv.client(keys["a"]) as a:
        answers = []
        for guess in (default_id("team-b", secret), default_id("team-b", later)):
            r = a.post("/v1/memories", json={"namespace": "team-a/x", "content": f"probe {guess}", "id": guess})
            assert r.status_code == 422, r.text
            error = r.json()["error"]
            assert error["field"] == "body.id" or error["field"] == "id", error
            assert "is not an id of namespace 'team-a/x'" in error["message"]
            answers.append(error["message"].replace(guess, "GUESS"))
        assert answers[0] == answers[1]  # held or not held by team-b: the same answer
        batch = a.post("/v1/memories/batch", json={"memories": [
            {"namespace": "team-a/x", "content": "fine"},
            {"namespace": "team-a/x", "content": "probe", "id": default_id("team-b", later)}]})
        assert batch.status_code == 422 and "memories.1.id" in batch.json()["error"]["message"]
        # its own namespace's ids are its own to choose
        mine = a.post("/v1/memories", json={"namespace": "team-a/x", "content": "mine", "id": "team-a/x:note-1"})
        assert mine.status_code == 201 and mine.json()["id"] == "team-a/x:note-1"
        assert a.get("/v1/namespaces/team-a/x/stats").json()["memories"] == 1  # the refused saves wrote nothing
    with srv.client(keys["b"]) as b:  # the owner's own later saves are not blocked
        r = b.post("/v1/memories/batch", json={"memories": [{"namespace": "team-b", "content": later}]})
        assert r.status_code == 201 and r.json()["memories"][0]["id"] == default_id("team-b", later)
        assert b.post("/v1/memories", json={"namespace": "team-b", "content": "x", "id": "team-a/x:note-1"}
                      ).status_code == 422  # an id taken in team-a/x is not even looked up from team-b


def test_mcp_save_with_another_namespaces_id_is_refused_before_any_lookup(guarded):
    srv, keys, _ = guarded
    with httpx.Client(base_url=srv.url, timeout=30,
                      headers={**MCP_HEADERS, "Authorization": f"Bearer {keys['a']}"}) as c:
        sid = c.post("/mcp", json=INIT).headers["mcp-session-id"]
        h = {"mcp-session-id": sid}
        c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)
        texts = []
        for guess in (default_id("team-b", "the launch code is 4711"), default_id("team-b", "never stored")):
            r = c.post("/mcp", headers=h, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "memory_save", "arguments": {"content": "probe", "namespace": "team-a/y", "id": guess}}})
            texts.append(r.text.replace(guess, "GUESS"))
        assert "is not an id of namespace 'team-a/y'" in texts[0] and texts[0] == texts[1]
        c.delete("/mcp", headers=h)
    with srv.client(keys["all"]) as c:  # the refused save did not create its namespace either
        assert "team-a/y" not in c.get("/v1/namespaces").json()["items"]


# ------------------------------------------------------------------ MCP sessions
def open_session(srv: Server, key: str) -> httpx.Response:
    return httpx.post(srv.url + "/mcp", json=INIT, headers={**MCP_HEADERS, "Authorization": f"Bearer {key}"},
                      timeout=30)


def tools_list(srv: Server, key: str, sid: str) -> httpx.Response:
    return httpx.post(srv.url + "/mcp", json={"jsonrpc": "2.0", "id": 5, "method": "tools/list"}, timeout=30,
                      headers={**MCP_HEADERS, "Authorization": f"Bearer {key}", "mcp-session-id": sid})


def test_a_session_belongs_to_its_key_and_each_key_holds_a_few(guarded):
    srv, keys, _ = guarded
    sid = open_session(srv, keys["a"]).headers["mcp-session-id"]
    assert tools_list(srv, keys["a"], sid).status_code == 200
    unknown = tools_list(srv, keys["b"], "0" * 32)
    stolen = tools_list(srv, keys["b"], sid)  # key b with key a's session id: as if there were none
    assert stolen.status_code == unknown.status_code == 404 and stolen.content == unknown.content
    assert "Session not found" in stolen.text
    ended = httpx.delete(srv.url + "/mcp", timeout=30,
                         headers={**MCP_HEADERS, "Authorization": f"Bearer {keys['b']}", "mcp-session-id": sid})
    assert ended.status_code == 404  # b cannot end it either ...
    assert tools_list(srv, keys["a"], sid).status_code == 200  # ... and a's session goes on
    # read-only key r opens its three, then is refused by name; the other keys are not locked out
    opened = [open_session(srv, keys["r"]) for _ in range(3)]
    assert all(r.status_code == 200 for r in opened)
    fourth = open_session(srv, keys["r"])
    assert fourth.status_code == 429, fourth.text
    assert "key 'r' holds 3 open MCP sessions" in fourth.json()["error"]["message"]
    assert "mcp_sessions_per_key" in fourth.json()["error"]["message"]
    assert open_session(srv, keys["b"]).status_code == 200
    first = opened[0].headers["mcp-session-id"]
    assert httpx.delete(srv.url + "/mcp", timeout=30, headers={
        **MCP_HEADERS, "Authorization": f"Bearer {keys['r']}", "mcp-session-id": first}).status_code == 200
    assert open_session(srv, keys["r"]).status_code == 200  # ending one makes room


def test_an_idle_session_is_closed_after_the_setting(tmp_path):
    keys_file = tmp_path / "keys.yaml"
    key = add_key(keys_file, "k", "read", ["*"])
    with Server(write_bundle(tmp_path / "bundle"), tmp_path / "store", "--auth", "on", "--keys-file", str(keys_file),
                "--mcp", "--mcp-sessions-per-key", "1", "--mcp-session-idle", "1") as srv:
        sid = open_session(srv, key).headers["mcp-session-id"]
        assert open_session(srv, key).status_code == 429  # one at a time
        time.sleep(2.5)
        assert tools_list(srv, key, sid).status_code == 404  # idled out ...
        assert open_session(srv, key).status_code == 200  # ... and no longer counted


# ------------------------------------------------------------------ Host, Origin, body type
def test_with_auth_off_a_foreign_host_a_cross_site_origin_and_a_non_json_body_are_refused(open_door):
    srv, upstream = open_door
    with srv.client() as c:
        r = c.get("/v1/namespaces", headers={"Host": "evil.example"})
        assert r.status_code == 421 and "Host 'evil.example' is not this server's name" in r.json()["error"]["message"]
        assert c.post("/mcp", json=INIT, headers={**MCP_HEADERS, "Host": "evil.example:80"}).status_code == 421
        assert c.get("/v1/namespaces", headers={"Host": f"localhost:{srv.port}"}).status_code == 200
        r = c.post("/v1/memories", json={"namespace": "me", "content": "from a page"},
                   headers={"Origin": "http://evil.example"})
        assert r.status_code == 403 and "Origin 'http://evil.example' is another site" in r.json()["error"]["message"]
        r = c.post("/v1/memories", json={"namespace": "me", "content": "same site"},
                   headers={"Origin": srv.url})
        assert r.status_code == 201
        # a page's "simple" request: text/plain needs no preflight, so it must not be read as JSON
        before = len(upstream.received)
        page = json.dumps({"model": "m", "messages": [{"role": "user", "content": "save me"}], "lab": {"namespace": "me"}})
        for path in ("/v1/chat/completions", "/v1/memories"):
            r = c.post(path, content=page, headers={"Content-Type": "text/plain"})
            assert r.status_code == 415, (path, r.text)
            assert "Content-Type 'text/plain' is not JSON" in r.json()["error"]["message"]
        assert len(upstream.received) == before  # nothing forwarded
        assert c.get("/v1/namespaces/me/stats").json()["memories"] == 1  # nothing saved but the same-site one


# ------------------------------------------------------------------ the chat proxy
def ask(srv: Server, key: str | None, body: dict | str, **headers: str) -> httpx.Response:
    h = {"Content-Type": "application/json", **({"X-API-Key": key} if key else {}), **headers}
    content = body if isinstance(body, str) else json.dumps(body)
    return httpx.post(srv.url + "/v1/chat/completions", content=content, headers=h, timeout=30)


def test_proxy_keeps_the_query_decodes_gzip_and_never_forwards_labs_key(guarded):
    srv, keys, upstream = guarded
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "lab": {"namespace": "team-a/x"}}
    r = ask(srv, keys["a"], body, Authorization=f"Bearer {keys['a']}")  # a client with lab's key as its api_key
    assert r.status_code == 200, r.text
    seen = upstream.received[-1]
    assert seen["query"] == "api-version=2024-06-01"  # the path appended before the query, the query kept
    assert seen["authorization"] is None and keys["a"] not in json.dumps(seen["headers"])
    r = ask(srv, keys["a"], {**body, "model": "gzip-stream", "stream": True})
    assert r.status_code == 200 and "compressed " in r.text and "[DONE]" in r.text  # readable SSE, not gzip bytes
    for text, why in (('{"model": "m", "temperature": NaN, "messages": [{"role": "user", "content": "x"}]}',
                       "NaN is not a JSON value"),
                      ('{"model": "m", "messages": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply")):
        r = ask(srv, keys["a"], text)
        assert r.status_code == 422 and why in r.json()["error"]["message"], r.text[:200]
    assert "Traceback" not in srv.log()


def test_proxy_errors_hide_the_upstreams_secrets(open_door, tmp_path):
    with Server(write_bundle(tmp_path / "bundle"), tmp_path / "store", "--proxy-upstream", SECRET_UPSTREAM) as srv:
        with srv.client() as c:
            c.post("/v1/namespaces", json={"name": "me"})
        r = ask(srv, None, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "lab": {"namespace": "me"}})
        assert r.status_code == 502
        message = r.json()["error"]["message"]
        assert "http://127.0.0.1:1/v1/chat/completions could not be reached" in message
        assert "hunter2" not in message and "SECRETQ" not in message
        srv.stop()
        assert "hunter2" not in srv.log() and "SECRETQ" not in srv.log()


def test_a_client_that_leaves_mid_stream_does_not_get_its_partial_answer_saved(open_door):
    srv, upstream = open_door
    body = {"model": "endless", "stream": True, "messages": [{"role": "user", "content": "tell me everything"}],
            "lab": {"namespace": "me", "save": True}}
    with srv.client() as c:
        before = c.get("/v1/namespaces/me/stats").json()["memories"]
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            for n, _ in enumerate(r.iter_lines()):
                if n > 5:
                    break  # leave in the middle of the answer
        time.sleep(1.5)
        assert c.get("/v1/namespaces/me/stats").json()["memories"] == before
        # a complete stream is still saved (question and answer)
        done = c.post("/v1/chat/completions", json={**body, "model": "m"})
        assert done.status_code == 200
        time.sleep(0.5)
        assert c.get("/v1/namespaces/me/stats").json()["memories"] == before + 2


# ------------------------------------------------------------------ one error, every face
def test_the_same_bad_question_gets_the_same_error_through_rest_mcp_and_the_proxy(guarded):
    """Errors come from one mapping (lab.serve.errors): a LabError reads the same on every face,
    an unknown MCP argument is refused naming the known ones, and no text carries pydantic's link."""
    srv, keys, upstream = guarded
    asked = {"query": "what is stored", "namespace": "team-a/nowhere"}  # readable by key a, never created
    with srv.client(keys["a"]) as c:
        rest = c.post("/v1/search", json=asked).json()["error"]
        assert rest["status"] == 404 and "unknown namespace 'team-a/nowhere'" in rest["message"]
        budget = c.post("/v1/context", json={**asked, "budget": 0}).json()["error"]
    proxied = ask(srv, keys["a"], {"model": "m", "messages": [{"role": "user", "content": asked["query"]}],
                                   "lab": {"namespace": asked["namespace"]}}).json()["error"]
    with httpx.Client(base_url=srv.url, timeout=30,
                      headers={**MCP_HEADERS, "Authorization": f"Bearer {keys['a']}"}) as c:
        h = {"mcp-session-id": c.post("/mcp", json=INIT).headers["mcp-session-id"]}
        c.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=h)

        def tool(name: str, **arguments) -> str:
            r = c.post("/mcp", headers=h, json={"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                                "params": {"name": name, "arguments": arguments}})
            line = next(l for l in r.text.splitlines() if l.startswith("data:") or l.startswith("{"))
            result = json.loads(line.removeprefix("data:"))["result"]
            assert result["isError"], result
            return result["content"][0]["text"]

        assert tool("memory_search", **asked) == rest["message"] == proxied["message"]
        unknown = tool("memory_search", query="x", namespace="team-a/x", kk=3)
        assert "unknown argument(s) ['kk']" in unknown and "'k'" in unknown
        zero = tool("memory_context", **asked, budget=0)
        assert zero.split(": ", 1)[1] == budget["message"].split(": ", 1)[1]  # the same limit, said the same way
        assert "pydantic" not in zero + unknown + budget["message"]
        c.delete("/mcp", headers=h)
