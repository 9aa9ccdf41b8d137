"""The defects a fault probe found (issue 28), each held by a test that failed before its fix:
a vector search that crashed on a selective filter, duplicate chunks after a retried save, a torn
Delta log that made a store unreadable, and NaN server settings that were accepted."""
from __future__ import annotations

import json
import os
import re

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from lab.config import IndexConfig, VectorIndexConfig
from lab.embed.fake import FakeEmbedder
from lab.errors import StoreError, ValidationError
from lab.index.namespace import NamespaceIndex
from lab.index.vector import GraphShortfall
from lab.pipeline import Pipeline
from lab.store.table import full_frame
from lab.serve.settings import load_settings
from lab.store.repair import recover_torn_commits
from lab.store.store import Store
from lab.write.check import check_store

from tests.conftest import SHARED

REPRO = SHARED.parent / "repro" / "hnsw_repro.jsonl"  # beside the shared datasets


# --------------------------------------------------------------------------- 1. filtered vector search
def _index(vectors: np.ndarray, memory_of: list[str], m: int = 16, ef: int = 256) -> NamespaceIndex:
    chunks = pl.DataFrame({
        "chunk_id": [f"{mid}#{i:04d}" for i, mid in enumerate(memory_of)],
        "memory_id": memory_of,
        "text": [f"text {i}" for i in range(len(memory_of))],
        "embedding": [v.tolist() for v in vectors],
    }, schema_overrides={"embedding": pl.Array(pl.Float32, vectors.shape[1])})
    # ef above the element count: the graph search sees every element it can reach, so what is
    # tested is the fetching and filtering around it, not hnswlib's approximation
    config = IndexConfig(vector=VectorIndexConfig(m=m, ef_construction=ef, ef_search=ef))
    return NamespaceIndex.build("ns", chunks, vectors.shape[1], config, "test", "0.0.0.0")


def _brute(idx: NamespaceIndex, query: np.ndarray, k: int, allowed: np.ndarray) -> list[tuple[str, float]]:
    """Each allowed live memory's best chunk cosine, best first, ties by id: the plain reference."""
    best: dict[str, float] = {}
    for label, mid in enumerate(idx.memory_of):
        if idx.live[label] and allowed[label]:
            best[mid] = max(best.get(mid, -np.inf), float(idx._vectors[label] @ query))
    return sorted(best.items(), key=lambda kv: (-kv[1], kv[0]))[:k]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(2, 120), chunks_per=st.integers(1, 3), k=st.integers(1, 30), seed=st.integers(0, 10_000),
       deleted=st.floats(0, 0.95), kept=st.floats(0, 1))
def test_a_filtered_vector_search_returns_exactly_the_allowed_top_k(n, chunks_per, k, seed, deleted, kept):
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(n, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    memory_of = [f"m{i // chunks_per:03d}" for i in range(n)]
    idx = _index(vectors, memory_of)
    gone = [idx.chunk_ids[i] for i in np.flatnonzero(rng.random(n) < deleted)]
    idx.apply(None, gone, "0.0.0.1")
    allowed = rng.random(n) < kept
    query = rng.normal(size=8).astype(np.float32)
    query /= np.linalg.norm(query)
    got = idx.search_vector(query, k, allowed)
    want = _brute(idx, query, k, allowed)
    assert [mid for mid, _ in got] == [mid for mid, _ in want]
    assert np.allclose([s for _, s in got], [s for _, s in want], atol=1e-5)


def test_a_graph_that_cannot_supply_the_fetch_falls_back_to_an_exact_scan(monkeypatch):
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(50, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    idx = _index(vectors, [f"m{i:03d}" for i in range(50)])

    def short(query, k):
        raise GraphShortfall("hnswlib returned fewer than asked")

    monkeypatch.setattr(idx.vector, "search", short)
    allowed = np.zeros(50, dtype=bool)
    allowed[[3, 17, 40]] = True
    got = idx.search_vector(vectors[17], 10, allowed)
    assert [mid for mid, _ in got][0] == "m017" and sorted(m for m, _ in got) == ["m003", "m017", "m040"]


def test_the_reported_reproduction_answers_a_search(tmp_path):
    if not REPRO.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{REPRO} is missing under CI")
        pytest.skip(f"{REPRO} not present on this machine")
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.ingest(REPRO, namespace="upd", progress=False)
        hits = pipe.search("base memory token", namespace="upd")
        assert len(hits) == 10
        valid = set(pipe.store.memories("upd").filter(pl.col("valid"))["id"].to_list())
        assert {h.memory_id for h in hits} <= valid


# --------------------------------------------------------------------------- 2. a save cut between its commits
def test_a_retry_after_a_crash_between_the_two_commits_leaves_a_clean_store(tmp_path, monkeypatch):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("a memory saved before", "n")
        real = pipe.store._memories.append

        def killed(*args, **kwargs):  # the process dies after the chunks commit
            raise KeyboardInterrupt

        monkeypatch.setattr(pipe.store._memories, "append", killed)
        with pytest.raises(KeyboardInterrupt):
            pipe.save("the memory being saved when the process died", "n")
        monkeypatch.setattr(pipe.store._memories, "append", real)
    assert [p.severity for p in check_store(root).problems] == ["warning"]  # orphan chunks, not an error
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:  # the retry, in a new process
        pipe.save("the memory being saved when the process died", "n")
        assert pipe.store.chunks("n")["chunk_id"].is_duplicated().sum() == 0
    report = check_store(root)
    assert report.problems == [], [str(p) for p in report.problems]


def test_compact_and_repair_remove_orphans_and_second_copies_of_any_age(tmp_path):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"content": f"memory number {i}", "namespace": "n"} for i in range(5)], progress=False)
        stored = full_frame(pipe.store._chunks)  # every column: the rows are written back as they are
        # what the old code left: the killed save's chunks and the retry's, both stored
        pipe.store._chunks.append(stored.head(2).to_arrow().cast(pipe.store._chunks.schema))
        orphan = stored.head(1).with_columns(pl.lit("n:orphan").alias("memory_id"),
                                             pl.lit("n:orphan#0").alias("chunk_id"))
        pipe.store._chunks.append(orphan.to_arrow().cast(pipe.store._chunks.schema))
    assert check_store(root).errors, "duplicate chunks must be an error"
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        done = pipe.repair()
    assert (done["stale_chunks_removed"], done["duplicate_chunks_removed"]) == (1, 2)
    assert check_store(root).problems == []
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        assert pipe.store._chunks.frame().height == 5
        assert len(pipe.search("memory number 3", namespace="n")) == 5


# --------------------------------------------------------------------------- 5. a torn Delta log file
def test_a_torn_last_log_file_is_named_and_repair_recovers_the_version_before_it(tmp_path):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("kept across the tear", "n")
        pipe.save("the torn commit's memory", "n")
    log = sorted((root / "tables" / "memories" / "_delta_log").glob("*.json"))[-1]
    text = log.read_bytes()
    log.write_bytes(text[: len(text) // 2])  # the process died while writing it
    with pytest.raises(StoreError, match=f"{log.name} is torn"):
        Store.open(root)
    assert recover_torn_commits(root) == [f"memories/{log.name}"]
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        pipe.repair()
        assert pipe.store.memories("n")["content"].to_list() == ["kept across the tear"]
        pipe.save("the torn commit's memory", "n")  # its retry lands
    assert check_store(root).problems == []
    assert recover_torn_commits(root) == []


def test_a_torn_older_log_file_is_named_and_repair_refuses_in_one_line_saying_what_to_do(tmp_path, capsys):
    from lab.cli import main
    from lab.retriever import Retriever

    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        for content in ("the first memory", "the second memory", "the third memory"):
            pipe.save(content, "n")
    logs = sorted((root / "tables" / "memories" / "_delta_log").glob("*.json"))
    torn = logs[-2]  # version 2: the third save's commit (version 3) builds on it
    torn.write_bytes(torn.read_bytes()[:20])
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    with pytest.raises(StoreError, match=f"table memories: Delta log file {torn.name} \\(version 2\\) is torn"):
        Store.open(root)  # it was deltalake's "Json error: Truncated record", naming no file
    assert [str(p) for p in check_store(root).problems] == [
        f"error   table memories: Delta log file {torn.name} (version 2) is torn or damaged and the 1 later "
        "commit(s) build on it, so the table cannot be read and `lab store repair` cannot take it out without "
        "losing them: restore that file, or the whole store, from a backup (versions 0 to 1 of this table still "
        f"read: lab.open_retriever({str(root)!r}, pin='1.3.0.0') opens the store at them, read-only)"]
    capsys.readouterr()
    assert main(["store", "repair", "--store", str(root)]) == 5  # it exited 5 with deltalake's parse error, naming no file
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1, err
    assert f"Delta log file {torn.name}" in err and "restore that file, or the whole store, from a backup" in err
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before  # refused: nothing moved
    with Retriever.open(root, pin="1.3.0.0", embedder=FakeEmbedder()) as old:  # the way out it names
        assert old.store.memories("n")["content"].to_list() == ["the first memory"]


# --------------------------------------------------------------------------- 4. server settings
@pytest.mark.parametrize("name,value", [("rate", "nan"), ("refresh_seconds", "nan"), ("rate", "inf"),
                                        ("burst", "-1"), ("group_wait_ms", "1e9"), ("port", "70000"),
                                        ("query_batch", "2.5"), ("embed_timeout_s", "0")])
def test_nan_infinite_and_out_of_range_settings_are_refused_naming_where_they_came_from(tmp_path, name, value):
    with pytest.raises(ValidationError, match=f"setting {name} from the command line"):
        load_settings({name: value}, env={})
    with pytest.raises(ValidationError, match=f"setting {name} from \\$LAB_SERVE_{name.upper()}"):
        load_settings({}, env={f"LAB_SERVE_{name.upper()}": value})
    conf = tmp_path / "serve.json"
    conf.write_text(json.dumps({name: float(value)}))
    with pytest.raises(ValidationError, match=f"setting {name} from {conf}"):
        load_settings({}, env={}, config_file=conf)


@pytest.mark.parametrize("name,value,allowed", [
    ("rate", "1e-300", ">= 0.001 and <= 1000000"), ("refresh_seconds", "0", ">= 0.05 and <= 3600"),
    ("snapshot_seconds", "0", ">= 1 and <= 86400"), ("embed_timeout_s", "1e-300", ">= 1 and <= 86400"),
    ("port", "0", ">= 1 and <= 65535")])
def test_absurdly_small_settings_are_refused_naming_the_setting_where_and_the_range(tmp_path, name, value, allowed):
    # each would start a server that cannot work: a bucket refilled once an age, the log re-read or
    # every index saved on every request, every query's embedding process killed as hung, a random port
    want = f"setting {name} from {{}} must be a finite number {allowed}, got {float(value) if name != 'port' else int(value)!r}"
    with pytest.raises(ValidationError, match=re.escape(want.format("the command line"))):
        load_settings({name: value}, env={})
    with pytest.raises(ValidationError, match=re.escape(want.format(f"$LAB_SERVE_{name.upper()}"))):
        load_settings({}, env={f"LAB_SERVE_{name.upper()}": value})
    conf = tmp_path / "serve.json"
    conf.write_text(json.dumps({name: float(value)}))
    with pytest.raises(ValidationError, match=re.escape(want.format(conf))):
        load_settings({}, env={}, config_file=conf)


def test_the_smallest_working_settings_and_in_process_embedding_are_kept():
    s = load_settings({"rate": "0.001", "refresh_seconds": "0.05", "snapshot_seconds": "1", "embed_timeout_s": "1",
                       "port": "1", "query_embedders": "0"}, env={})
    assert (s.rate, s.refresh_seconds, s.snapshot_seconds, s.embed_timeout_s, s.port, s.query_embedders) == (
        0.001, 0.05, 1.0, 1.0, 1, 0)  # query_embedders 0: queries embedded in the server process


def test_a_setting_built_directly_is_checked_too():
    from lab.serve.settings import Settings

    with pytest.raises(ValidationError, match="setting rate must be a finite number"):
        Settings(rate=float("nan"))
    with pytest.raises(ValidationError, match="setting log_level must be critical, error, warning, info, debug or "
                                              "trace, got 'loud'") as refused:
        Settings(log_level="loud")
    assert refused.value.field == "log_level"


# --------------------------------------------------------------------------- 6. inputs checked before work
def test_lab_eval_refuses_an_unknown_fuser_before_it_loads_anything(tmp_path):
    import subprocess
    import sys

    bad = tmp_path / "bad.yaml"
    bad.write_text("fusion:\n  method: bogus\n")
    # the dataset does not exist either: the fuser is named first, so no loading came before it
    got = subprocess.run([sys.executable, "-m", "lab", "eval", "--dataset", str(tmp_path / "no-such-dataset"),
                          "--config", str(bad), "--no-track", "--quiet"], capture_output=True, text=True)
    assert got.returncode == 2 and "fusion.method" in got.stderr and "bogus" in got.stderr, got.stderr


@pytest.mark.parametrize("flags,said", [
    (["--config", "{since}"], "{since}: filters.since: 'garbage' is not an ISO 8601 date-time (e.g. 2026-01-14T09:32:00Z)"),
    (["--k", "5", "-1"], "--k: every cutoff must be >= 1, got -1"),
    (["--budget", "-3"], "--budget must be >= 0 (0: no context metrics), got -3"),
])
def test_lab_eval_refuses_a_bad_date_or_count_before_it_loads_anything(tmp_path, capsys, flags, said):
    from lab.cli import main

    since = tmp_path / "since.yaml"
    since.write_text("filters: {since: garbage}\n")
    # the dataset does not exist: the input is named first, so no loading came before it (the date
    # and --k -1 were refused only after the dataset was loaded and indexed, seconds later)
    flags = [f.format(since=since) for f in flags]
    assert main(["eval", "--dataset", str(tmp_path / "no-such-dataset"), *flags, "--no-track", "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == "error: " + said.format(since=since)


def test_an_empty_config_file_is_refused_by_search_and_eval_alike_naming_the_file(tmp_path, capsys):
    from lab.cli import main

    Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True).close()
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set yet\n")
    said = (f"error: {empty}: the file is empty; a config file holds a mapping of config keys "
            "(e.g. `fusion: {method: rrf}`)")
    # search took it for the defaults and answered; eval said "expected a mapping ..., got NoneType"
    assert main(["search", "billing", "--store", str(tmp_path / "s"), "--namespace", "n", "--preset", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == said
    assert main(["eval", "--dataset", str(tmp_path / "no-such-dataset"), "--config", str(empty), "--no-track"]) == 2
    assert capsys.readouterr().err.strip() == said


def test_a_sweep_naming_an_unknown_fuser_is_refused_when_read(tmp_path):
    from lab.tune.spec import load_spec

    spec = tmp_path / "s.yaml"
    spec.write_text("dataset: demo\nspace:\n  fusion.method: [rrf, bogus]\n")
    with pytest.raises(ValidationError, match="space.fusion.method: unknown fusion method 'bogus'"):
        load_spec(spec)


def test_a_whole_commit_holding_unicode_line_separators_is_not_taken_for_torn(tmp_path):
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("one line\u2028and another\x85and a third\u2029", "n")
    assert recover_torn_commits(tmp_path / "s") == []
    with Pipeline.open(tmp_path / "s", embedder=FakeEmbedder()) as pipe:
        assert pipe.store.memories("n").height == 1
