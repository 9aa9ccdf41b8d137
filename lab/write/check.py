"""`lab store check` and `lab store repair`: verify every table and index of a store, and mend what
the Delta log and the store allow.

Check reports, per table, a torn Delta log file (the newest: repair takes it out; an older one,
which later commits build on: only a backup mends it, and repair refuses, naming it) and data
files of the latest version that are missing or unreadable; per namespace, an index snapshot
that fails verification (namespace, file digests, counts); contents
stored twice in a namespace and duplicate chunk ids; index folders of namespaces that no longer
exist and temporary folders left by a killed save. Problems are errors (the store cannot be read
as it is) or warnings (it can, but something is left over).

Repair takes each missing or unreadable data file out of its table (a Delta FSCK commit: only the
rows of that file are lost, every later commit stays; an unreadable file is kept as NAME.damaged),
chunks again the memories whose chunks were lost, rebuilds every index from the store and saves
it, and removes leftover folders. Duplicated contents are reported, never deleted: which copy is wanted is the
user's call.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from lab.index.snapshot import IndexDamaged, verify
from lab.store.records import namespace_folder
from lab.store.repair import log_damages
from lab.store.settings import StoreSettings
from lab.store.store import Store


@dataclass
class Problem:
    severity: str  # error | warning
    where: str  # "table memories", "index atlas", "store"
    what: str

    def __str__(self) -> str:
        return f"{self.severity:<7} {self.where}: {self.what}"


@dataclass
class CheckReport:
    problems: list[Problem] = field(default_factory=list)
    checked: dict[str, Any] = field(default_factory=dict)

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.errors, "problems": [p.__dict__ for p in self.problems], "checked": self.checked}


def check_store(root: str | Path, settings: StoreSettings | None = None) -> CheckReport:
    """Verify every table and index of the store at ``root`` (read-only: writes nothing), opened with
    ``settings`` (lab.store.settings; None: the built-in defaults)."""
    report = CheckReport()
    damaged = log_damages(root)  # a torn commit file stops the store from opening: name each one
    for damage, said in damaged:
        report.problems.append(Problem("error", f"table {damage.table}", said))
    if damaged:
        return report
    store = Store.open(root, read_only=True, settings=settings)
    table_ok = True
    for name, table in store.tables().items():
        try:
            damaged = table.damaged_files()
            report.checked[f"table {name}"] = f"version {table.version}, {table.n_files()} files"
        except Exception as exc:  # the log itself is unreadable
            report.problems.append(Problem("error", f"table {name}", f"Delta log unreadable: {exc}"))
            table_ok = False
            continue
        for file, problem in damaged:
            report.problems.append(Problem("error", f"table {name}", f"data file {file} is {problem}"))
            table_ok = False
    if not table_ok:
        return report  # the rest reads these tables
    memories = store.memories()
    twice = memories.filter(pl.struct("namespace", "content_hash").is_duplicated())
    for (ns, digest), rows in twice.group_by("namespace", "content_hash", maintain_order=True):
        report.problems.append(Problem("error", f"namespace {ns}", f"the same content is stored as {sorted(rows['id'].to_list())}"))
    chunks = store.chunks(embeddings=False)
    dup_chunks = chunks.filter(pl.col("chunk_id").is_duplicated())["chunk_id"].unique().sort().to_list()
    if dup_chunks:
        report.problems.append(Problem("error", "table chunks", f"{len(dup_chunks)} duplicate chunk ids, e.g. {dup_chunks[0]}"))
    unlisted = sorted(set(memories["namespace"].unique().to_list()) - set(store.namespaces()))
    if unlisted:
        report.problems.append(Problem("error", "table namespaces", f"namespace(s) {unlisted[:5]} hold memories but are "
                                       "not listed (their rows were lost); repair lists them again"))
    stale, twice = store.chunks_table.orphans()
    if stale or twice:
        # an update deletes the rows it replaced in its own last commit, so rows no memory shows are
        # what a cut-off write left: a save killed before its memories commit, or an update or hard
        # delete killed after it
        report.problems.append(Problem("warning", "table chunks", f"{len(stale) + len(twice)} orphan chunk row(s) "
                                       "(left by a save, update or delete cut off between its commits; "
                                       "compact or repair removes them)"))
    namespaces = store.namespaces()
    index_root = store.root / "indexes"
    for ns in namespaces:
        directory = index_root / namespace_folder(ns)
        if not directory.exists():
            report.checked[f"index {ns}"] = "none saved (built on first search)"
            continue
        try:
            manifest = verify(directory, ns)
        except IndexDamaged as exc:
            report.problems.append(Problem("error", f"index {ns}", f"{exc} (repair rebuilds it)"))
            continue
        report.checked[f"index {ns}"] = f"{manifest.get('n_live')} live chunks at store version {manifest.get('store_version')}"
    if index_root.is_dir():
        for child in sorted(index_root.iterdir()):
            if child.name.startswith("."):
                report.problems.append(Problem("warning", "indexes", f"{child.name} is left over from an interrupted save"))
            elif child.name not in {namespace_folder(ns) for ns in namespaces}:
                report.problems.append(Problem("warning", "indexes", f"{child.name} is the index of no namespace"))
    return report


def repair_tables(store: Store) -> dict[str, Any]:
    """Restore every damaged table to its newest readable version and remove leftover index
    folders; the caller holds the writer lock (``Writer.repair``), then rebuilds the indexes."""
    done: dict[str, Any] = {"files_dropped": {}, "removed": []}
    for name, table in store.tables().items():
        dropped = table.drop_damaged_files()
        if dropped:
            done["files_dropped"][name] = {"files": dropped, "version": table.version}
    listed = set(store.namespaces())
    done["namespaces_relisted"] = sorted(set(store.memories()["namespace"].unique().to_list()) - listed)
    for ns in done["namespaces_relisted"]:  # their rows were in a dropped file or a torn commit
        store.namespaces_table.create(ns, exist_ok=True)
    done.update(store.chunks_table.remove_orphans())
    index_root = store.root / "indexes"
    if index_root.is_dir():
        present = {namespace_folder(ns) for ns in store.namespaces()}
        for child in sorted(index_root.iterdir()):
            if child.name.startswith(".") or child.name not in present:
                shutil.rmtree(child, ignore_errors=True) if child.is_dir() else child.unlink()
                done["removed"].append(child.name)
    return done
