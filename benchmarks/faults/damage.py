"""Corruption of each table's data file, a torn newest Delta log file of each table (cut in half,
emptied, its last line dropped, overwritten with garbage), a torn log file with later commits after
it, and each index file: `lab store check` must name the damage, `lab store repair` mend it (or,
where it cannot, say so and why), and check find no error and no warning after a mend."""
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
    more = tmp / "more.jsonl"  # a later commit of every table but edges: the first ones are not the newest
    more.write_text("".join(json.dumps({"id": f"d:{i}", "content": f"memory {i} about topic {i % 7}"}) + "\n"
                            for i in range(40, 60)))
    _lab("ingest", str(more), "--store", str(store), "--namespace", "d").check_returncode()
    _lab("search", "memory about topic", "--store", str(store), "--namespace", "d").check_returncode()
    return store


def _check_json(store: Path) -> tuple[int, list[str], list[str], str]:
    """`lab store check --json`: exit code, errors, warnings, and a crash (if any)."""
    got = _lab("store", "check", "--store", str(store), "--json")
    try:
        problems = json.loads(got.stdout)["problems"]
    except (ValueError, KeyError):
        return got.returncode, [], [], (got.stdout + got.stderr).strip()[-160:] or "(no output)"
    errors = [f"{p['where']}: {p['what']}" for p in problems if p["severity"] == "error"]
    warnings = [f"{p['where']}: {p['what']}" for p in problems if p["severity"] != "error"]
    return got.returncode, errors, warnings, "Traceback" if "Traceback" in got.stderr else ""


def _case(tmp: Path, base: Path, name: str, damage, names: str, mendable: bool = True) -> Outcome:
    store = tmp / name.replace(" ", "-").replace("/", "-").replace("(", "").replace(")", "").replace(",", "")
    shutil.copytree(base, store)
    what = damage(store)
    if what is None:
        return Outcome("damage", name, "check names it", "nothing to damage in this store", False)
    before = _lab("store", "check", "--store", str(store))
    said = (before.stdout + before.stderr).strip()
    named = before.returncode != 0 and names in said and "Traceback" not in said
    repair = _lab("store", "repair", "--store", str(store))
    repaired = (repair.stdout + repair.stderr).strip()
    if not mendable:  # repair cannot mend it: it must say so, naming the file, and change nothing
        loud = repair.returncode != 0 and what in repaired and "Traceback" not in repaired
        return Outcome("damage", name, f"check names {what}; repair refuses, naming it (never silent)",
                       f"check exit {before.returncode} ({'named' if named and what in said else 'NOT named: ' + said[-120:]}),"
                       f" repair exit {repair.returncode}: {repaired.splitlines()[-1][:160] if repaired else '(silent)'}",
                       named and what in said and loud)
    code, errors, warnings, crash = _check_json(store)
    search = _lab("search", "memory about topic", "--store", str(store), "--namespace", "d")
    ok = named and repair.returncode == 0 and code == 0 and not errors and not warnings and not crash \
        and search.returncode == 0 and bool(repaired)
    after = f"check exit {code}, {len(errors)} error(s), {len(warnings)} warning(s)" + \
        (": " + "; ".join((errors + warnings)[:2])[:160] if errors or warnings else "") + (f" {crash}" if crash else "")
    return Outcome("damage", name, "check names it; repair says what it did; check: no error, no warning",
                   f"check exit {before.returncode} ({'named' if named else 'NOT named: ' + said[-120:]}), "
                   f"repair exit {repair.returncode}{'' if repaired else ' (silent)'}, {after}, search exit {search.returncode}"
                   + ("" if repair.returncode == 0 else f"; repair: {repaired[-160:]}"), ok)


def _corrupt_data(table: str):
    def damage(store: Path) -> str | None:
        files = sorted((store / "tables" / table).glob("*.parquet"))
        if not files:
            return None
        files[-1].write_bytes(b"PAR1 not a parquet file" * 10)
        return files[-1].name
    return damage


def _tear_log(table: str, how: str = "half", which: int = -1):
    """Damage one commit file of ``table``'s log (``which``: -1 the newest, -2 the one before)."""
    def damage(store: Path) -> str | None:
        logs = sorted((store / "tables" / table / "_delta_log").glob("[0-9]*.json"))
        if len(logs) < -which:
            return None
        log = logs[which]
        data = log.read_bytes()
        if how == "half":
            log.write_bytes(data[: max(1, len(data) // 2)])
        elif how == "empty":
            log.write_bytes(b"")
        elif how == "last line dropped":
            lines = data.rstrip(b"\n").split(b"\n")
            log.write_bytes(b"\n".join(lines[:-1])[:-5] + b"\n" if len(lines) > 1 else data[: len(data) // 2])
        else:
            log.write_bytes(bytes(range(256)) + b"\xff" * 44)
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
    """Every table and index file (short: the memories table's log and the vector index only)."""
    base = template(tmp)
    out = []
    for table in TABLES[:1] if short else TABLES:
        if not short:
            out.append(_case(tmp, base, f"data file of {table} corrupted", _corrupt_data(table), "table " + table))
        out.append(_case(tmp, base, f"newest log file of {table} torn in half", _tear_log(table), "torn"))
    for how in () if short else ("empty", "last line dropped", "garbage"):
        out.append(_case(tmp, base, f"newest log file of memories {how}", _tear_log("memories", how), "torn"))
    out.append(_case(tmp, base, "a log file of memories with a later commit, torn", _tear_log("memories", "half", -2),
                     "torn", mendable=False))
    if not short:
        out.append(_case(tmp, base, "a log file of chunks with a later commit, emptied",
                         _tear_log("chunks", "empty", -2), "torn", mendable=False))
    index_files = sorted({p.name for p in next((base / "indexes").iterdir()).rglob("*") if p.is_file()})
    for file in ["vectors.hnsw"] if short else index_files:
        out.append(_case(tmp, base, f"index file {file} corrupted", _corrupt_index(file), "index d"))
    return out
