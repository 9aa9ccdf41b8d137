"""The `lab` command end to end, as a user runs it (subprocesses, fake model for speed)."""
from __future__ import annotations

import pytest

import json
import subprocess
import sys
from pathlib import Path

LAB = [sys.executable, "-m", "lab.cli"]


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([*LAB, *args], capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"lab {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
    return proc


def test_help_lists_the_commands():
    out = run("--help").stdout
    for command in ("demo", "init", "ingest", "stats", "store", "search"):
        assert command in out


def test_help_does_not_import_heavy_modules():
    code = "import sys; from lab.cli import build_parser; build_parser(); " \
           "print(sorted(m for m in ('torch','polars','deltalake','sentence_transformers','hnswlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow  # several CLI subprocesses, each paying the imports
def test_init_ingest_stats_search_compact(tmp_path: Path):
    store = str(tmp_path / "s")
    run("init", "--store", store, "--model", "fake-hash-256")
    data = tmp_path / "m.jsonl"
    data.write_text(
        "\n".join(json.dumps({"namespace": "ops", "content": c, "type": "fact"}) for c in
                  ["the pager rotation starts monday", "postgres runs version 16", "the VPN code is ZX-81"]),
        encoding="utf-8",
    )
    out = run("ingest", str(data), "--store", store, "--json").stdout
    assert json.loads(out)["created"] == 3
    stats = json.loads(run("stats", "--store", store, "--json").stdout)
    assert stats["memories"] == 3 and stats["namespaces"] == ["ops"]
    hits = json.loads(run("search", "ZX-81", "--store", store, "--namespace", "ops", "--json").stdout)
    assert hits[0]["content"] == "the VPN code is ZX-81"
    table = run("search", "postgres", "--store", store, "--namespace", "ops").stdout
    assert "postgres runs version 16" in table.splitlines()[1]
    assert "files" in run("store", "compact", "--store", store).stdout


@pytest.mark.slow  # several CLI subprocesses, each paying the imports
def test_errors_are_clear_and_exit_non_zero(tmp_path: Path):
    store = str(tmp_path / "s")
    proc = run("stats", "--store", store, check=False)
    assert proc.returncode == 3 and "no lab store" in proc.stderr
    run("init", "--store", store, "--model", "fake-hash-256")
    proc = run("init", "--store", store, "--model", "fake-hash-256", check=False)
    assert proc.returncode == 4 and "exists already" in proc.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"namespace": "n", "content": "x", "type": "memo"}\n')
    proc = run("ingest", str(bad), "--store", store, check=False)
    assert proc.returncode == 2 and "bad.jsonl line 1: field 'type'" in proc.stderr
    proc = run("search", "x", "--store", store, "--namespace", "nowhere", check=False)
    assert proc.returncode == 3 and "unknown namespace 'nowhere'" in proc.stderr
    proc = run("init", "--store", str(tmp_path / "t"), "--model", "gpt-9", check=False)
    assert proc.returncode == 2 and "unknown embedding model 'gpt-9'" in proc.stderr


@pytest.mark.slow  # several CLI subprocesses, each paying the imports
def test_context_command_renders_zones_within_the_budget(tmp_path: Path):
    store = str(tmp_path / "s")
    run("init", "--store", store, "--model", "fake-hash-256")
    run("ingest", str(Path(__file__).resolve().parent.parent / "datasets" / "demo"), "--store", store, "--quiet")
    args = ("context", "Ledgerline max_pool_size", "--store", store, "--namespace", "atlas", "--budget", "400")
    data = json.loads(run(*args, "--format", "json").stdout)
    assert 0 < data["used"] <= 400 and data["items"]
    assert any("max_pool_size" in i["text"] for i in data["items"])
    zones = [i["zone"] for i in data["items"]]
    assert zones == sorted(zones, key=["critical", "middle", "recency"].index)
    md = run(*args, "--format", "markdown").stdout
    assert md.startswith("## ") and f"**[{data['items'][0]['memory_id']}]**" in md
    text = run(*args, "--counter", "exact", "--ratios", "20/60/20").stdout
    assert text.startswith("=== ")
    proc = run(*args, "--ratios", "10/10/10", check=False)
    assert proc.returncode == 2 and "--ratios '10/10/10': the three shares must sum to 100 (or to 1), got 30" in proc.stderr
    empty = run("context", "x", "--store", store, "--namespace", "atlas", "--budget", "1", "--format", "json").stdout
    assert json.loads(empty)["items"] == []  # no item fits in one token
    zero = run("context", "x", "--store", store, "--namespace", "atlas", "--budget", "0", check=False)
    assert zero.returncode == 2 and "--budget must be a finite number >= 1 and <= 1000000, got 0" in zero.stderr


@pytest.mark.slow
def test_eval_check_prints_a_status_per_condition_and_fails_on_fail(tmp_path: Path):
    import os

    env_root = tmp_path / "eval"
    conditions = tmp_path / "regressions.yaml"
    conditions.write_text(
        "conditions:\n"
        "  - {name: easy, dataset: demo, preset: bm25, ks: [10], expected: {recall@10: 0.05}}\n"
        "  - {name: impossible, dataset: demo, preset: bm25, ks: [10], expected: {recall@10: 1.01}}\n"
        "  - {name: plain, dataset: demo, preset: bm25, context_turns: 0, ks: [10], expected: {recall@10: 0.05}}\n",
        encoding="utf-8")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    proc = subprocess.run([*LAB, "eval", "--check", str(conditions), "--out", str(tmp_path / "runs"), "--quiet",
                           "--budget", "0", "--tracking-uri", uri], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "LAB_EVAL_ROOT": str(env_root)})
    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stderr
    assert lines[0].startswith("OK     easy: recall@10") and lines[1].startswith("FAIL   impossible")
    assert lines[2].startswith("OK     plain: recall@10")
    assert (tmp_path / "runs" / "demo-bm25" / "report.md").is_file()
    # a condition on another index gets its own store and its own run folder, named by the lever
    assert (tmp_path / "runs" / "demo+ctx0-bm25" / "report.md").is_file()
    import json

    chunk = json.loads((tmp_path / "runs" / "demo+ctx0-bm25" / "metrics.json").read_text())["info"]["chunk"]
    assert chunk["context_turns"] == 0
    # every condition is an MLflow run, tagged with its condition and status
    from lab.track import client

    _, c, exp = client(uri)
    runs = c.search_runs([exp])
    assert sorted((r.data.tags["lab.regression"], r.data.tags["lab.regression_status"]) for r in runs) == [
        ("easy", "OK"), ("impossible", "FAIL"), ("plain", "OK")]
    assert all("recall_at_10" in r.data.metrics for r in runs)


def test_search_output_shows_control_and_bidi_characters_as_escapes(tmp_path: Path):
    import json

    store = str(tmp_path / "s")
    run("init", "--store", store, "--model", "fake-hash-256")
    data = tmp_path / "m.jsonl"
    data.write_text(json.dumps({"namespace": "n", "content": "evil \x1b[31mred\x1b[0m text\x00 with \u202eoverride"}) + "\n",
                    encoding="utf-8")
    run("ingest", str(data), "--store", store, "--quiet")
    for cmd in (("search", "evil red text", "--namespace", "n"), ("context", "evil red text", "--namespace", "n")):
        out = run(*cmd, "--store", store).stdout
        assert "\x1b" not in out and "\x00" not in out and "\u202e" not in out, cmd
        assert "\\u001b[31mred" in out and "\\u202eoverride" in out, out


def test_a_refused_ingest_leaves_no_store_and_a_missing_input_is_not_found(tmp_path: Path):
    missing = run("ingest", str(tmp_path / "absent.jsonl"), "--store", str(tmp_path / "a"), "--create", check=False)
    assert missing.returncode == 3 and "input not found" in missing.stderr  # 3: not found, as the README says
    assert not (tmp_path / "a").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "fine", "namespace": "n"}\n{"content": ""}\n')
    refused = run("ingest", str(bad), "--store", str(tmp_path / "b"), "--create", "--namespace", "n", check=False)
    assert refused.returncode == 2 and "line 2" in refused.stderr
    assert not (tmp_path / "b").exists()  # the store this command created for it is gone again


def test_every_sub_command_has_a_description_and_every_option_a_help():
    import argparse

    from lab.cli import build_parser

    missing = []

    def walk(parser, path):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    if not sub.description:
                        missing.append(f"lab {' '.join(path + [name])}: no description")
                    walk(sub, path + [name])
            elif action.dest != "help" and not action.help:
                missing.append(f"lab {' '.join(path)} {'/'.join(action.option_strings) or action.dest}: no help")

    walk(build_parser(), [])
    assert missing == []


def test_models_table_columns_line_up_for_every_row():
    entries = json.loads(run("models", "--json").stdout)
    lines = run("models").stdout.splitlines()
    header, rows, abouts = lines[0], lines[1:1 + 2 * len(entries):2], lines[2:2 + 2 * len(entries):2]
    # (header, the entry's cell, left-aligned?): a left column's cells start where its header
    # starts, a right column's (numbers) end where its header ends
    columns = [("model", lambda e: e["id"], True), ("alias", lambda e: e["alias"], True),
               ("backend", lambda e: e["backend"], True), ("dim", lambda e: str(e["dim"]), False),
               ("tokens", lambda e: str(e["max_tokens"]), False),
               ("MB", lambda e: "-" if e["size_mb"] is None else f"{e['size_mb']:.1f}", False),
               ("license", lambda e: e["license"], True)]
    assert any(len(e["id"]) > 27 for e in entries)  # the long sparse id that once pushed its row out of line
    for entry, row, about in zip(entries, rows, abouts):
        at = 0
        for name, cell, left in columns:
            start = row.index(cell(entry) + " " if name != "license" else cell(entry), at)
            if left:
                assert start == header.index(name), (name, row)
            else:
                assert start + len(cell(entry)) == header.index(name) + len(name), (name, row)
            at = start + len(cell(entry))
        assert about == " " * header.index("alias") + entry["about"]


def test_bm25s_does_not_log_its_index_builds_at_the_default_level(tmp_path: Path):
    store = str(tmp_path / "s")
    run("init", "--store", store, "--model", "fake-hash-256")
    data = tmp_path / "m.jsonl"
    data.write_text(json.dumps({"namespace": "n", "content": "hello world"}) + "\n", encoding="utf-8")
    # a root handler, as `lab serve` (uvicorn), the MCP SDK or a library logging through the root
    # logger installs one: bm25s sets its own logger to DEBUG on import, so each build reached it
    code = ("import logging, sys; logging.basicConfig(); from lab.cli import main; "
            "sys.exit(main(sys.argv[1:]))")
    for args in (("ingest", str(data), "--store", store), ("search", "hello", "--store", store, "--namespace", "n")):
        proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "Building index from tokens" not in proc.stderr and "bm25s" not in proc.stderr, args


def test_k_is_accepted_as_short_for_dash_dash_k_wherever_a_command_has_it():
    import argparse

    from lab.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["search", "x", "--namespace", "n", "-k", "3"]).k == 3
    assert parser.parse_args(["eval", "--dataset", "demo", "-k", "1", "5"]).k == [1, 5]
    without = []

    def walk(p, path):
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, path + [name])
            elif "--k" in action.option_strings and "-k" not in action.option_strings:
                without.append(" ".join(path))

    walk(parser, [])
    assert without == []


def test_a_missing_gate_or_sweep_file_is_not_found_naming_the_file(tmp_path: Path):
    missing = str(tmp_path / "nope.yaml")
    for args, what in ((("gate", "--config", missing, "--no-track"), "gate config"),
                       (("sweep", missing, "--no-track"), "sweep file")):
        proc = run(*args, check=False)
        assert proc.returncode == 3, (args, proc.stderr)  # 3: not found, as every other missing input
        assert f"error: {what} not found: {missing}" in proc.stderr


def test_a_missing_default_store_points_at_the_demo_store_when_there_is_one(tmp_path: Path):
    import os

    env = {k: v for k, v in os.environ.items() if k != "LAB_STORE"}

    def lab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*LAB, *args], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)

    before = lab("search", "x", "--namespace", "atlas")
    assert before.returncode == 3 and "no lab store at .lab/store" in before.stderr
    assert ".lab/demo" not in before.stderr  # no demo store: no hint
    assert lab("init", "--store", ".lab/demo", "--model", "fake-hash-256").returncode == 0  # as `lab demo` leaves it
    for command in ("search", "context"):
        proc = lab(command, "x", "--namespace", "atlas")
        assert proc.returncode == 3, proc.stderr
        assert "no lab store at .lab/store (the demo's store is .lab/demo: add --store .lab/demo" in proc.stderr
    named = lab("search", "x", "--namespace", "atlas", "--store", "elsewhere")
    assert named.returncode == 3 and ".lab/demo" not in named.stderr  # a store named on purpose: no guess
