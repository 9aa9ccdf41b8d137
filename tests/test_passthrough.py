"""The proxy's passthrough (`lab serve --proxy-upstream`, every /v1 path that is not lab's own):
a real server, requests written to its socket as given (no client-side normalisation), and an
upstream that records each request line exactly as it arrived."""
from __future__ import annotations

import base64
import json

import pytest

from raw_upstream import RawUpstream, raw_request
from serving import Server, write_bundle

from lab.errors import ValidationError
from lab.serve.auth import add_key
from lab.serve.settings import Settings, load_settings

UPSECRET = "UPSECRET"


@pytest.fixture(scope="module")
def passing(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("passthrough")
    keys = tmp / "keys.yaml"
    secrets = {"writer": add_key(keys, "writer", "write", ["*"]), "reader": add_key(keys, "reader", "read", ["*"])}
    with RawUpstream() as up, Server(write_bundle(tmp / "bundle"), tmp / "store", "--auth", "on", "--keys-file",
                                     str(keys), "--proxy-upstream", f"{up.url}/base/v1?api-key={UPSECRET}",
                                     "--rate", "100000", "--burst", "100000",
                                     env={"LAB_SERVE_PROXY_PASSTHROUGH": "models, embeddings,files"}) as srv:
        with srv.client(secrets["writer"]) as c:
            assert c.post("/v1/namespaces", json={"name": "notes"}).status_code == 201
        yield srv, up, secrets


def ask(srv, up, method, target, key, headers=None, body=b""):
    n0 = len(up.received)
    h = {**({"X-API-Key": key} if key else {}), **({"Content-Type": "application/json"} if body else {}), **(headers or {})}
    code, got_headers, text = raw_request(srv.port, method, target, h, body)
    return code, got_headers, text, up.since(n0)


@pytest.mark.parametrize("target,names", [
    ("/v1/../admin", "dot segment"), ("/v1/models/../../../secret", "dot segment"),
    ("/v1/%2e%2e/admin", "dot segment"), ("/v1/%2E%2e/%2e%2e/admin", "dot segment"),
    ("/v1/..%2f..%2fadmin", "encoded '/'"), ("/v1/models%2f..%2f..", "encoded '/'"),
    ("/v1/models%5c..%5c..", "encoded '/' or '\\'"), ("/v1/./././models", "dot segment"),
    ("/v1/models%00", "control character '\\x00'"), ("/v1/models%0d%0aX-Injected:%201", "control character '\\r'"),
    ("/v1/%252e%252e/admin", "percent-encoded twice"), ("/v1//evil.example/x", "empty"),
    ("/v1/memories/abc%0Adef", "control character '\\n'"),  # under a path of lab's own: not a 405
    ("/v1/%ff%fe", "UTF-8"), ("/v1/models/..;/admin", "dot segment"), ("/v1/models/.;x/y", "dot segment"),
    ("/v1/models/%2e%2e%3b/admin", "dot segment")])
def test_a_path_that_could_leave_the_base_path_is_refused_naming_why(passing, target, names):
    srv, up, secrets = passing
    code, _, text, got = ask(srv, up, "GET", target, secrets["writer"])
    error = json.loads(text)["error"]
    assert code == 400 and names in error["message"] and error["field"] == "path", text
    assert got == []  # nothing reached the upstream, with or without its credentials


def test_an_allowed_path_stays_under_the_base_path_with_its_query(passing):
    srv, up, secrets = passing
    code, headers, text, got = ask(srv, up, "GET", "/v1/models?limit=2", secrets["reader"])
    assert code == 200 and headers["x-lab-proxy"] == "passthrough"
    assert [g["target"] for g in got] == [f"/base/v1/models?api-key={UPSECRET}&limit=2"]
    # a '?' or '@' decoded from the path stays inside its segment, re-quoted
    code, _, _, got = ask(srv, up, "GET", "/v1/models/gpt%3Fx=1%23@evil.example", secrets["reader"])
    assert code == 200 and [g["target"] for g in got] == [f"/base/v1/models/gpt%3Fx=1%23@evil.example?api-key={UPSECRET}"]
    # a ';' goes out encoded: no upstream reads path parameters out of it
    code, _, _, got = ask(srv, up, "GET", "/v1/models/a;b", secrets["reader"])
    assert code == 200 and [g["target"] for g in got] == [f"/base/v1/models/a%3Bb?api-key={UPSECRET}"]
    code, _, _, got = ask(srv, up, "POST", "/v1/embeddings", secrets["writer"], body=b'{"input": "x"}')
    assert code == 200 and got[0]["line"].startswith("POST /base/v1/embeddings?") and got[0]["body"] == '{"input": "x"}'


def test_a_path_the_allow_list_does_not_name_is_404_naming_the_setting(passing):
    srv, up, secrets = passing
    for target in ("/v1/responses", "/v1/admin/keys", "/v1/modelsx", "/v1/Models"):
        code, _, text, got = ask(srv, up, "GET", target, secrets["writer"])
        message = json.loads(text)["error"]["message"]
        assert code == 404 and target in message and "proxy_passthrough" in message, text
        assert "/v1/models, /v1/embeddings, /v1/files" in message and got == []


def test_a_read_only_key_may_only_get_through_the_passthrough(passing):
    srv, up, secrets = passing
    for method, target, body in (("POST", "/v1/embeddings", b'{"input": "x"}'), ("DELETE", "/v1/files/file-1", b""),
                                 ("PUT", "/v1/files/file-1", b"{}")):
        code, _, text, got = ask(srv, up, method, target, secrets["reader"], body=body)
        message = json.loads(text)["error"]["message"]
        assert code == 403 and "key 'reader' is read-only" in message and f"{method} {target}" in message, text
        assert got == []
    code, _, _, got = ask(srv, up, "DELETE", "/v1/files/file-1", secrets["writer"])
    assert code == 200 and [g["line"].split(" ")[:2] for g in got] == [["DELETE", f"/base/v1/files/file-1?api-key={UPSECRET}"]]


def test_no_lab_key_reaches_the_upstream_in_any_authorization_scheme(passing):
    srv, up, secrets = passing
    w, r = secrets["writer"], secrets["reader"]

    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    for name, value in (("Token", f"Token {r}"), ("Basic key:", f"Basic {b64(r + ':')}"),
                        ("Basic user:key", f"Basic {b64('me:' + r)}"), ("Basic unpadded", f"Basic {b64(r).rstrip('=')}"),
                        ("bare", r), ("bearer, odd case and spaces", f"bEaReR   {w} "),
                        ("Token with a quoted key", f'Token token="{r}"')):
        for header in ("Authorization", "X-Upstream-Authorization"):
            code, _, _, got = ask(srv, up, "GET", "/v1/models", w, headers={header: value})
            sent = got[0]["headers"] if got else {}
            assert code == 200 and "authorization" not in sent, (name, header, sent.get("authorization"))
            assert not any(k in json.dumps(sent) for k in (w, r))
    code, _, _, got = ask(srv, up, "GET", "/v1/models", w, headers={"Authorization": "Bearer sk-upstream"})
    assert got[0]["headers"]["authorization"] == "Bearer sk-upstream"  # the caller's own upstream key goes on


def test_the_chat_path_with_a_trailing_slash_is_the_chat_route(passing):
    srv, up, secrets = passing
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                       "lab": {"namespace": "notes"}}).encode()
    code, headers, _, got = ask(srv, up, "POST", "/v1/chat/completions/", secrets["writer"], body=body)
    assert code == 200 and headers["x-lab-namespace"] == "notes" and "x-lab-proxy" not in headers
    assert [g["target"] for g in got] == [f"/base/v1/chat/completions?api-key={UPSECRET}"]
    assert "lab" not in json.loads(got[0]["body"])  # lab's own field never leaves
    for target in ("/v1/chat/completions", "/v1/chat/completions/"):
        code, headers, text, got = ask(srv, up, "GET", target, secrets["writer"])
        assert code == 405 and headers["allow"] == "POST" and got == [], text


def test_the_server_log_holds_no_traceback_and_no_upstream_secret(passing):
    srv, up, secrets = passing
    ask(srv, up, "GET", "/v1/models%00", secrets["writer"])
    log = srv.log()
    assert "Traceback" not in log and UPSECRET not in log


def test_the_allow_list_setting_is_declared_and_checked():
    assert Settings().proxy_passthrough == ("models", "embeddings")
    got = load_settings({}, env={"LAB_SERVE_PROXY_PASSTHROUGH": "models, fine_tuning/jobs,"})
    assert got.proxy_passthrough == ("models", "fine_tuning/jobs")
    assert load_settings({}, env={"LAB_SERVE_PROXY_PASSTHROUGH": ","}).proxy_passthrough == ()
    for bad in ("../admin", "models/..", "/models", "models//x", "a b"):
        with pytest.raises(ValidationError, match="setting proxy_passthrough: .* is not a path prefix") as err:
            Settings(proxy_passthrough=(bad,))
        assert repr(bad) in str(err.value) and err.value.field == "proxy_passthrough"


def test_lab_serve_takes_the_allow_list_as_a_flag():
    from lab.cli import build_parser

    args = build_parser().parse_args(["serve", "--proxy-passthrough", "models,files"])
    assert load_settings({"proxy_passthrough": args.proxy_passthrough}).proxy_passthrough == ("models", "files")


def test_without_a_valid_key_nothing_about_the_path_is_told(passing):
    srv, up, _ = passing
    for key in ("", "lab_wrong"):
        code, _, text, got = ask(srv, up, "GET", "/v1/%2e%2e/admin", key)
        assert code == 401 and "API key" in json.loads(text)["error"]["message"] and got == []


def test_a_method_the_passthrough_does_not_forward_is_405_with_its_allow(passing):
    srv, up, secrets = passing
    for method in ("HEAD", "OPTIONS", "TRACE"):
        code, headers, text, got = ask(srv, up, method, "/v1/models", secrets["writer"])
        assert code == 405 and headers["allow"] == "GET, POST, PUT, PATCH, DELETE" and got == [], (method, headers)
        if method != "HEAD":
            assert f"{method} is not passed through" in json.loads(text)["error"]["message"]
    code, headers, _, got = ask(srv, up, "OPTIONS", "/v1/chat/completions", secrets["writer"])
    assert code == 405 and headers["allow"] == "POST" and got == []


def test_a_mistyped_upstream_is_refused_without_its_secret():
    with pytest.raises(ValidationError, match="must be an http:// or https:// URL") as err:
        Settings(proxy_upstream="htps://user:UPKEY@llm.example/v1?api-key=QKEY")
    assert "UPKEY" not in str(err.value) and "QKEY" not in str(err.value) and "llm.example" in str(err.value)
