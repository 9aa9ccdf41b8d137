"""An HTTP adapter file against a hostile server (a real one on loopback, and a second host it
tries to steer requests to): a captured value stays inside its path segment, a value that would
move a request to another host is refused naming it, only scalar captures are kept, every call ends
within its deadline and reads at most its size bound, and a NaN or infinite score is refused
naming its field. No error shows the file's bearer token."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from lab.adapters.base import AdapterError, Guarded, MemorySystem
from lab.adapters.registry import open_system
from lab.errors import ValidationError

TOKEN = "tok-SECRET-42"


class Hostile(BaseHTTPRequestHandler):
    """A Chroma-shaped server whose answers ``self.server.mode`` decides; it records each request."""
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, body: bytes, code: int = 200) -> None:
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        srv: Any = self.server
        srv.seen.append((self.path, dict(self.headers)))
        mode = srv.mode
        if self.path == "/collections":
            value = srv.capture if mode == "capture" else "c-" + body["name"]
            return self._send(json.dumps({"id": value}).encode())
        if self.path.endswith("/add"):
            srv.ids.extend(body.get("ids", []))
            return self._send(b"{}")
        ids = srv.ids[:3]
        if mode == "drip":  # a valid answer, one byte every 0.2 s: no read ever times out
            payload = json.dumps({"ids": [ids], "distances": [[0.1] * len(ids)]}).encode()
            self.send_response(200)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            for b in payload:
                try:
                    self.wfile.write(bytes([b]))
                    self.wfile.flush()
                except OSError:
                    return
                time.sleep(0.2)
            return
        if mode == "huge":  # 4 MB, chunked: no length declared up front
            self.send_response(200)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for _ in range(64):
                    self.wfile.write(b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                pass
            self.close_connection = True
            return
        if mode == "declared-huge":
            return self._send(b'{"ids": [[]], "distances": [[]], "pad": "' + b"y" * (2 << 20) + b'"}')
        if mode in ("nan", "inf"):
            value = "NaN" if mode == "nan" else "-Infinity"
            return self._send(('{"ids": [%s], "distances": [[%s, 0.5]]}' % (json.dumps(ids[:2]), value)).encode())
        if mode == "hits-nan":
            return self._send(('{"results": [{"id": %s, "score": Infinity}]}' % json.dumps(ids[0])).encode())
        return self._send(json.dumps({"ids": [ids], "distances": [[0.1] * len(ids)]}).encode())


@pytest.fixture
def servers():
    """(the system's server, another host) on loopback, each recording what reached it."""
    made = []
    for _ in range(2):
        srv: Any = ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
        srv.mode, srv.capture, srv.seen, srv.ids = "normal", None, [], []
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        srv.url = f"http://127.0.0.1:{srv.server_address[1]}"
        made.append(srv)
    yield made
    for srv in made:
        srv.shutdown()
        srv.server_close()


def adapter(tmp_path, url: str, prefix: str = "/c/{collection}", extra: str = "", search: str = "") -> MemorySystem:
    path = tmp_path / "hostile.yaml"
    path.write_text(f"""kind: http
name: hostile
reads_env: [HOSTILE_TOKEN]
base_url: {url}
auth: {{header: Authorization, env: HOSTILE_TOKEN, prefix: "Bearer "}}
timeout_s: 5
{extra}reset:
  - {{method: POST, path: /collections, body: {{name: "{{namespace}}"}}, capture: {{collection: id}}}}
save:
  path: "{prefix}/add"
  body: {{ids: {{$each: "{{id}}"}}}}
  ids: $request
search:
  path: "{prefix}/query"
  body: {{q: "{{query}}", k: "{{k}}"}}
{search or '  id: "ids[0][*]"' + chr(10) + '  distance: "distances[0][*]"' + chr(10)}""")
    return open_system(str(path), tmp_path / "scratch", env={"HOSTILE_TOKEN": TOKEN})


MEMORIES = [{"id": "m1", "content": "one"}, {"id": "m2", "content": "two"}]


def test_a_captured_traversal_stays_inside_its_path_segment(tmp_path, servers):
    srv, _ = servers
    srv.mode, srv.capture = "capture", "../../../../admin/drop?all=1#"
    with adapter(tmp_path, srv.url) as system:
        system.reset("a")
        system.save("a", MEMORIES)
    paths = [p for p, _ in srv.seen]
    assert paths[1] == "/c/%2E%2E%2F%2E%2E%2F%2E%2E%2F%2E%2E%2Fadmin%2Fdrop%3Fall%3D1%23/add", paths
    assert not any(p.startswith("/admin") for p in paths)


@pytest.mark.parametrize("steer", ["{other}/steal", "//{host}/steal", "{other}"])
def test_a_captured_url_that_would_change_the_host_is_refused_naming_the_capture(tmp_path, servers, steer):
    srv, other = servers
    value = steer.format(other=other.url, host=other.url.removeprefix("http://"))
    srv.mode, srv.capture = "capture", value
    with adapter(tmp_path, srv.url, prefix="{collection}") as system:
        system.reset("a")
        with pytest.raises(AdapterError) as got:
            system.save("a", MEMORIES)
    message = str(got.value)
    assert "{collection} (captured)" in message and repr(value) in message and "leaves base_url's host" in message
    assert TOKEN not in message
    assert other.seen == []  # nothing, and no token, reached the other host
    assert len(srv.seen) == 1  # only the create call: the save was refused before it was sent


def test_an_absolute_path_in_the_file_itself_is_refused_before_it_is_sent(tmp_path, servers):
    srv, other = servers
    with adapter(tmp_path, srv.url, prefix=other.url + "/c") as system:
        with pytest.raises(AdapterError, match=r"save: POST http://127\.0\.0\.1:\d+/c/add: refused, the path would "
                                               r"be an absolute URL that leaves base_url's host: the path template"):
            system.save("a", MEMORIES)
    assert other.seen == [] and srv.seen == []


@pytest.mark.parametrize("value, kind", [(["c-1", "c-2"], "list"), ({"a": 1}, "dict")])
def test_a_capture_that_is_not_a_scalar_is_refused_naming_it(tmp_path, servers, value, kind):
    srv, _ = servers
    srv.mode, srv.capture = "capture", value
    with adapter(tmp_path, srv.url) as system:
        with pytest.raises(AdapterError, match=rf"reset: POST /collections: the value at 'id' to capture as "
                                               rf"\{{collection\}} is a {kind}, not a string, number or boolean"):
            system.reset("a")
    assert len(srv.seen) == 1


def test_a_capture_too_long_for_a_url_is_refused(tmp_path, servers):
    srv, _ = servers
    srv.mode, srv.capture = "capture", "c" * 5000
    with adapter(tmp_path, srv.url) as system:
        with pytest.raises(AdapterError, match=r"to capture as \{collection\} has 5000 characters, more than 1024"):
            system.reset("a")


def test_a_dripped_answer_ends_at_the_deadline_naming_it_and_the_url(tmp_path, servers):
    srv, _ = servers
    with adapter(tmp_path, srv.url, extra="deadline_s: 1.5\n") as system:
        system.reset("a")
        system.save("a", MEMORIES)
        srv.mode = "drip"
        t0 = time.monotonic()
        with pytest.raises(AdapterError) as got:
            system.search("a", "q", 3)
    took = time.monotonic() - t0
    assert 1.5 <= took < 4, took  # each byte came within timeout_s: only the deadline ends it
    message = str(got.value)
    assert f"the answer to POST {srv.url}/c/c-a/query did not finish within deadline_s 1.5" in message
    assert TOKEN not in message


def test_the_default_deadline_is_four_times_timeout_s(tmp_path, servers):
    with adapter(tmp_path, servers[0].url) as system:
        assert (system.bounds.timeout_s, system.bounds.deadline_s) == (5, 20)
        assert system.bounds.max_bytes == 64 * 1024 * 1024


@pytest.mark.parametrize("mode, said", [
    ("huge", r"the answer to POST http://127.0.0.1:\d+/c/c-a/query passed max_answer_mb 1 \(1048576 bytes"),
    ("declared-huge", r"the answer to POST http://127.0.0.1:\d+/c/c-a/query declares \d+ bytes, more than "
                      r"max_answer_mb 1 \(1048576 bytes"),
])
def test_an_answer_past_the_size_bound_is_refused_naming_the_setting(tmp_path, servers, mode, said):
    srv, _ = servers
    with adapter(tmp_path, srv.url, extra="max_answer_mb: 1\n") as system:
        system.reset("a")
        system.save("a", MEMORIES)
        srv.mode = mode
        with pytest.raises(AdapterError, match=said) as got:
            system.search("a", "q", 3)
    assert TOKEN not in str(got.value)


@pytest.mark.parametrize("mode, search, said", [
    ("nan", "", r"the value at 'distances\[0\]\[\*\]' for id 'm1' is nan, not a finite number"),
    ("inf", "", r"the value at 'distances\[0\]\[\*\]' for id 'm1' is -inf, not a finite number"),
    ("hits-nan", "  hits: 'results[*]'\n  id: id\n  score: score\n",
     r"the value at 'score' for id 'm1' is inf, not a finite number"),
])
def test_a_score_that_is_not_finite_is_refused_naming_its_field(tmp_path, servers, mode, search, said):
    srv, _ = servers
    with adapter(tmp_path, srv.url, search=search) as system:
        system.reset("a")
        system.save("a", MEMORIES)
        srv.mode = mode
        with pytest.raises(AdapterError, match=r"system 'hostile', search: " + said):
            system.search("a", "q", 3)


def test_any_systems_non_finite_score_is_refused_by_the_harness():
    class Careless(MemorySystem):
        name = "careless"

        def save(self, namespace, memories):
            return {m["id"]: m["id"] for m in memories}

        def search(self, namespace, query, k):
            return [("a", 0.5), ("b", float("nan"))]

    with pytest.raises(AdapterError, match=r"system 'careless', search: returned the score nan for id 'b', not a "
                                           r"finite number"):
        Guarded(Careless()).search("n", "q", 2)


@pytest.mark.parametrize("line, said", [
    ("deadline_s: -1\n", "deadline_s is a number > 0, got -1"),
    ("deadline_s: .nan\n", "deadline_s is a number > 0, got nan"),
    ("max_answer_mb: lots\n", "max_answer_mb is a number > 0, got 'lots'"),
    ("timeout_s: 0\n", "timeout_s is a number > 0, got 0"),
    ("timeout_s: soon\n", "timeout_s is a number > 0, got 'soon'"),
    ("settings: {'weight (x)': 1}\n", r"settings name 'weight \(x\)' cannot be a run parameter"),
    ("settings: {a: {'..': 1}}\n", r"settings name 'a\.\.\.' cannot be a run parameter"),
])
def test_bad_bounds_and_setting_names_are_refused_as_the_file_loads(tmp_path, servers, line, said):
    with pytest.raises(ValidationError, match=said):
        adapter(tmp_path, servers[0].url, extra=line)


def test_a_bad_batch_and_an_mcp_files_bad_timeout_or_setting_are_refused_as_they_load(tmp_path, servers):
    path = tmp_path / "batch.yaml"
    path.write_text(f"kind: http\nname: b\nbase_url: {servers[0].url}\nsave: {{path: /s, batch: ten, ids: $request}}\n"
                    "search: {path: /q, hits: 'r[*]', id: id}\n")
    with pytest.raises(ValidationError, match=r"save.batch: memories per request, a whole number >= 1, got 'ten'"):
        open_system(str(path), tmp_path / "s")
    calls = "save: {tool: t, id: id}\nsearch: {tool: s, hits: 'r[*]', id: id}\n"
    for line, said in (("timeout_s: never\n", "timeout_s is a number > 0, got 'never'"),
                       ("settings: {'k=1': 2}\n", r"settings name 'k=1' cannot be a run parameter")):
        path.write_text("kind: mcp\nname: m\ncommand: [true]\n" + line + calls)
        with pytest.raises(ValidationError, match=said):
            open_system(str(path), tmp_path / "s")


def test_a_value_too_long_for_a_url_is_one_line_naming_the_path(tmp_path, servers):
    srv, _ = servers
    with adapter(tmp_path, srv.url, prefix="/m/{content}") as system:  # one memory per request: its content
        with pytest.raises(AdapterError, match=r"save: POST /m/\{content\}/add: the rendered URL is not one a client "
                                               r"can send \(URL too long\)"):
            system.save("a", [{"id": "m1", "content": "word " * 20_000}])
    assert srv.seen == []
