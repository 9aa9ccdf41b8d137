"""The OpenAI-compatible proxy, with the official `openai` SDK as the client, a real `lab serve
--proxy-upstream` process, and a small upstream on loopback that records what it received."""
from __future__ import annotations

import time

import pytest

openai = pytest.importorskip("openai")

from serving import ChatUpstream as Upstream  # noqa: E402
from serving import Server, write_bundle  # noqa: E402

from lab.serve.auth import add_key  # noqa: E402


MEMORY = "Melanie's daughter is called Rosa and she plays the violin"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proxy")
    keys = tmp / "keys.yaml"
    secrets = {"writer": add_key(keys, "writer", "write", ["family"]), "reader": add_key(keys, "reader", "read", ["*"])}
    bundle = write_bundle(tmp / "bundle")
    with Upstream() as upstream, Server(bundle, tmp / "store", "--proxy-upstream", upstream.url, "--proxy-timeout", "1",
                                        "--auth", "on", "--keys-file", str(keys), "--rate", "1000",
                                        "--burst", "1000") as srv:
        with srv.client(secrets["writer"]) as c:
            assert c.post("/v1/namespaces", json={"name": "family"}).status_code == 201
            memory_id = c.post("/v1/memories", json={"namespace": "family", "content": MEMORY}).json()["id"]
        yield srv, upstream, secrets, memory_id


def client(srv, key: str, **headers) -> "openai.OpenAI":
    return openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-upstream-secret", max_retries=0,
                         default_headers={"X-API-Key": key, **headers})


QUESTION = [{"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "What instrument does Melanie's daughter Rosa play?"}]


def test_memory_is_injected_where_asked_and_the_answer_comes_back_intact(proxied):
    srv, upstream, secrets, memory_id = proxied
    api = client(srv, secrets["writer"])  # the key names one namespace: it is the proxy's namespace
    raw = api.chat.completions.with_raw_response.create(model="echo", messages=QUESTION)
    answer = raw.parse()
    assert answer.choices[0].message.content == "seen 4 messages"  # the upstream's answer, unchanged
    assert raw.headers["x-lab-memories"].split(",")[0] == memory_id
    assert int(raw.headers["x-lab-context-tokens"]) > 0 and raw.headers["x-lab-position"] == "system"
    sent = upstream.received[-1]
    assert sent["authorization"] == "Bearer sk-upstream-secret"  # the caller's own upstream credentials
    messages = sent["body"]["messages"]
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You are helpful.")
    assert f"[{memory_id}]" in messages[0]["content"] and MEMORY in messages[0]["content"]
    assert messages[1:] == QUESTION[1:]

    api.chat.completions.create(model="echo", messages=QUESTION, extra_body={"lab": {"position": "first_user"}})
    sent = upstream.received[-1]["body"]
    assert "lab" not in sent  # lab's own field is not forwarded
    assert sent["messages"][0] == QUESTION[0]
    assert sent["messages"][1]["content"].startswith("Relevant memories") and sent["messages"][1]["content"].endswith("hello")

    client(srv, secrets["writer"], **{"X-Lab-Position": "before_last_user"}).chat.completions.create(
        model="echo", messages=QUESTION)
    sent = upstream.received[-1]["body"]["messages"]
    assert len(sent) == 5 and sent[:3] == QUESTION[:3] and sent[4] == QUESTION[3]
    assert sent[3]["role"] == "system" and MEMORY in sent[3]["content"]


def test_a_stream_arrives_event_by_event_and_the_exchange_can_be_saved(proxied):
    srv, upstream, secrets, _ = proxied
    api = client(srv, secrets["writer"])
    with api.chat.completions.with_streaming_response.create(
            model="stream", messages=QUESTION, stream=True, extra_body={"lab": {"save": True}}) as response:
        assert response.headers["x-lab-memories"]
        pieces = [chunk.choices[0].delta.content for chunk in response.parse() if chunk.choices[0].delta.content]
    assert pieces == ["seen ", "5 ", "messages"] or pieces == ["seen ", "4 ", "messages"]
    with srv.client(secrets["writer"]) as c:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            items = c.get("/v1/memories", params={"namespace": "family", "type": "episodic"}).json()["items"]
            if len(items) == 2:
                break
            time.sleep(0.1)
    assert sorted(i["content"] for i in items) == sorted([QUESTION[-1]["content"], "".join(pieces)])
    assert {i["metadata"]["role"] for i in items} == {"user", "assistant"}


def test_upstream_errors_pass_through_and_a_silent_upstream_is_504(proxied):
    srv, _, secrets, _ = proxied
    api = client(srv, secrets["writer"])
    with pytest.raises(openai.RateLimitError) as err:
        api.chat.completions.create(model="fail", messages=QUESTION)
    assert err.value.status_code == 429 and "upstream quota exceeded" in str(err.value)
    with pytest.raises(openai.APIStatusError) as err:
        api.chat.completions.create(model="slow", messages=QUESTION)
    assert err.value.status_code == 504 and "did not answer within 1 s" in str(err.value)


def test_auth_scopes_and_bad_options_apply_as_on_rest(proxied):
    srv, _, secrets, _ = proxied
    with pytest.raises(openai.AuthenticationError):
        client(srv, "lab_wrong").chat.completions.create(model="echo", messages=QUESTION)
    reader = client(srv, secrets["reader"])
    with pytest.raises(openai.UnprocessableEntityError, match="X-Lab-Namespace"):
        reader.chat.completions.create(model="echo", messages=QUESTION)  # '*' names no one namespace
    ok = client(srv, secrets["reader"], **{"X-Lab-Namespace": "family"}).chat.completions.create(
        model="echo", messages=QUESTION)
    assert ok.choices[0].message.content == "seen 4 messages"
    with pytest.raises(openai.PermissionDeniedError, match="read-only"):  # saving needs write
        client(srv, secrets["reader"], **{"X-Lab-Namespace": "family"}).chat.completions.create(
            model="echo", messages=QUESTION, extra_body={"lab": {"save": True}})
    with pytest.raises(openai.PermissionDeniedError, match="no access to namespace 'other'"):
        client(srv, secrets["writer"], **{"X-Lab-Namespace": "other"}).chat.completions.create(
            model="echo", messages=QUESTION)
    writer = client(srv, secrets["writer"])
    with pytest.raises(openai.UnprocessableEntityError, match="body.lab.position: Input should be 'system', 'first_user' or 'before_last_user'"):
        writer.chat.completions.create(model="echo", messages=QUESTION, extra_body={"lab": {"position": "sideways"}})
    with pytest.raises(openai.UnprocessableEntityError, match=r"body.lab.colour: unknown field; known: \['budget', 'namespace', 'position', 'save'\]"):
        writer.chat.completions.create(model="echo", messages=QUESTION, extra_body={"lab": {"colour": "red"}})
    with pytest.raises(openai.UnprocessableEntityError, match="no user message"):
        writer.chat.completions.create(model="echo", messages=[{"role": "system", "content": "x"}])


def test_other_v1_paths_pass_through_unchanged_with_the_same_auth(proxied):
    """GET /v1/models (what clients call first) and /v1/embeddings reach the upstream as sent, with
    the caller's credentials and nothing injected; lab's own paths stay lab's."""
    srv, upstream, secrets, _ = proxied
    api = client(srv, secrets["writer"])
    raw = api.models.with_raw_response.list()
    assert [m.id for m in raw.parse().data] == ["echo"] and raw.headers["x-lab-proxy"] == "passthrough"
    assert "x-lab-memories" not in raw.headers
    sent = upstream.received[-1]
    assert sent["path"] == "/v1/models" and sent["authorization"] == "Bearer sk-upstream-secret"
    assert "x-api-key" not in sent["headers"]  # lab's key stays with lab
    vectors = api.embeddings.create(model="e", input="hello")
    assert vectors.data[0].embedding == [0.5, 0.25] and upstream.received[-1]["body"]["input"] == "hello"
    with pytest.raises(openai.AuthenticationError):  # the same auth as the chat route
        client(srv, "lab_wrong").models.list()
    with srv.client(secrets["writer"]) as c:
        own = c.get("/v1/search")  # lab's own path, another method: not forwarded
        assert own.status_code == 405 and own.headers["allow"] == "POST"
        assert c.get("/v1/namespaces").status_code == 200
        missing = c.get("/v1/nothing-here")  # not a path the passthrough allows: never forwarded
        assert missing.status_code == 404 and "x-lab-proxy" not in missing.headers
        assert "setting proxy_passthrough: /v1/models, /v1/embeddings" in missing.json()["error"]["message"]
        gone = c.get("/v1/models/nothing-here")  # an allowed path the upstream does not know: its own 404
        assert gone.status_code == 404 and gone.headers["x-lab-proxy"] == "passthrough"


def test_the_proxy_takes_its_rate_limit_from_the_key(tmp_path):
    keys = tmp_path / "keys.yaml"
    key = add_key(keys, "writer", "write", ["family"])
    with Upstream() as upstream, Server(write_bundle(tmp_path / "bundle"), tmp_path / "store", "--proxy-upstream",
                                        upstream.url, "--auth", "on", "--keys-file", str(keys), "--rate", "0.01",
                                        "--burst", "2") as srv:
        with srv.client(key) as c:
            assert c.post("/v1/namespaces", json={"name": "family"}).status_code == 201  # one token
        api = client(srv, key)
        api.chat.completions.create(model="echo", messages=QUESTION)  # the second
        with pytest.raises(openai.RateLimitError) as err:
            api.chat.completions.create(model="echo", messages=QUESTION)
        assert "rate limit" in str(err.value) and err.value.response.headers["retry-after"]
        assert len(upstream.received) == 1  # the refused request never reached the upstream
