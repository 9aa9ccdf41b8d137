"""HTTP adapter files (capture, embed, columnar answers) against a hostile server in this process,
with a second host it tries to steer requests to and a bearer token in the file's environment: a
captured value stays one path segment (no other path, query or host), a value that would make the
path an absolute URL is refused naming the capture, a list or object capture is refused, every call
ends by its deadline and reads at most its size bound, a NaN or infinite score is refused naming its
field, and `lab eval` of a file with ``embed:`` runs with tracking on (real MLflow, SQLite) and
records the client-side model. Every refusal is checked for its reason and for the token."""
from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

from outcome import Outcome
from servers import ENV, LAB

from serving import ROOT

from hostile_adapter_server import serve

GROUP = "adapter_v2"
TOKEN = "tok-SECRET-v2-4242"




def file_text(url: str, prefix: str = "/c/{collection}", extra: str = "", hits: bool = False,
              embed: bool = False) -> str:
    search = ("  hits: 'results[*]'\n  id: id\n  score: score\n" if hits else
              "  id: 'ids[0][*]'\n  distance: 'distances[0][*]'\n")
    vector = '"{embedding}"' if embed else "[0.0]"
    return (f"kind: http\nname: hostile\nreads_env: [HOSTILE_TOKEN]\nbase_url: {url}\ntimeout_s: 5\n"
            'auth: {header: Authorization, env: HOSTILE_TOKEN, prefix: "Bearer "}\n' + extra +
            ("embed: {model: fake-hash-256}\n" if embed else "") +
            "reset:\n  - {method: POST, path: /collections, body: {name: 'mem-{namespace}'},\n"
            "     capture: {collection: id}}\n"
            f"save:\n  path: '{prefix}/add'\n  batch: 64\n"
            "  body: {ids: {$each: '{id}'}" + (", embeddings: {$each: '{embedding}'}" if embed else "") + "}\n"
            f"  ids: $request\nsearch:\n  path: '{prefix}/query'\n  body: {{q: {vector}, k: '{{k}}'}}\n" + search)


def in_process(name: str, srv: Any, other: Any, folder: Path, text: str, names: list[str],
               setup: Callable[[], None], expect_seen: Callable[[list[str]], list[str]] | None = None) -> Outcome:
    """The file opened here, one namespace reset, saved to and searched: refused with one of lab's
    errors naming each of ``names``, no token in it, nothing sent to the other host."""
    from lab.adapters.registry import open_system
    from lab.errors import LabError

    _clear(srv, other, setup)
    path = folder / f"{len(list(folder.glob('*.yaml')))}.yaml"
    path.write_text(text)
    t0 = time.perf_counter()
    said, crash = "accepted", ""
    try:
        with open_system(str(path), folder / "scratch", env={"HOSTILE_TOKEN": TOKEN}) as system:
            system.reset("a")
            system.save("a", [{"id": "m1", "content": "one"}, {"id": "m2", "content": "two"}])
            system.search("a", "q", 3)
    except LabError as exc:
        said = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a crash is the finding
        crash = f"CRASH {type(exc).__name__}: {str(exc)[:200]}"
    seconds = time.perf_counter() - t0
    problems = [crash] if crash else []
    problems += [f"{n!r} not named" for n in names if n not in said]
    if not names and said != "accepted":
        problems.append("refused")
    if TOKEN in said:
        problems.append("the token is in the error")
    if other.seen:
        problems.append(f"the other host got {len(other.seen)} request(s), first {other.seen[0][0]}")
    if expect_seen:  # the paths the server saw that should not be
        problems += [f"the server saw {p}" for p in expect_seen([p for p, _ in srv.seen])]
    return Outcome(GROUP, name, "refused naming " + " and ".join(repr(n) for n in names) + "; no token; stays on host"
                   if names else "accepted; stays on host",
                   f"{said[:170]} ({seconds:.1f} s)" + (f" -- {'; '.join(problems)}" if problems else ""), not problems)


def cases(work: Path, bundles: Any, short: bool, seed: int) -> list[Outcome]:
    srv, other = serve(), serve()
    srv.other = other.url
    try:
        return _all(work, srv, other, short)
    finally:
        for s in (srv, other):
            s.shutdown()
            s.server_close()


def _clear(srv: Any, other: Any, setup: Callable[[], None]) -> None:
    """Both servers as new (nothing seen, nothing stored, well-behaved), then the case's ``setup``."""
    srv.seen.clear()
    other.seen.clear()
    srv.store.clear()
    srv.capture, srv.mode = (lambda ns: "c-" + ns), "normal"
    setup()


def _set(srv: Any, capture: Any = None, mode: str | None = None) -> Callable[[], None]:
    def setup() -> None:
        if capture is not None:
            srv.capture = capture if callable(capture) else (lambda ns: capture)
        if mode:
            srv.mode = mode
    return setup


def _all(work: Path, srv: Any, other: Any, short: bool) -> list[Outcome]:
    u, host = srv.url, other.url.removeprefix("http://")

    def here(name: str, text: str, names: list[str], setup: Callable[[], None],
             seen: Callable[[list[str]], list[str]] | None = None) -> Outcome:
        return in_process(name, srv, other, work, text, names, setup, seen)

    def typed(name: str, text: str, code: int, names: list[str], setup: Callable[[], None], **kw: Any) -> Outcome:
        return command(name, srv, other, work, text, code, names, setup, **kw)

    query = f"{u}/c/c-mem-a/query"
    out = [
        here("capture '../../admin/drop' stays one segment", file_text(u), [],
             _set(srv, lambda ns: f"../../admin/drop-{ns}"), lambda paths: [p for p in paths if p.startswith("/admin")]),
        here("capture 'c?admin=1#x' adds no query", file_text(u), [], _set(srv, lambda ns: f"c-{ns}?admin=1#x"),
             lambda paths: [p for p in paths if "?" in p]),
        here("capture an absolute URL to another host", file_text(u, "{collection}"),
             ["{collection} (captured)", other.url, "leaves base_url's host"], _set(srv, other.url + "/x")),
        here("capture '//host' (scheme-relative)", file_text(u, "{collection}"),
             ["{collection} (captured)", f"//{host}", "leaves base_url's host"], _set(srv, f"//{host}/x")),
        here("capture a list", file_text(u), ["{collection}", "is a list"], _set(srv, ["c-1", "c-2"])),
        here("capture an object", file_text(u), ["{collection}", "is a dict"], _set(srv, {"id": "c-1"})),
        here("answer dripped a byte per 0.25 s (deadline_s 1)", file_text(u, extra="deadline_s: 1\n"),
             ["did not finish within deadline_s 1", query], _set(srv, mode="drip")),
        here("answer of 4 MB, chunked (max_answer_mb 1)", file_text(u, extra="max_answer_mb: 1\n"),
             ["passed max_answer_mb 1", query], _set(srv, mode="huge")),
        here("NaN distance", file_text(u), ["'distances[0][*]'", "is nan, not a finite number"], _set(srv, mode="nan")),
        here("Infinity score in hits", file_text(u, hits=True), ["the value at 'score'", "is inf, not a finite number"],
             _set(srv, mode="inf-hits")),
    ]
    if not short:
        small = file_text(u, extra="max_answer_mb: 1\n")
        out += [
            here("capture '..' alone stays one segment", file_text(u), [], _set(srv, ".."),
                 lambda paths: [p for p in paths if p != "/collections" and not p.startswith("/c/%2E%2E/")]),
            here("capture a number is kept", file_text(u), [], _set(srv, 12345),
                 lambda paths: [] if "/c/12345/add" in paths else [f"no /c/12345/add in {paths[:3]}"]),
            here("capture of 5000 characters", file_text(u), ["5000 characters, more than 1024"], _set(srv, "c" * 5000)),
            here("capture 'http://host' in the file's first segment", file_text(u, "{collection}"),
                 ["{collection} (captured)", "leaves base_url's host"], _set(srv, other.url)),
            here("an absolute URL as the file's own path", file_text(u, other.url + "/c"),
                 ["the path template", "leaves base_url's host"], _set(srv)),
            here("answer of 2 MB, its length declared (max_answer_mb 1)", small,
                 ["declares", "more than max_answer_mb 1"], _set(srv, mode="declared")),
            here("gzip answer of 40 MB decoded (max_answer_mb 1)", small, ["passed max_answer_mb 1"],
                 _set(srv, mode="gzip")),
            here("-Infinity distance", file_text(u), ["'distances[0][*]'", "is -inf"], _set(srv, mode="-inf")),
            here("307 to another host is not followed", file_text(u), ["answered 307"], _set(srv, mode="redirect")),
            here("JSON nested 100,000 deep", file_text(u), ["nested too deeply"], _set(srv, mode="deep")),
            typed("lab eval: a captured absolute URL", file_text(u, "{collection}"), 6,
                  ["{collection} (captured) =", other.url], _set(srv, other.url)),
            typed("lab eval: a dripped answer (deadline_s 2)", file_text(u, extra="deadline_s: 2\n"), 6,
                  ["did not finish within deadline_s 2"], _set(srv, mode="drip")),
            typed("lab eval: a NaN distance", file_text(u), 6, ["is nan, not a finite number"], _set(srv, mode="nan")),
            typed("lab eval, tracking on: a file with embed:", file_text(u, embed=True), 0, [], _set(srv), tracked=True),
        ]
        # a new SQLite tracking store costs about half a minute: the full form only (T1 is held on
        # every test run by tests/test_adapters_tracked.py)
        out.append(tracked_here(srv, other, work, file_text(u, embed=True)))
    return out


def tracked_here(srv: Any, other: Any, folder: Path, text: str) -> Outcome:
    """What `lab eval` does after the harness, in this process (the full form's in-process tracking case): a file
    with ``embed:`` on the demo goldens, its run folder, and its MLflow run (SQLite) with the model."""
    from lab.adapters.harness import evaluate_system, write_system_run
    from lab.adapters.registry import open_system
    from lab.eval.goldens import load_dataset
    from lab.track import log_system

    _clear(srv, other, lambda: None)
    case = folder / "tracked-here"
    case.mkdir()
    (case / "system.yaml").write_text(text)
    uri = f"sqlite:///{case / 'mlflow' / 'mlflow.db'}"
    t0 = time.perf_counter()
    dataset = load_dataset("demo")
    try:
        with open_system(str(case / "system.yaml"), case / "scratch", env={"HOSTILE_TOKEN": TOKEN}) as system:
            result = evaluate_system(system, dataset, progress=False)
        log_system(result, write_system_run(result, dataset, case / "runs"), dataset=dataset, uri=uri)
        problems = _mlflow_problems(uri)
        said = f"recall@10 {result.metrics['metrics']['recall@10']:.4f}, logged"
    except Exception as exc:  # noqa: BLE001 - a crash while logging is the finding (T1)
        problems, said = [f"CRASH {type(exc).__name__}: {str(exc)[:200]}"], "crashed"
    return Outcome(GROUP, "tracking on, in process: a file with embed:", "MLflow run with client_embedding_model; "
                   "no token", f"{said} ({time.perf_counter() - t0:.1f} s)" + (f" -- {'; '.join(problems)}"
                                                                                if problems else ""), not problems)


def command(name: str, srv: Any, other: Any, folder: Path, text: str, code: int, names: list[str],
            setup: Callable[[], None], tracked: bool = False) -> Outcome:
    """`lab eval --dataset demo --system FILE` as a user types it (tracking on a SQLite store when
    ``tracked``): its exit code, its last line naming ``names``, no traceback and no token anywhere
    (output, run folder, MLflow params and tags), nothing sent to the other host."""
    _clear(srv, other, setup)
    case = folder / f"cmd-{len(list(folder.glob('cmd-*')))}"
    case.mkdir()
    (case / "system.yaml").write_text(text)
    uri = f"sqlite:///{case / 'mlflow' / 'mlflow.db'}"
    track = ["--tracking-uri", uri] if tracked else ["--no-track"]
    t0 = time.perf_counter()
    try:
        got = subprocess.run([*LAB, "eval", "--dataset", "demo", "--system", str(case / "system.yaml"), *track,
                              "--quiet", "--out", str(case / "runs")], capture_output=True, text=True, cwd=ROOT,
                             env={**ENV, "HOSTILE_TOKEN": TOKEN, "LAB_EVAL_ROOT": str(case / "eval")}, timeout=240)
        rc, said = got.returncode, got.stdout + got.stderr
    except subprocess.TimeoutExpired:
        rc, said = "timeout", ""
    seconds = time.perf_counter() - t0
    last = next((ln for ln in reversed(said.strip().splitlines()) if ln.strip()), "(nothing)")
    problems = [f"exit {rc}, not {code}"] if rc != code else []
    problems += [f"{n!r} not named" for n in names if n not in said]
    problems += ["a traceback"] if "Traceback" in said else []
    problems += ["the token in the output"] if TOKEN in said else []
    problems += [f"the other host got {len(other.seen)} request(s)"] if other.seen else []
    if any(TOKEN in p.read_text(errors="ignore") for p in case.rglob("*") if p.is_file() and p.suffix != ".db"):
        problems.append("the token in the run folder")
    if tracked:
        problems += _mlflow_problems(uri)
    return Outcome(GROUP, name, f"exit {code}" + (f" naming {names}" if names else "") + "; no token; no traceback" +
                   ("; MLflow run with client_embedding_model" if tracked else ""),
                   f"exit {rc} in {seconds:.1f} s: {last[:150]}" + (f" -- {'; '.join(problems)}" if problems else ""),
                   not problems)


def _mlflow_problems(uri: str) -> list[str]:
    from lab import track

    _, client, exp = track.client(uri)
    runs = client.search_runs([exp], filter_string="tags.`lab.kind` = 'system'")
    if len(runs) != 1 or runs[0].info.status != "FINISHED":
        return [f"{len(runs)} system run(s) in MLflow, status {[r.info.status for r in runs]}"]
    data = runs[0].data
    problems = [] if data.params.get("client_embedding_model") == "fake-hash-256" else [f"params {data.params}"]
    if TOKEN in json.dumps([data.params, data.tags]):
        problems.append("the token in MLflow")
    return problems
