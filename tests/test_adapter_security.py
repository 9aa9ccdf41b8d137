"""Adapter files are trusted like code, and still checked: the environment variables a file may read
are the ones it declares, a value read never shows in an error or a log line, a ``kind: python`` file
is checked before its module is imported and its class before it is called, and YAML aliases are
bounded as a file loads (no anchor bomb)."""
from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lab.adapters.base import AdapterError, MemorySystem
from lab.adapters.registry import open_system
from lab.config.file_env import CLIENT_LOGGERS, redact_url
from lab.config import YAML_ALIAS_NODES, read_yaml
from lab.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
SECRET = "s3cr3t-value-123"
ENV = {"SOME_SECRET": SECRET, "LAB_HTTP_URL": "http://127.0.0.1:9"}
CALLS = """save: {method: POST, path: /save, batch: 8, body: {memories: {$each: {id: "{id}"}}}, ids: "memories[*].id"}
search: {method: POST, path: /search, body: {q: "{query}"}, hits: "results[*]", id: id}
"""
MCP_CALLS = """save: {tool: memory_save, arguments: {content: '{content}'}, id: id}
search: {tool: memory_search, arguments: {query: '{query}'}, hits: 'results[*]', id: memory_id}
"""


def adapter(tmp_path: Path, head: str, calls: str = CALLS, name: str = "system.yaml") -> str:
    path = tmp_path / name
    path.write_text(head + calls)
    return str(path)


class Echo(BaseHTTPRequestHandler):
    """Answers every POST with its path and X-Key header (500 for a path holding /fail), as a careless
    server's error page would."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps({"path": self.path, "key": self.headers.get("X-Key"), "results": []}).encode()
        self.send_response(500 if "/fail" in self.path else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def echo():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


# ------------------------------------------------------------------ 1. declared variables only
def test_a_variable_the_file_does_not_declare_is_refused_naming_it_and_the_line_to_add(tmp_path):
    path = adapter(tmp_path, "kind: http\nname: x\nbase_url: http://127.0.0.1:9/${SOME_SECRET}\n")
    with pytest.raises(ValidationError, match=re.escape(
            "system.yaml: base_url reads ${SOME_SECRET}, which the file does not declare; an adapter file lists "
            "the environment variables it may read: reads_env: [SOME_SECRET]")):
        open_system(path, tmp_path / "s", env=ENV)
    # a default does not make a read harmless: the variable is still read when set
    path = adapter(tmp_path, "kind: http\nname: x\nreads_env: [LAB_HTTP_URL]\n"
                             "base_url: http://127.0.0.1:9/${SOME_SECRET:-none}\n")
    with pytest.raises(ValidationError, match=re.escape("reads ${SOME_SECRET}, which the file does not declare; "
                                                        "an adapter file lists the environment variables it may "
                                                        "read: reads_env: [LAB_HTTP_URL, SOME_SECRET]")):
        open_system(path, tmp_path / "s", env=ENV)


def test_the_auth_variable_must_be_declared_too(tmp_path):
    path = adapter(tmp_path, "kind: http\nname: x\nbase_url: http://127.0.0.1:9\n"
                             "auth: {header: X-Key, env: SOME_SECRET}\n")
    with pytest.raises(ValidationError, match=re.escape("auth.env reads ${SOME_SECRET}, which the file does not "
                                                        "declare")):
        open_system(path, tmp_path / "s", env=ENV)


def test_an_mcp_command_with_an_undeclared_variable_is_refused_before_it_runs(tmp_path):
    marker = tmp_path / "ran"
    path = adapter(tmp_path, f"kind: mcp\nname: m\ncommand: [sh, -c, 'echo $S > {marker}']\n"
                             "env: {S: '${SOME_SECRET}'}\n", MCP_CALLS)
    with pytest.raises(ValidationError, match=re.escape("env.S reads ${SOME_SECRET}, which the file does not "
                                                        "declare")):
        open_system(path, tmp_path / "s", env=ENV)
    path = adapter(tmp_path, "kind: mcp\nname: m\nurl: http://127.0.0.1:9/mcp\n"
                             "headers: {X-Key: 'Bearer ${SOME_SECRET}'}\n", MCP_CALLS)
    with pytest.raises(ValidationError, match=re.escape("headers.X-Key reads ${SOME_SECRET}, which the file does "
                                                        "not declare")):
        open_system(path, tmp_path / "s", env=ENV)
    assert not marker.exists()


def test_a_declared_variable_is_read_and_reads_env_is_a_list_of_names(tmp_path):
    path = adapter(tmp_path, "kind: http\nname: x\nreads_env: [LAB_HTTP_URL]\nbase_url: ${LAB_HTTP_URL}/v1\n")
    with open_system(path, tmp_path / "s", env=ENV) as system:
        assert system.base_url == "http://127.0.0.1:9/v1"
    path = adapter(tmp_path, "kind: http\nname: x\nreads_env: LAB_HTTP_URL\nbase_url: ${LAB_HTTP_URL}\n")
    with pytest.raises(ValidationError, match=r"reads_env is a list of environment variable names \(like "
                                              r"\[LAB_HTTP_URL, LAB_API_KEY\]\), got 'LAB_HTTP_URL'"):
        open_system(path, tmp_path / "s", env=ENV)


def test_the_bundled_adapter_files_declare_every_variable_they_read(tmp_path):
    import yaml

    files = sorted((ROOT / "goldens" / "systems").glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        spec = yaml.safe_load(f.read_text())
        used = set(re.findall(r"\$\{(\w+)", f.read_text())) | ({spec["auth"]["env"]} if "auth" in spec else set())
        assert used and used <= set(spec["reads_env"]), f.name
        if spec["kind"] == "http":  # opens (no request is made until a call)
            env = {name: "http://127.0.0.1:9" if name.endswith("URL") else "k" for name in spec["reads_env"]}
            open_system(str(f), tmp_path / f.stem, env=env).close()


# ------------------------------------------------------------------ 2. values read never shown
def test_redact_url_hides_userinfo_query_values_and_fragment():
    assert redact_url("https://ann:pw@host.example:8443/a/b?key=v1&x=2&flag#frag") == \
        "https://***@host.example:8443/a/b?key=***&x=***&***#***"
    assert redact_url("http://127.0.0.1:8080/v1/search") == "http://127.0.0.1:8080/v1/search"


def test_an_unreachable_url_is_named_without_the_secret(tmp_path):
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = adapter(tmp_path, "kind: http\nname: down\nreads_env: [SOME_SECRET]\n"
                             f"base_url: 'http://ann:pw@127.0.0.1:{port}/${{SOME_SECRET}}?token=${{SOME_SECRET}}'\n")
    with open_system(path, tmp_path / "s", env=ENV) as system:
        with pytest.raises(AdapterError) as got:
            system.search("n", "q", 3)
    text = str(got.value)
    # (a path after a query in a base URL is part of the query: hidden with it)
    assert text == (f"system 'down', search: cannot reach http://***@127.0.0.1:{port}/${{SOME_SECRET}}?token=*** "
                    "(ConnectError: [Errno 111] Connection refused)"), text
    assert SECRET not in text and "pw" not in text


def test_an_error_status_whose_body_echoes_the_secret_shows_its_name(tmp_path, echo):
    path = adapter(tmp_path, "kind: http\nname: careless\nreads_env: [SOME_SECRET]\n"
                             f"base_url: {echo}/fail/${{SOME_SECRET}}\nauth: {{header: X-Key, env: SOME_SECRET}}\n")
    with open_system(path, tmp_path / "s", env=ENV) as system:
        with pytest.raises(AdapterError) as got:
            system.search("n", "q", 3)
    text = str(got.value)
    assert "POST /search answered 500:" in text
    assert '"path": "/fail/${SOME_SECRET}/search", "key": "${SOME_SECRET}"' in text
    assert SECRET not in text


def test_a_timeout_and_a_bad_url_name_the_variable_not_its_value(tmp_path):
    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    port = silent.getsockname()[1]
    path = adapter(tmp_path, f"kind: http\nname: silent\nreads_env: [SOME_SECRET]\ntimeout_s: 0.3\n"
                             f"base_url: http://127.0.0.1:{port}/${{SOME_SECRET}}\n")
    try:
        with open_system(path, tmp_path / "s", env=ENV) as system:
            with pytest.raises(AdapterError, match=re.escape(
                    f"system 'silent', search: no answer from http://127.0.0.1:{port}/${{SOME_SECRET}}/search "
                    "within 0.3 s")):
                system.search("n", "q", 3)
    finally:
        silent.close()
    path = adapter(tmp_path, "kind: http\nname: x\nreads_env: [SOME_SECRET]\nbase_url: ${SOME_SECRET}\n")
    with pytest.raises(ValidationError, match=re.escape("base_url '${SOME_SECRET}' is not an http:// or https:// URL")):
        open_system(path, tmp_path / "s", env={"SOME_SECRET": "ftp://" + SECRET})


def test_the_http_clients_log_lines_name_the_variable_not_its_value(tmp_path, echo, caplog):
    caplog.set_level(logging.INFO, logger="httpx")
    path = adapter(tmp_path, "kind: http\nname: x\nreads_env: [SOME_SECRET]\n"
                             f"base_url: '{echo}/${{SOME_SECRET}}?token=${{SOME_SECRET}}'\n")
    with open_system(path, tmp_path / "s", env=ENV) as system:
        assert system.search("n", "q", 3) == []
    lines = [r.getMessage() for r in caplog.records if r.name == "httpx"]
    assert lines and all(SECRET not in line for line in lines)
    assert lines[0].startswith(f"HTTP Request: POST {echo}/${{SOME_SECRET}}?token=*** "), lines[0]
    # closed, the system leaves the client loggers as it found them
    assert not any(logging.getLogger(name).filters for name in CLIENT_LOGGERS)


def test_an_mcp_connect_failure_and_its_log_lines_do_not_show_the_header_or_url_secret(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="mcp.client.streamable_http")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path = adapter(tmp_path, f"kind: mcp\nname: m\nreads_env: [SOME_SECRET]\ntimeout_s: 10\n"
                             f"url: 'http://127.0.0.1:{port}/mcp/${{SOME_SECRET}}?k=${{SOME_SECRET}}'\n"
                             "headers: {X-Key: '${SOME_SECRET}'}\n", MCP_CALLS)
    with pytest.raises(AdapterError) as got:
        open_system(path, tmp_path / "s", env=ENV)
    assert str(got.value) == "system 'm', connect: ConnectError: All connection attempts failed"
    lines = [r.getMessage() for r in caplog.records if r.name == "mcp.client.streamable_http"]
    assert f"Connecting to StreamableHTTP endpoint: http://127.0.0.1:{port}/mcp/${{SOME_SECRET}}?k=***" in lines
    assert all(SECRET not in line for line in lines)


# ------------------------------------------------------------------ 3. kind: python
class NotASystem:
    """A class that is not a MemorySystem; building it would leave a trace."""
    built = False

    def __init__(self, **kwargs: object) -> None:
        NotASystem.built = True


def not_a_class() -> None:
    raise AssertionError("called")


def test_a_standard_library_module_is_refused_without_importing_it(tmp_path):
    marker = tmp_path / "ran"
    path = adapter(tmp_path, f"kind: python\nclass: os:system\noptions: {{command: 'touch {marker}'}}\n", "")
    with pytest.raises(ValidationError, match=re.escape(
            "'os:system' names a module of Python's standard library ('os'), which holds no memory system; "
            "name a subclass of lab.adapters.base.MemorySystem")):
        open_system(path, tmp_path / "s")
    assert not marker.exists()
    sys.modules.pop("this", None)  # `import this` prints the Zen of Python: its import is the side effect
    path = adapter(tmp_path, "kind: python\nclass: 'this:Nothing'\n", "")
    with pytest.raises(ValidationError, match=re.escape("standard library ('this')")):
        open_system(path, tmp_path / "s")
    assert "this" not in sys.modules
    with pytest.raises(ValidationError, match=re.escape("'subprocess:Popen' names a module of Python's standard")):
        open_system("subprocess:Popen", tmp_path / "s")


def test_the_file_and_the_class_spec_are_checked_before_the_import(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "noisy_module.py").write_text(
        f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Mine: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    for head, why in (
        ("class: noisy_module:Mine\noptions: [1, 2]\n",
         "options are the class's keyword arguments, a mapping of names to values; got [1, 2]"),
        ("class: noisy_module:Mine\nname: [a]\n", "name is a string, got ['a']"),
        ("class: noisy_module:Mine\nshell: ls\n", "unknown field(s) ['shell']"),
        ("class: 'noisy_module:Mine; rm'\n", "'noisy_module:Mine; rm' is not module:Class"),
        ("class: ../noisy_module:Mine\n", "'../noisy_module:Mine' is not module:Class"),
        ("class: noisy_module\n", "'noisy_module' is not module:Class (like mypackage.memory:MySystem)"),
    ):
        path = adapter(tmp_path, "kind: python\n" + head, "")
        with pytest.raises(ValidationError, match=re.escape(why)):
            open_system(path, tmp_path / "s")
    assert not (tmp_path / "imported").exists()
    # well formed, it is imported, and refused as no MemorySystem before Mine() is built
    path = adapter(tmp_path, "kind: python\nclass: noisy_module:Mine\n", "")
    why = "'noisy_module:Mine' is a class, not a subclass of lab.adapters.base.MemorySystem (refused before it is"
    with pytest.raises(ValidationError, match=re.escape(why)):
        open_system(path, tmp_path / "s")
    assert (tmp_path / "imported").exists()


def test_a_name_that_is_no_memory_system_class_is_refused_before_it_is_called(tmp_path):
    for target, what in (("test_adapter_security:NotASystem", "a class"),
                         ("test_adapter_security:not_a_class", "a function"),
                         ("test_adapter_security:Nothing", "not in the module")):
        path = adapter(tmp_path, f"kind: python\nclass: {target}\noptions: {{x: 1}}\n", "")
        with pytest.raises(ValidationError, match=re.escape(f"{target!r} is {what}, not a subclass of "
                                                            "lab.adapters.base.MemorySystem")):
            open_system(path, tmp_path / "s")
    assert not NotASystem.built
    path = adapter(tmp_path, "kind: python\nclass: toy_systems:WordOverlap\nname: mine\noptions: {folder: null}\n", "")
    with open_system(path, tmp_path / "s") as system:
        assert isinstance(system, MemorySystem) and system.name == "mine"


# ------------------------------------------------------------------ 4. YAML aliases bounded
def bomb(depth: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, depth)]
    return "kind: http\nname: bomb\nbase_url: http://127.0.0.1:9\nsettings:\n" + \
        "".join(f"  {line}\n" for line in lines) + CALLS


def test_an_alias_bomb_is_refused_as_the_file_loads_naming_the_file_and_the_limit(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(9))  # 10^9 leaves from under 1 KB
    assert path.stat().st_size < 1000
    with pytest.raises(ValidationError, match=re.escape(
            f"bomb.yaml: system adapter file: its YAML aliases expand to more than {YAML_ALIAS_NODES} nodes "
            "(the limit, against alias bombs); write the repeated part out instead")):
        open_system(str(path), tmp_path / "s")
    # every YAML lab reads goes through the same reader
    with pytest.raises(ValidationError, match=re.escape(f"bomb.yaml: sweep file: its YAML aliases expand to more "
                                                        f"than {YAML_ALIAS_NODES} nodes")):
        read_yaml(path, "sweep file")
    # and so does a config parsed from text (a bundle's or a preset's YAML)
    from lab.config import SearchConfig, from_yaml

    with pytest.raises(ValidationError, match=re.escape(f"SearchConfig: its YAML aliases expand to more than "
                                                        f"{YAML_ALIAS_NODES} nodes")):
        from_yaml(SearchConfig, path.read_text())


def test_an_alias_inside_its_own_anchor_and_deep_nesting_are_refused(tmp_path):
    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [1, *a]\n")
    with pytest.raises(ValidationError, match=re.escape("loop.yaml: params file: a YAML alias refers to the anchor "
                                                        "it is inside (an endless document)")):
        read_yaml(path, "params file")
    path.write_text("a: " + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ValidationError, match=re.escape("loop.yaml: params file nested too deeply to read")):
        read_yaml(path, "params file")


def test_ordinary_anchors_still_load(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text("base: &base {k: 10, fusion: rrf, weights: [1, 2, 3]}\n"
                    "a: {<<: *base, k: 5}\nb: *base\nc: [*base, *base]\n")
    got = read_yaml(path, "sweep file")
    assert got["a"] == {"k": 5, "fusion": "rrf", "weights": [1, 2, 3]} and got["c"] == [got["base"]] * 2


def test_lab_eval_refuses_a_bomb_with_exit_code_2_not_a_memory_error(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb(9))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", str(path),
                          "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert got.returncode == 2, got.stderr
    assert f"its YAML aliases expand to more than {YAML_ALIAS_NODES} nodes" in got.stderr
    assert "MemoryError" not in got.stderr
