"""Bad input, refused with an error that names the problem and nothing stored lost: ingest files,
preset, sweep, gate and server-setting files, and HTTP bodies sent to a running `lab serve`."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from outcome import Outcome, refused, status

GOOD = {"content": "a good memory", "namespace": "bad"}

# (case, the file's bytes, what the error must name)
INGEST_FILES: list[tuple[str, bytes, str]] = [
    ("ingest: a line that is not JSON", b'{"content": "x", "namespace": "bad"\n', "line 1"),
    ("ingest: content NaN", b'{"content": NaN, "namespace": "bad"}\n', "content"),
    ("ingest: importance NaN", b'{"content": "x", "namespace": "bad", "importance": NaN}\n', "importance"),
    ("ingest: importance Infinity", b'{"content": "x", "namespace": "bad", "importance": Infinity}\n', "importance"),
    ("ingest: importance negative", b'{"content": "x", "namespace": "bad", "importance": -1}\n', "importance"),
    ("ingest: importance huge", b'{"content": "x", "namespace": "bad", "importance": 1e400}\n', "importance"),
    ("ingest: unknown field", b'{"content": "x", "namespace": "bad", "colour": "red"}\n', "unknown field"),
    ("ingest: content a list", b'{"content": ["x"], "namespace": "bad"}\n', "content"),
    ("ingest: content empty", b'{"content": "", "namespace": "bad"}\n', "content"),
    ("ingest: content over the limit", b'{"content": "' + b"x" * 1_000_001 + b'", "namespace": "bad"}\n', "content"),
    ("ingest: tags a string", b'{"content": "x", "namespace": "bad", "tags": "a,b"}\n', "tags"),
    ("ingest: created_at garbage", b'{"content": "x", "namespace": "bad", "created_at": "yesterday-ish"}\n',
     "created_at"),
    ("ingest: unknown type", b'{"content": "x", "namespace": "bad", "type": "dream"}\n', "type"),
    ("ingest: namespace traversal", b'{"content": "x", "namespace": "../../etc"}\n', "namespace"),
    ("ingest: id with spaces", b'{"content": "x", "namespace": "bad", "id": "a b"}\n', "id"),
    ("ingest: access_count negative", b'{"content": "x", "namespace": "bad", "access_count": -4}\n', "access_count"),
    ("ingest: access_count huge", b'{"content": "x", "namespace": "bad", "access_count": 1e30}\n', "access_count"),
    ("ingest: pinned a string", b'{"content": "x", "namespace": "bad", "pinned": "yes"}\n', "pinned"),
    ("ingest: metadata a list", b'{"content": "x", "namespace": "bad", "metadata": [1]}\n', "metadata"),
    ("ingest: a record that is a list", b'["x", "bad"]\n', "object"),
    ("ingest: not UTF-8", b'{"content": "caf\xe9", "namespace": "bad"}\n', "UTF-8"),
    ("ingest: bad line after good ones", (json.dumps(GOOD) + "\n") * 3 + '{"content": 5}\n', "line 4"),
]

# (case, file name, its text, what the error must name)
CONFIG_FILES: list[tuple[str, str, str, str]] = [
    ("preset: fusion.k NaN", "p.yaml", "fusion:\n  k: .nan\n", "fusion.k"),
    ("preset: fusion.k negative", "p.yaml", "fusion:\n  k: -1\n", "fusion.k"),
    ("preset: fusion.k infinite", "p.yaml", "fusion:\n  k: .inf\n", "fusion.k"),
    ("preset: fusion.k a word", "p.yaml", "fusion:\n  k: sixty\n", "fusion.k"),
    ("preset: unknown fuser", "p.yaml", "fusion:\n  method: bogus\n", "fusion.method"),
    ("preset: unknown key", "p.yaml", "fusion:\n  kk: 3\n", "kk"),
    ("preset: weight negative", "p.yaml", "fusion:\n  weights: {vector: -1}\n", "vector"),
    ("preset: weight NaN", "p.yaml", "fusion:\n  weights: {vector: .nan}\n", "vector"),
    ("preset: depth zero", "p.yaml", "depth: 0\n", "depth"),
    ("preset: half-life negative", "p.yaml", "half_life_hours: -5\n", "half_life_hours"),
    ("preset: not a mapping", "p.yaml", "- 1\n- 2\n", "mapping"),
    ("preset: YAML syntax", "p.yaml", "fusion: {k: [\n", "yaml"),
    ("preset: JSON syntax", "p.json", '{"fusion": ', "json"),
    ("sweep: unknown dimension", "s.yaml", "dataset: demo\nspace:\n  fusion.kk: [1, 2]\n", "fusion.kk"),
    ("sweep: empty values", "s.yaml", "dataset: demo\nspace:\n  fusion.k: []\n", "fusion.k"),
    ("sweep: NaN value", "s.yaml", "dataset: demo\nspace:\n  fusion.k: [.nan]\n", "fusion.k"),
    ("sweep: unknown strategy", "s.yaml", "dataset: demo\nstrategy: genetic\nspace:\n  fusion.k: [1]\n", "strategy"),
    ("sweep: unknown fuser value", "s.yaml", "dataset: demo\nspace:\n  fusion.method: [bogus]\n", "bogus"),
    ("sweep: unknown encoder", "s.yaml", "dataset: demo\nspace:\n  index.models: [[bge]]\n", "index.models"),
    ("preset: unknown encoder list", "p.yaml", "encoders: [vector@bge]\n", "vector@bge"),
    ("sweep: validation out of range", "s.yaml", "dataset: demo\nvalidation: 1.5\nspace:\n  fusion.k: [1]\n",
     "validation"),
    ("gate: unknown field", "g.yaml", "model: m\nsuites:\n  d: {dataset: demo}\ncolour: red\n", "colour"),
    ("gate: threshold NaN", "g.yaml", "model: m\nsuites:\n  d: {dataset: demo, min: {recall@10: .nan}}\n", "recall@10"),
    ("gate: alpha out of range", "g.yaml", "model: m\nalpha: 2\nsuites:\n  d: {dataset: demo}\n", "alpha"),
    ("gate: no suites", "g.yaml", "model: m\n", "suites"),
]

# (case, flags, env, file content, what the error must name)
SETTINGS: list[tuple[str, dict[str, Any], dict[str, str], dict[str, Any] | None, str]] = [
    ("settings: rate nan (flag)", {"rate": "nan"}, {}, None, "rate"),
    ("settings: refresh nan (env)", {}, {"LAB_SERVE_REFRESH_SECONDS": "nan"}, None, "refresh_seconds"),
    ("settings: burst negative (file)", {}, {}, {"burst": -1}, "burst"),
    ("settings: port too big", {"port": 99999}, {}, None, "port"),
    ("settings: rate infinite", {"rate": "inf"}, {}, None, "rate"),
    ("settings: group wait huge", {}, {"LAB_SERVE_GROUP_WAIT_MS": "1e12"}, None, "group_wait_ms"),
    ("settings: unknown key in file", {}, {}, {"colour": "red"}, "colour"),
    ("settings: auth word", {"auth": "maybe"}, {}, None, "auth"),
    ("settings: log level word", {"log_level": "loud"}, {}, None, "log_level"),
    ("settings: batch not an integer", {"query_batch": "2.5"}, {}, None, "query_batch"),
    ("settings: rate 1e-300", {"rate": "1e-300"}, {}, None, "rate"),
    ("settings: refresh_seconds 0", {}, {"LAB_SERVE_REFRESH_SECONDS": "0"}, None, "refresh_seconds"),
    ("settings: snapshot_seconds 0", {}, {}, {"snapshot_seconds": 0}, "snapshot_seconds"),
    ("settings: embed_timeout_s 1e-300", {}, {"LAB_SERVE_EMBED_TIMEOUT_S": "1e-300"}, None, "embed_timeout_s"),
    ("settings: port 0", {"port": 0}, {}, None, "port"),
    ("settings: mcp_sessions_per_key 0", {"mcp_sessions_per_key": 0}, {}, None, "mcp_sessions_per_key"),
    ("settings: mcp_session_idle_s 0", {"mcp_session_idle_s": 0}, {}, None, "mcp_session_idle_s"),
]


def file_cases(tmp: Path, pipe: Any) -> list[Outcome]:
    """Ingest, preset, sweep, gate and settings files, in process (what the CLI calls)."""
    from lab.eval.report import candidate_from
    from lab.gate.checks import load_gate
    from lab.serve.settings import load_settings
    from lab.tune.spec import load_spec

    out = []
    for i, (case, data, names) in enumerate(INGEST_FILES):
        path = tmp / f"bad{i}.jsonl"
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        out.append(refused("input", case, lambda p=path: pipe.ingest(p, progress=False), names))
    out.append(refused("input", "ingest: a missing file", lambda: pipe.ingest(tmp / "nope.jsonl", progress=False),
                       "nope.jsonl"))
    for case, name, text, names in CONFIG_FILES:
        path = tmp / name
        path.write_text(text)
        if case.startswith("preset"):
            call = lambda p=path: candidate_from(None, p)  # noqa: E731
        elif case.startswith("sweep"):
            call = lambda p=path: load_spec(p)  # noqa: E731
        else:
            call = lambda p=path: load_gate(p)  # noqa: E731
        out.append(refused("input", case, call, names))
    for i, (case, flags, env, content, names) in enumerate(SETTINGS):
        conf = None
        if content is not None:
            conf = tmp / f"serve{i}.json"
            conf.write_text(json.dumps(content))
        out.append(refused("input", case, lambda f=flags, e=env, c=conf: load_settings(f, env=e, config_file=c), names))
    return out + model_cases(tmp, pipe)


def model_cases(tmp: Path, pipe: Any) -> list[Outcome]:
    """Embedding models: an unknown id, a folder that is not a model, a store opened with another
    model, a query model of another space, a bundle's model whose files differ."""
    from lab.config import DEFAULT_MODEL, EmbedConfig, SaveConfig
    from lab.embed.registry import make_embedder, query_model_name, require_recorded
    from lab.pipeline import Pipeline

    folder = tmp / "not-a-model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text("{}")
    other = "all-MiniLM-L6-v2" if pipe.embedder.model_id != "all-MiniLM-L6-v2" else "fake"
    return [
        refused("input", "model: unknown id", lambda: make_embedder(EmbedConfig(model="bge-small")), "bge-small"),
        refused("input", "model: a folder that is not a model", lambda: make_embedder(EmbedConfig(model=f"st:{folder}")),
                "tokenizer.json"),
        refused("input", "model: a store opened with another model",
                lambda: Pipeline.open(pipe.store.root, SaveConfig(embed=EmbedConfig(model=other))),
                pipe.embedder.model_id),
        refused("input", "model: a query model of another space", lambda: query_model_name("e5", DEFAULT_MODEL),
                "multilingual-e5-small-q4"),
        refused("input", "model: a bundle's model files differ",
                lambda: require_recorded([{"id": DEFAULT_MODEL, "sha256": "0" * 64}], "bundle b"), "sha256"),
    ]


def http_cases(client: Any) -> list[Outcome]:
    """Bodies a hostile or careless client sends to a running server (namespace 'bad' exists)."""
    post = client.post
    mid = post("/v1/memories", json={"namespace": "bad", "content": "a memory the bad bodies aim at"}).json()["id"]
    out = [
        status("input", "http: content empty", post("/v1/memories", json={"namespace": "bad", "content": ""}),
               {422}, "content"),
        status("input", "http: content a number", post("/v1/memories", json={"namespace": "bad", "content": 5}),
               {422}, "content"),
        status("input", "http: importance NaN (not JSON)",
               post("/v1/memories", content=b'{"namespace": "bad", "content": "x", "importance": NaN}',
                    headers={"Content-Type": "application/json"}), {422}, "importance"),
        status("input", "http: metadata NaN (not JSON)",
               post("/v1/memories", content=b'{"namespace": "bad", "content": "x", "metadata": {"s": NaN}}',
                    headers={"Content-Type": "application/json"}), {422}, "metadata"),
        status("input", "http: importance 2", post("/v1/memories", json={**GOOD, "importance": 2}), {422}, "importance"),
        status("input", "http: unknown field", post("/v1/memories", json={**GOOD, "colour": "red"}), {422}, "colour"),
        status("input", "http: namespace traversal", post("/v1/memories", json={"namespace": "../../etc", "content": "x"}),
               {422}, "namespace"),
        status("input", "http: id traversal", post("/v1/memories", json={**GOOD, "id": "../../etc/passwd"}), {422}, "id"),
        status("input", "http: k negative", post("/v1/search", json={"namespace": "bad", "query": "x", "k": -3}),
               {422}, "k"),
        status("input", "http: k huge", post("/v1/search", json={"namespace": "bad", "query": "x", "k": 10**9}),
               {422}, "k"),
        status("input", "http: empty query", post("/v1/search", json={"namespace": "bad", "query": ""}), {422}, "query"),
        status("input", "http: budget negative",
               post("/v1/context", json={"namespace": "bad", "query": "x", "budget": -5}), {422}, "budget"),
        status("input", "http: body not JSON", post("/v1/search", content=b"k=3",
                                                    headers={"Content-Type": "application/json"}), {422}, "JSON"),
        status("input", "http: body not UTF-8", post("/v1/memories", content=b'{"namespace": "bad", "content": "\xff\xfe"}',
                                                     headers={"Content-Type": "application/json"}), {400, 422}, "body"),
        status("input", "http: deeply nested metadata",
               post("/v1/memories", content=b'{"namespace": "bad", "content": "x", "metadata": ' + b"[" * 5000
                    + b"]" * 5000 + b"}", headers={"Content-Type": "application/json"}), {413, 422}, "body"),
        status("input", "http: oversized body", post("/v1/memories", json={**GOOD, "content": "x" * 2_000_000}), {413},
               "1048576 bytes"),
        status("input", "http: oversized streamed body",
               post("/v1/memories", content=iter([b'{"content": "' + b"x" * 500_000] * 5),
                    headers={"Content-Type": "application/json"}), {413}, "1048576 bytes"),
        status("input", "http: unknown namespace", post("/v1/search", json={"namespace": "nowhere", "query": "x"}),
               {404}, "nowhere"),
        status("input", "http: empty patch", client.patch(f"/v1/memories/{mid}", json={}), {422}, "body"),
        status("input", "http: tags too many", post("/v1/memories", json={**GOOD, "tags": ["t"] * 1000}), {422}, "tags"),
        status("input", "http: edge to nowhere",
               post("/v1/edges", json={"edges": [{"src": mid, "dst": "bad:nowhere", "relation": "related_to"}]}),
               {404}, "bad:nowhere"),
        status("input", "http: unknown relation",
               post("/v1/edges", json={"namespace": "bad", "edges": [{"src": "bad:a", "dst": "bad:b",
                                                                      "relation": "loves"}]}), {422}, "relation"),
        status("input", "http: Content-Length not a number", _raw_bad_length(client), {400}, "invalid"),
    ]
    return out + method_cases(client, mid)


def method_cases(client: Any, mid: str) -> list[Outcome]:
    """405s: a namespace's stats are not deleted through their path, and every 405's Allow header
    lists exactly the methods the path answers (HEAD included)."""
    out = []
    r = client.delete("/v1/namespaces/bad/stats")
    kept = "bad" in client.get("/v1/namespaces").json()["items"]
    got = status("input", "http: DELETE a namespace's stats", r, {405}, code="method_not_allowed")
    got.observed += f"; namespace 'bad' still there: {kept}"
    got.ok = got.ok and kept
    out.append(got)
    throwaway = client.post("/v1/memories", json={"namespace": "bad", "content": "deleted by the Allow probe"}).json()["id"]
    for path in ("/v1/memories/batch", "/v1/namespaces", "/health", "/v1/search", f"/v1/memories/{throwaway}",
                 "/v1/namespaces/bad/stats", "/v1/memories?namespace=bad"):
        r = client.put(path, json={})
        allow = {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()}
        mismatched = []
        for method in ("GET", "HEAD", "POST", "PATCH", "DELETE"):
            answered = client.request(method, path, json={} if method in ("POST", "PATCH") else None).status_code != 405
            if answered != (method in allow):
                mismatched.append(f"{method} {'answered' if answered else '405'} but {'not ' if answered else ''}listed")
        out.append(Outcome("input", f"http: Allow of {path.replace(throwaway, '<id>')}",
                           "405 to PUT; Allow lists exactly the methods answered",
                           f"{r.status_code}, Allow {sorted(allow)}" + (f"; {'; '.join(mismatched)}" if mismatched else ""),
                           r.status_code == 405 and bool(allow) and not mismatched
                           and ("POST" in allow if path.endswith("batch") else True)))
    return out


def _raw_bad_length(client: Any) -> Any:
    """A request whose Content-Length header is not a number (httpx will not send one itself)."""
    import socket
    from types import SimpleNamespace
    from urllib.parse import urlsplit

    url = urlsplit(str(client.base_url))
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: ten\r\nConnection: close\r\n\r\n{}")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    code = int(head.split()[1]) if head else 599

    def as_json() -> Any:
        return json.loads(body.decode("utf-8", "replace"))

    return SimpleNamespace(status_code=code, text=body.decode("utf-8", "replace"), json=as_json)


def cli_cases(tmp: Path, short: bool) -> list[Outcome]:
    """`lab eval` and `lab search` refusing a bad option or file before any work: the dataset is
    one that does not exist, so a refusal that names the option (not the dataset) came first."""
    import time

    from servers import lab

    (tmp / "since.yaml").write_text("filters:\n  since: garbage\n")
    (tmp / "empty.yaml").write_text("")
    (tmp / "blank.yaml").write_text("# nothing but a comment\n")
    store = tmp / "input-store"
    cases = [
        ("lab eval: filters.since garbage", ["eval", "--dataset", "no-such-dataset", "--config", tmp / "since.yaml"],
         ["filters.since", "garbage"]),
        ("lab search: an empty preset file", ["search", "billing", "--store", store, "--namespace", "bad", "--preset",
                                              tmp / "empty.yaml"], ["empty.yaml"]),
    ]
    if not short:
        cases += [
            ("lab eval: --k -1", ["eval", "--dataset", "no-such-dataset", "--k", "-1"], ["-1"]),
            ("lab eval: an empty preset file", ["eval", "--dataset", "no-such-dataset", "--config", tmp / "empty.yaml"],
             ["empty.yaml"]),
            ("lab search: a preset file of only a comment", ["search", "billing", "--store", store, "--namespace", "bad",
                                                            "--preset", tmp / "blank.yaml"], ["blank.yaml"]),
        ]
    out = []
    for case, args, names in cases:
        extra = ["--no-track", "--quiet", "--out", str(tmp / "runs")] if args[0] == "eval" else []
        t0 = time.perf_counter()
        got = lab(*args, *extra, timeout=120)
        said = (got.stdout + got.stderr).strip()
        last = said.splitlines()[-1] if said else "(nothing)"
        named = all(n.lower() in said.lower() for n in names) and "no-such-dataset" not in said
        out.append(Outcome("input", case, f"exit 2 naming {names}, before the dataset",
                           f"exit {got.returncode} in {time.perf_counter() - t0:.1f} s: {last[:160]}",
                           got.returncode == 2 and named and "Traceback" not in said))
    return out
