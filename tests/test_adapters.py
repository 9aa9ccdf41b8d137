"""Memory systems under one harness: the interface, the Python, HTTP and MCP adapters, and lab
measured in process, over HTTP and over MCP with the same ranks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lab.adapters.base import AdapterError
from lab.adapters.harness import evaluate_system, write_system_run
from lab.adapters.registry import open_system
from lab.adapters.templates import pick, render
from lab.errors import ValidationError
from lab.eval.goldens import load_dataset

ROOT = Path(__file__).resolve().parent.parent
SYSTEMS = ROOT / "goldens" / "systems"


def test_templates_fill_values_keep_types_and_expand_batches():
    t = {"q": "{query}", "k": "{k}", "note": "ns={namespace}", "gone": "{missing}",
         "items": {"$each": {"id": "{id}", "tags": "{tags}"}}}
    got = render(t, {"query": "where?", "k": 5, "namespace": "a"}, [{"id": "m1", "tags": ["x"]}, {"id": "m2"}])
    assert got == {"q": "where?", "k": 5, "note": "ns=a", "items": [{"id": "m1", "tags": ["x"]}, {"id": "m2"}]}
    data = {"results": [{"id": 1, "s": 0.5}, {"id": 2, "s": 0.25}], "memories": [{"id": "a"}]}
    assert pick(data, "results[*].id") == [1, 2] and pick(data, "memories[0].id") == ["a"]
    assert pick(data, "nothing.here") == []


def test_a_users_own_system_in_a_few_lines_is_measured_like_any_other(tmp_path):
    from lab.eval.report import compare

    dataset = load_dataset("demo")
    system = open_system("toy_systems:WordOverlap", tmp_path / "w")
    result = evaluate_system(system, dataset, progress=False)
    again = evaluate_system(open_system("toy_systems:WordOverlap", tmp_path / "w2"), dataset, progress=False)
    assert result.run.equals(again.run)  # deterministic
    m = result.metrics
    assert 0.2 < m["metrics"]["recall@10"] < 1.0 and m["questions"] == dataset.questions.height
    assert m["ci95"]["recall@10"][0] <= m["metrics"]["recall@10"] <= m["ci95"]["recall@10"][1]
    assert m["speed"]["ingest"]["memories"] == len(dataset.memories) and m["speed"]["search"]["p50_ms"] is not None
    assert m["round_trip"]["found"] and m["round_trip"]["next_search"]
    assert m["system"]["approximates"] == "a toy: shared words, no model"
    # the gold's ids are the dataset's, whatever the system called them
    assert set(result.run["memory_id"]) <= {str(x["id"]) for x in dataset.memories}
    a = write_system_run(result, dataset, tmp_path / "runs" / "a")
    b = write_system_run(again, dataset, tmp_path / "runs" / "b")
    assert a.name == "demo-system-word-overlap"
    assert (a / "run.trec").is_file() and "approximates" in (a / "report.md").read_text().lower()
    table = compare(a, b, ["recall@10"])
    assert table["delta"][0] == 0.0 and table["p_value"][0] == 1.0


def test_a_system_returning_ids_it_was_never_given_is_named(tmp_path):
    with pytest.raises(AdapterError, match=r"system 'liar', search: returned id 'made-up-id' for question"):
        evaluate_system(open_system("toy_systems:Liar", tmp_path), load_dataset("demo"), progress=False)


def test_bad_systems_and_adapter_files_name_the_problem(tmp_path):
    with pytest.raises(ValidationError, match=r"unknown system 'nope'; known: \['chroma', 'lab', 'mem0'"):
        open_system("nope", tmp_path)
    with pytest.raises(ValidationError, match="cannot import 'no_such_module'"):
        open_system("no_such_module:X", tmp_path)
    spec = yaml.safe_load((SYSTEMS / "lab-http.yaml").read_text())
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**spec, "retries": 3}))
    with pytest.raises(ValidationError, match=r"bad.yaml: unknown field\(s\) \['retries'\]; known: \['kind'"):
        open_system(str(bad), tmp_path)
    bad.write_text(yaml.safe_dump({**spec, "search": {**spec["search"], "hits": "results[x]"}}))
    with pytest.raises(ValidationError, match="search.hits: 'results\\[x\\]' is not a response path"):
        open_system(str(bad), tmp_path)
    bad.write_text(yaml.safe_dump({**spec, "kind": "grpc"}))
    with pytest.raises(ValidationError, match=r"kind 'grpc' is not one of \['http', 'mcp', 'python'\]"):
        open_system(str(bad), tmp_path)
    auth = yaml.safe_load((SYSTEMS / "lab-http-auth.yaml").read_text())
    bad.write_text(yaml.safe_dump(auth))
    with pytest.raises(ValidationError, match=r"auth reads \$LAB_API_KEY, which is not set"):
        open_system(str(bad), tmp_path, env={})


def test_an_unreachable_or_silent_system_is_named_with_the_call(tmp_path):
    from serving import free_port

    spec = yaml.safe_load((SYSTEMS / "lab-http.yaml").read_text())
    port = free_port()
    path = tmp_path / "down.yaml"
    path.write_text(yaml.safe_dump({**spec, "name": "down", "base_url": f"http://127.0.0.1:{port}"}))
    with open_system(str(path), tmp_path) as system:  # closed: the client loggers are left as found
        with pytest.raises(AdapterError, match=rf"system 'down', reset: cannot reach http://127.0.0.1:{port}/v1/namespaces"):
            system.reset("n")

    import socket

    silent = socket.socket()  # accepts connections and never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    path.write_text(yaml.safe_dump({**spec, "name": "silent", "timeout_s": 0.5,
                                    "base_url": f"http://127.0.0.1:{silent.getsockname()[1]}"}))
    with open_system(str(path), tmp_path) as system:
        with pytest.raises(AdapterError, match=r"system 'silent', search: no answer from .*/v1/search within 0.5 s"):
            system.search("n", "q", 3)
    silent.close()


def test_lab_eval_goes_on_past_a_failing_system(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", "toy_systems:Broken",
                          "toy_systems:WordOverlap", "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert got.returncode == 6, got.stderr
    assert "error: system 'broken', save: the disk is full" in got.stderr
    assert "word-overlap" in got.stdout and "round trip next search" in got.stdout
    assert (tmp_path / "runs" / "demo-system-word-overlap" / "metrics.json").is_file()


@pytest.mark.slow
def test_lab_in_process_over_http_and_over_mcp_rank_alike(tmp_path):
    """The same memories and questions, the same configuration and query encoder: the same ranked
    lists, id for id, through the in-process pipeline, `lab serve` (REST) and `lab mcp` (stdio)."""
    from serving import Server, write_bundle

    from lab.adapters.lab_system import LabSystem
    from lab.config import DEFAULT_MODEL, EmbedConfig, SaveConfig
    from lab.search.presets import resolve

    from conftest import demo_questions

    dataset = demo_questions(40)  # each face embeds every question on its own: a third of them prove it
    save = SaveConfig(embed=EmbedConfig(model=DEFAULT_MODEL))
    with LabSystem(tmp_path / "inproc", resolve("lab"), save) as system:
        here = evaluate_system(system, dataset, progress=False, check_round_trip=False)
    bundle = write_bundle(tmp_path / "bundle", model=DEFAULT_MODEL)
    with Server(bundle, tmp_path / "served") as srv:
        with open_system(str(SYSTEMS / "lab-http.yaml"), tmp_path / "h", env={"LAB_HTTP_URL": srv.url}) as system:
            http = evaluate_system(system, dataset, progress=False)
    keys = ["qid", "rank", "memory_id"]
    assert here.run.height > 0 and here.run.select(keys).equals(http.run.select(keys))
    assert http.metrics["round_trip"]["next_search"]  # the served write path: found by the next search

    env = {"LAB_PYTHON": sys.executable, "LAB_BUNDLE": str(bundle), "LAB_MCP_STORE": str(tmp_path / "mcp-store")}
    with open_system(str(SYSTEMS / "lab-mcp.yaml"), tmp_path / "m", env=env) as system:
        mcp = evaluate_system(system, dataset, progress=False)
    assert here.run.select(keys).equals(mcp.run.select(keys))
    assert mcp.metrics["round_trip"]["next_search"]


def test_a_system_evaluation_is_an_mlflow_run_with_its_speed_and_what_it_approximates(tmp_path):
    from lab import track

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests"), "LAB_EVAL_ROOT": str(tmp_path / "eval")}
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", "toy_systems:WordOverlap",
                          "--tracking-uri", uri, "--quiet", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, env=env, timeout=300, cwd=ROOT)
    assert got.returncode == 0, got.stderr
    runs = track.recent_runs(5, uri, kind="system")
    assert len(runs) == 1 and runs[0]["name"] == "system demo word-overlap"
    m = runs[0]["metrics"]
    assert {"recall_at_10", "recall_at_10.ci95_low", "ingest_memories_per_s", "search_p99_ms"} <= set(m)
    _, client, _ = track.client(uri)
    assert client.get_run(runs[0]["run_id"]).data.tags["lab.approximates"] == "a toy: shared words, no model"


MANUAL_CLASS = '''
from lab.adapters.base import MemorySystem

class MySystem(MemorySystem):
    name = "mine"
    def __init__(self, folder, boom=None): self.docs, self.boom = {}, boom
    def save(self, namespace, memories):
        for m in memories: self.docs.setdefault(namespace, {})[m["id"]] = m["content"]
        return {m["id"]: m["id"] for m in memories}
    def search(self, namespace, query, k):
        if self.boom: raise RuntimeError(self.boom)
        q = set(query.lower().split())
        scored = sorted(((len(q & set(t.lower().split())), i) for i, t in self.docs.get(namespace, {}).items()), reverse=True)
        return [(i, float(s)) for s, i in scored[:k]]

class NoFolder(MySystem):
    name = "no-folder"
    def __init__(self, boom=None): super().__init__(None, boom)

class Picky(MySystem):
    def __init__(self, folder, *, size): super().__init__(folder)
'''


def _user_eval(tmp_path, *systems):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # mymod.py only in the working folder
    env["LAB_EVAL_ROOT"] = str(tmp_path / "eval")
    return subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", "demo", "--system", *systems,
                           "--no-track", "--quiet", "--out", str(tmp_path / "runs")],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)


def test_the_manuals_class_runs_from_the_working_folder_as_a_file_and_as_module_class(tmp_path):
    (tmp_path / "mymod.py").write_text(MANUAL_CLASS)
    (tmp_path / "mine.yaml").write_text("kind: python\nclass: mymod:MySystem\n")
    (tmp_path / "nofolder.yaml").write_text("kind: python\nclass: mymod:NoFolder\noptions: {}\n")
    got = _user_eval(tmp_path, "mymod:MySystem", "mine.yaml", "nofolder.yaml")
    assert got.returncode == 0, got.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["demo-system-mine", "demo-system-no-folder"]


def test_a_users_exception_and_a_constructor_that_does_not_fit_are_one_line_each_with_exit_6(tmp_path):
    (tmp_path / "mymod.py").write_text(MANUAL_CLASS)
    (tmp_path / "boom.yaml").write_text("kind: python\nname: boomer\nclass: mymod:MySystem\noptions: {boom: kaput}\n")
    (tmp_path / "picky.yaml").write_text("kind: python\nclass: mymod:Picky\noptions: {colour: red}\n")
    got = _user_eval(tmp_path, "boom.yaml", "picky.yaml", "mymod:MySystem")
    assert got.returncode == 6, got.stderr[-2000:]
    errors = [line for line in got.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: system 'boomer', search: RuntimeError: kaput",
        "error: picky.yaml: Picky(folder, *, size) cannot be called as Picky(folder, colour=...): missing a "
        "required argument: 'size'; a kind: python file's options are its keyword arguments"]
    assert "Traceback" not in got.stderr
    assert (tmp_path / "runs" / "demo-system-mine" / "metrics.json").is_file()  # the others went on


def test_a_search_answer_of_the_wrong_shape_is_named():
    from toy_systems import WordOverlap

    from lab.adapters.base import Guarded

    class Sloppy(WordOverlap):
        name = "sloppy"

        def search(self, namespace, query, k):
            return {"a": 1.0}

    with pytest.raises(AdapterError, match=r"system 'sloppy', search: returned .* not a list of \(id, score\) pairs"):
        Guarded(Sloppy(None)).search("n", "q", 3)
