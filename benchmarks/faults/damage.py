"""Corruption of each table's data file, a torn last Delta log file of each table, and each index
file: `lab store check` must name the damage, `lab store repair` mend it, and check pass after."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from outcome import Outcome

from serving import ROOT

LAB = [sys.executable, "-m", "lab"]
TABLES = ("memories", "chunks", "edges", "namespaces")


def _lab(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LAB, *args], capture_output=True, text=True, cwd=ROOT)


def template(tmp: Path) -> Path:
    """A small store with memories, edges and saved indexes (the fake embedder)."""
    store = tmp / "template"
    _lab("init", "--store", str(store), "--model", "fake-hash-256").check_returncode()
    data = tmp / "damage"
    data.mkdir()
    (data / "memories.jsonl").write_text("".join(
        json.dumps({"id": f"d:{i}", "content": f"memory {i} about topic {i % 7}"}) + "\n" for i in range(40)))
    (data / "edges.jsonl").write_text("".join(
        json.dumps({"src": f"d:{i}", "dst": f"d:{i + 1}", "relation": "related_to"}) + "\n" for i in range(10)))
    _lab("ingest", str(data), "--store", str(store), "--namespace", "d").check_returncode()
    _lab("search", "memory about topic", "--store", str(store), "--namespace", "d").check_returncode()
    return store


def _case(tmp: Path, base: Path, name: str, damage, names: str) -> Outcome:
    store = tmp / name.replace(" ", "-").replace("/", "-")
    shutil.copytree(base, store)
    what = damage(store)
    if what is None:
        return Outcome("damage", name, "check names it", "nothing to damage in this store", False)
    before = _lab("store", "check", "--store", str(store))
    said = (before.stdout + before.stderr).strip()
    named = before.returncode != 0 and names in said and "Traceback" not in said
    repair = _lab("store", "repair", "--store", str(store))
    after = _lab("store", "check", "--store", str(store))
    search = _lab("search", "memory about topic", "--store", str(store), "--namespace", "d")
    ok = named and repair.returncode == 0 and after.returncode == 0 and search.returncode == 0
    return Outcome("damage", name, "check names it; repair; check clean",
                   f"check exit {before.returncode} ({'named' if named else 'NOT named: ' + said[-120:]}), "
                   f"repair exit {repair.returncode}, check exit {after.returncode}, search exit {search.returncode}"
                   + ("" if repair.returncode == 0 else f"; repair: {(repair.stdout + repair.stderr).strip()[-160:]}"),
                   ok)


def _corrupt_data(table: str):
    def damage(store: Path) -> str | None:
        files = sorted((store / "tables" / table).glob("*.parquet"))
        if not files:
            return None
        files[-1].write_bytes(b"PAR1 not a parquet file" * 10)
        return files[-1].name
    return damage


def _tear_log(table: str):
    def damage(store: Path) -> str | None:
        log = sorted((store / "tables" / table / "_delta_log").glob("*.json"))[-1]
        data = log.read_bytes()
        log.write_bytes(data[: max(1, len(data) // 2)])
        return log.name
    return damage


def _corrupt_index(file: str):
    def damage(store: Path) -> str | None:
        folder = next((store / "indexes").iterdir())
        target = sorted(p for p in folder.rglob("*") if p.is_file() and p.name == file)
        if not target:
            return None
        target[0].write_bytes(b"\x00garbage" * 8)
        return file
    return damage


def damage_cases(tmp: Path, short: bool = False) -> list[Outcome]:
    """Every table and index file (short: the memories table and the vector index only)."""
    base = template(tmp)
    out = []
    for table in TABLES[:1] if short else TABLES:
        out.append(_case(tmp, base, f"data file of {table} corrupted", _corrupt_data(table), "table " + table))
        out.append(_case(tmp, base, f"last log file of {table} torn", _tear_log(table), "torn"))
    index_files = sorted({p.name for p in next((base / "indexes").iterdir()).rglob("*") if p.is_file()})
    for file in ["vectors.hnsw"] if short else index_files:
        out.append(_case(tmp, base, f"index file {file} corrupted", _corrupt_index(file), "index d"))
    return out
