"""Damaged stores: a corrupt or swapped index is verified on load and rebuilt, a missing or corrupt
Parquet file is a StoreError (exit 5, no traceback), `lab store check` names it and `lab store
repair` takes the damaged file out of its table, losing only its rows."""
from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.embed.fake import FakeEmbedder
from lab.errors import StoreError
from lab.pipeline import Pipeline
from lab.retriever import Retriever

LAB = [sys.executable, "-m", "lab.cli"]


def _store(tmp_path: Path) -> Path:
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save_many([{"namespace": "a", "content": f"alpha memory {i} about rivers"} for i in range(20)], progress=False)
        pipe.save_many([{"namespace": "b", "content": f"beta memory {i} about mountains"} for i in range(20)], progress=False)
        pipe.build()
    return root


def _lab(*args: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *args, "--store", str(store)], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("damage", ["hnsw", "bm25", "labels", "manifest", "swapped_bm25", "missing_file"])
def test_a_damaged_index_is_rebuilt_with_a_warning_and_search_still_answers(tmp_path, caplog, damage):
    root = _store(tmp_path)
    index = root / "indexes" / "a"
    if damage == "hnsw":
        (index / "vectors.hnsw").write_bytes(b"\0" * 100)
    elif damage == "bm25":
        target = sorted((index / "lexical").rglob("*"))[-1]
        target.write_bytes(target.read_bytes()[:-7] + b"garbage")
    elif damage == "labels":
        (index / "labels.parquet").write_bytes(b"PAR1 not really")
    elif damage == "manifest":
        (index / "manifest.json").write_text("{ truncated", encoding="utf-8")
    elif damage == "swapped_bm25":  # b's lexical index in a's folder: once silently wrong results
        shutil.rmtree(index / "lexical")
        shutil.copytree(root / "indexes" / "b" / "lexical", index / "lexical")
    else:
        (index / "lexical_labels.npy").unlink()
    with caplog.at_level(logging.WARNING, logger="lab.index.manager"):
        with Retriever.open(root, embedder=FakeEmbedder()) as r:
            hits = r.search("alpha memory 3 about rivers", "a", k=3)
    assert "failed verification" in caplog.text
    assert "alpha memory 3 about rivers" in [h.content for h in hits]
    got = _lab("store", "check", store=root)
    assert got.returncode == 5 and "index a:" in got.stdout and "Traceback" not in got.stderr
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:  # a writer saves the rebuilt index
        pipe.search("rivers", "a", k=1)
    assert _lab("store", "check", store=root).returncode == 0


def _data_files(root: Path, table: str) -> list[Path]:
    return sorted((root / "tables" / table).glob("*.parquet"))


@pytest.mark.parametrize("how", ["missing", "corrupt"])
def test_a_damaged_parquet_file_is_named_checked_and_repaired(tmp_path, how):
    root = _store(tmp_path)
    with Pipeline.open(root, embedder=FakeEmbedder()) as pipe:
        pipe.save("gamma memory saved last", namespace="a")
    newest = max(_data_files(root, "memories"), key=lambda p: p.stat().st_mtime_ns)
    if how == "missing":
        newest.unlink()
    else:
        newest.write_bytes(b"PAR1" + b"\x13" * 200 + b"PAR1")
    for cmd in (["stats"], ["search", "rivers", "--namespace", "a"]):
        got = _lab(*cmd, store=root)
        assert got.returncode == 5, (cmd, got.stderr)
        assert "table memories: data file" in got.stderr and "Traceback" not in got.stderr
    with pytest.raises(StoreError, match="lab store check"):
        Retriever.open(root, embedder=FakeEmbedder()).search("rivers", "a", k=1)
    got = _lab("store", "check", store=root)
    assert got.returncode == 5 and f"data file {newest.name} is {how if how == 'missing' else 'unreadable'}" in got.stdout
    got = subprocess.run([*LAB, "store", "repair", "--store", str(root), "--json"], capture_output=True, text=True,
                         timeout=300)
    assert got.returncode == 0, got.stdout + got.stderr
    done = json.loads(got.stdout)
    assert done["files_dropped"]["memories"]["files"] == [newest.name] and done["check"]["ok"]
    with Retriever.open(root, embedder=FakeEmbedder()) as r:  # the earlier memories are all there
        assert r.store.memories().height == 40
        assert "alpha memory 3 about rivers" in [h.content for h in r.search("alpha memory 3 about rivers", "a", k=3)]
