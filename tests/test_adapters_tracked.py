"""Every kind of memory system through `lab eval --system` with tracking on (a real MLflow SQLite
store in a temporary folder): lab itself, a ``kind: python`` file, HTTP files with and without
client-side embedding (``embed:``), MCP, and each ready file of goldens/systems against a server
that answers as the real one does. Each run exists in MLflow with the system's settings as params.
`--no-track` hid that an HTTP file with ``embed:`` crashed while logging (a param name MLflow
refuses): these tests run the command as a user types it."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from lab.config import FAKE_MODEL
from lab.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ROOT / "goldens" / "systems"


def lab_eval(tmp_path: Path, *systems: str, env: dict[str, str] | None = None, args: tuple[str, ...] = ()):
    """`lab eval --dataset demo --system ...` with tracking on; (the finished command, tracking URI)."""
    uri = f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}"
    full = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval"),
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **(env or {})}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", *systems, *args,
                          "--tracking-uri", uri, "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=full, timeout=900, cwd=ROOT)
    assert got.returncode == 0, got.stderr[-3000:]
    assert "Traceback" not in got.stderr
    return got, uri


def tracked(uri: str) -> dict[str, Any]:
    """Each system run in the store, by system name: its params, tags and metrics."""
    from lab import track

    _, client, exp = track.client(uri)
    runs = client.search_runs([exp], filter_string="tags.`lab.kind` = 'system'")
    return {r.data.tags["lab.system"]: r.data for r in runs if r.info.status == "FINISHED"}


def logged(result: Any, dataset: Any, tmp_path: Path) -> Any:
    """What `lab eval` does with a harness result, tracking on: its run folder and its MLflow run
    (a SQLite store under ``tmp_path``); the run's data as MLflow holds it."""
    from lab import track
    from lab.adapters.harness import write_system_run

    uri = f"sqlite:///{tmp_path / 'logged' / 'mlflow.db'}"
    run_id = track.log_system(result, write_system_run(result, dataset, tmp_path / "logged-runs"), dataset=dataset,
                              uri=uri)
    _, client, _ = track.client(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["lab.system"] == result.system["system"]
    assert run.data.params == track.flatten(result.system["settings"]), run.data.params
    return run.data


# ------------------------------------------------------------------ servers answering as the real ones do
class Shapes(BaseHTTPRequestHandler):
    """ChromaDB's server shape (create a collection, add vectors, query by vector: columns of ids and
    cosine distances) and mem0's REST shape (POST /memories, POST /search, DELETE /memories) on one
    loopback server; mem0's search ranks by shared words, as a raw-text store without a model would."""

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, answer: Any, code: int = 200) -> None:
        body = json.dumps(answer).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_DELETE(self) -> None:
        data: Any = self.server
        if self.path.startswith("/memories"):
            user = parse_qs(urlsplit(self.path).query).get("user_id", [""])[0]
            data.mem0.pop(user, None)
        self._send({}, 404)

    def do_POST(self) -> None:
        data: Any = self.server
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        parts = self.path.strip("/").split("/")
        if parts == ["collections"]:
            data.chroma["c-" + body["name"]] = {}
            return self._send({"id": "c-" + body["name"]})
        if parts[0] == "collections" and parts[2] == "add":
            data.chroma[parts[1]].update(zip(body["ids"], body["embeddings"]))
            return self._send({})
        if parts[0] == "collections" and parts[2] == "query":
            ids = sorted(data.chroma[parts[1]])
            vectors = np.array([data.chroma[parts[1]][i] for i in ids])
            distance = 1 - vectors @ np.array(body["query_embeddings"][0])
            order = sorted(range(len(ids)), key=lambda n: (distance[n], ids[n]))[:body["n_results"]]
            return self._send({"ids": [[ids[n] for n in order]], "distances": [[float(distance[n]) for n in order]]})
        if parts == ["memories"]:
            mid = str(uuid.uuid4())
            data.mem0.setdefault(body["user_id"], []).append((mid, body["messages"][0]["content"]))
            return self._send({"results": [{"id": mid, "event": "ADD"}]})
        if parts == ["search"]:
            words = set(body["query"].lower().split())
            scored = sorted(((len(words & set(t.lower().split())), mid) for mid, t in data.mem0.get(body["user_id"], [])),
                            key=lambda x: (-x[0], x[1]))
            return self._send({"results": [{"id": mid, "score": float(s)} for s, mid in scored[:body["limit"]] if s]})
        self._send({"error": f"no route {self.path}"}, 404)


@pytest.fixture
def shapes():
    srv: Any = ThreadingHTTPServer(("127.0.0.1", 0), Shapes)
    srv.chroma, srv.mem0 = {}, {}
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


CHROMA_SHAPED = f"""kind: http
name: vectors-on-the-client
reads_env: [SHAPES_URL]
base_url: ${{SHAPES_URL}}
approximates: "a Chroma-shaped server; vectors computed by lab"
settings: {{space: cosine, index: {{kind: flat}}}}
embed: {{model: {FAKE_MODEL}, text: "{{content}}"}}
reset:
  - {{method: POST, path: /collections, body: {{name: "mem-{{namespace}}"}}, capture: {{collection: id}}}}
save:
  path: "/collections/{{collection}}/add"
  batch: 64
  body: {{ids: {{$each: "{{id}}"}}, embeddings: {{$each: "{{embedding}}"}}}}
  ids: $request
search:
  path: "/collections/{{collection}}/query"
  body: {{query_embeddings: ["{{embedding}}"], n_results: "{{k}}"}}
  id: "ids[0][*]"
  distance: "distances[0][*]"
"""
PYTHON_KIND = "kind: python\nname: words-from-a-file\nclass: toy_systems:WordOverlap\n"


def test_http_files_with_and_without_embed_and_a_python_file_are_tracked(tmp_path, shapes):
    """The HTTP kind with ``embed:`` (what crashed), mem0-rest.yaml (no embed, one memory per
    request) and a ``kind: python`` file, in one tracked `lab eval`."""
    (tmp_path / "vectors.yaml").write_text(CHROMA_SHAPED)
    (tmp_path / "words.yaml").write_text(PYTHON_KIND)
    got, uri = lab_eval(tmp_path, str(tmp_path / "vectors.yaml"), str(SYSTEMS / "mem0-rest.yaml"),
                        str(tmp_path / "words.yaml"), env={"SHAPES_URL": shapes, "MEM0_URL": shapes})
    runs = tracked(uri)
    assert sorted(runs) == ["mem0-rest", "vectors-on-the-client", "words-from-a-file"], got.stdout
    vectors = runs["vectors-on-the-client"]
    assert vectors.params == {"client_embedding_model": FAKE_MODEL, "space": "cosine", "index.kind": "flat"}
    assert vectors.tags["lab.adapter"] == "HttpSystem"
    assert vectors.tags["lab.approximates"] == "a Chroma-shaped server; vectors computed by lab"
    assert 0 < vectors.metrics["recall_at_10"] <= 1 and vectors.metrics["search_p99_ms"] > 0
    assert runs["mem0-rest"].tags["lab.approximates"].startswith("mem0 with infer=false")
    assert runs["mem0-rest"].metrics["recall_at_10"] > 0
    assert runs["words-from-a-file"].tags["lab.adapter"] == "WordOverlap"
    for name in runs:  # the run folder went with it
        assert Path(runs[name].tags["lab.run_folder"], "metrics.json").is_file()


def test_a_param_name_mlflow_refuses_is_logged_under_a_name_it_takes_and_said(tmp_path, caplog):
    """The MLflow side of the fix: a system's own setting with characters MLflow refuses ("(", "@",
    "//") is logged under a name it takes, said on the log; two names that would meet are refused."""
    from lab import track

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    caplog.set_level(logging.WARNING, logger="lab.track")
    with track.run("odd names", "system", params={"embedding model (client side)": "m", "w@plain": 1,
                                                  "a//b": 2, "fine.name": 3}, uri=uri) as (_, client, run_id):
        pass
    params = client.get_run(run_id).data.params
    assert params == {"embedding model _client side_": "m", "w:plain": "1", "a/_/b": "2", "fine.name": "3"}
    said = [r.getMessage() for r in caplog.records if r.name.startswith("lab.track")]
    assert said[0].startswith("MLflow param 'a//b' is logged as 'a/_/b'") and len(said) == 2
    with pytest.raises(ValidationError, match=r"params 'x\(1\)' and 'x\[1\]' would both be logged as 'x_1_'"):
        with track.run("clash", "system", params={"x(1)": 1, "x[1]": 2}, uri=uri):
            pass


# ------------------------------------------------------------------ real servers (slow)
@pytest.mark.slow
def test_lab_in_process_over_rest_with_and_without_a_key_and_over_mcp_are_tracked(tmp_path):
    from serving import Server, write_bundle

    bundle = write_bundle(tmp_path / "bundle")  # served and MCP: the fake embedder (lab in process: its default)
    with Server(bundle, tmp_path / "served") as srv:
        env = {"LAB_HTTP_URL": srv.url, "LAB_API_KEY": "unused-with-auth-off", "LAB_PYTHON": sys.executable,
               "LAB_BUNDLE": str(bundle), "LAB_MCP_STORE": str(tmp_path / "mcp-store")}
        got, uri = lab_eval(tmp_path, "lab", str(SYSTEMS / "lab-http.yaml"), str(SYSTEMS / "lab-mcp.yaml"), env=env)
        # lab-http-auth.yaml names the same system as lab-http.yaml: its own command and store
        auth_got, auth_uri = lab_eval(tmp_path / "auth", str(SYSTEMS / "lab-http-auth.yaml"), env=env)
    runs = tracked(uri)
    assert sorted(runs) == ["lab", "lab-http", "lab-mcp"], got.stdout
    assert runs["lab"].params["preset"] == "lab" and set(runs["lab"].params) == {"preset", "query_model"}
    assert runs["lab-http"].tags["lab.adapter"] == "HttpSystem" and runs["lab-mcp"].tags["lab.adapter"] == "McpSystem"
    assert runs["lab-http"].metrics["recall_at_10"] == runs["lab-mcp"].metrics["recall_at_10"] > 0
    assert list(tracked(auth_uri)) == ["lab-http"], auth_got.stdout
    assert "unused-with-auth-off" not in json.dumps({k: (v.params, v.tags) for k, v in tracked(auth_uri).items()})


@pytest.mark.slow
def test_chromas_own_server_through_its_file_is_tracked_with_the_client_side_model(tmp_path):
    """T1's command as documented: `lab eval --system goldens/systems/chroma-server.yaml`, tracking
    on, against `chroma run` (started here, stopped by its process group)."""
    pytest.importorskip("chromadb")
    from serving import free_port
    from test_http_described import _start, _stop

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    chroma = str(Path(sys.executable).with_name("chroma"))
    server = _start([chroma, "run", "--path", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", str(port)],
                    f"{url}/api/v2/heartbeat", tmp_path, {**os.environ, "ANONYMIZED_TELEMETRY": "False"})
    try:
        got, uri = lab_eval(tmp_path, str(SYSTEMS / "chroma-server.yaml"), env={"CHROMA_URL": url})
    finally:
        _stop(server)
    run = tracked(uri)["chroma-server"]
    assert run.params["client_embedding_model"].endswith("all-MiniLM-L6-v2"), run.params
    assert run.metrics["recall_at_10"] > 0.4 and "vectors computed by lab" in run.tags["lab.approximates"]
