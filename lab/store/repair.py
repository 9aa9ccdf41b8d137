"""A store's torn Delta commits, across its tables: naming each one (``lab store check``) and taking a
torn newest commit out (``lab store repair``), both before the store can be opened."""
from __future__ import annotations

from pathlib import Path

from lab.errors import ConflictError, NotFoundError, StoreError
from lab.store.delta_log import LogDamage, commit_files, log_damage, recover_torn_commit
from lab.store.location import is_uri
from lab.store.layout import PINNED_TABLES, WRITE_LOCK, StoreVersion, is_store
from lab.store.settings import StoreSettings


def log_damages(root: str | Path) -> list[tuple[LogDamage, str]]:
    """Each table whose latest version cannot be read for a torn commit file, with one line saying
    what is wrong and what to do: repair (a torn newest commit), or restore from a backup, the
    store still opening pinned at the versions before the tear when the table is one a pin fixes."""
    if is_uri(root):
        return []  # on object storage a commit file is written whole in one request: none is ever torn
    root = Path(root)
    tables = {p.name: p for p in sorted((root / "tables").glob("*")) if p.is_dir()}
    found = {name: damage for name, path in tables.items() if (damage := log_damage(path)) is not None}
    out = []
    for name, damage in found.items():
        opener = None
        if all(t in tables for t in PINNED_TABLES) and set(found) <= set(PINNED_TABLES):
            # every damaged table at the version before its tear, the others at their newest
            versions = [found[t].version - 1 if t in found else _newest_version(tables[t]) for t in PINNED_TABLES]
            if min(versions) >= 0:
                opener = f"lab.open_retriever({str(root)!r}, pin={str(StoreVersion(*versions))!r})"
        out.append((damage, damage.describe(opener)))
    return out


def _newest_version(table: Path) -> int:
    commits = commit_files(table)
    return int(commits[-1].name.split(".")[0]) if commits else -1


def recover_torn_commits(root: str | Path, timeout: float = 600.0, *, settings: StoreSettings | None = None) -> list[str]:
    """Take a torn newest commit file out of each table's log (``lab store repair``, before the
    store can be opened at all); returns ``table/file`` for each one moved aside. That commit's
    changes are lost: a file cut off while written was never acknowledged, but one damaged on disk
    afterwards looks the same and may have been, so nothing here claims either.

    A torn commit that later ones build on is refused (a StoreError naming the file and what to do),
    before anything is moved: dropping it would lose acknowledged commits."""
    from filelock import FileLock, Timeout

    if not is_store(root, settings):
        raise NotFoundError(f"no lab store at {root} (create one with `lab init --store {root}`)")
    if is_uri(root):
        return []  # (see log_damages)
    root = Path(root)
    try:
        with FileLock(str(root / WRITE_LOCK), timeout=timeout):
            for damage, said in log_damages(root):
                if not damage.repairable:
                    raise StoreError(f"table {damage.table}: {said}")
            moved = []
            for table in sorted(p for p in (root / "tables").glob("*") if p.is_dir()):
                name = recover_torn_commit(table)
                if name is not None:
                    moved.append(f"{table.name}/{name}")
            return moved
    except Timeout:
        raise ConflictError(f"store {root} is busy: another writer held its lock for over {timeout:g} s") from None
