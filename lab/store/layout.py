"""What makes a folder a lab store: its info file (the marker, named here once), lock, versions."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import SaveConfig, from_dict
from lab.errors import ConflictError, NotFoundError, StoreError, ValidationError
from lab.store.location import Location, is_uri, location_of
from lab.store.settings import StoreSettings

STORE_FORMAT = 1
INFO_FILE = "lab-store.json"  # the store's marker: a folder is a store once this file is in it
WRITE_LOCK = ".lab-write.lock"  # the writers' OS file lock: process state, never data
PINNED_TABLES = ("memories", "chunks", "edges", "access_log")  # a StoreVersion's tables, in its order


def info_path(root: str | Path) -> Path:
    """The info file of the store at ``root`` (whether or not it exists)."""
    return Path(root) / INFO_FILE


def is_store(root: str | Path, settings: StoreSettings | None = None) -> bool:
    """Does ``root`` (a folder, or a URI: lab.store.location, reached with ``settings``) hold a lab store (its info file)?"""
    if is_uri(root):
        return location_of(str(root), settings).exists(INFO_FILE)
    return info_path(root).is_file()


@dataclass(frozen=True)
class StoreVersion:
    """The versions of the store's tables; a memories commit names the chunks version it saw."""

    memories: int
    chunks: int
    edges: int
    access: int

    def __str__(self) -> str:
        return f"{self.memories}.{self.chunks}.{self.edges}.{self.access}"

    @classmethod
    def parse(cls, text: str) -> "StoreVersion":
        parts = str(text).split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            raise ValidationError(
                f"store version {text!r} must look like M.C.E.A (four integers, as `lab stats` prints)"
            )
        return cls(*(int(p) for p in parts))


@dataclass(frozen=True)
class StoreInfo:
    """What a store was created with; an embedder that does not match is refused on open."""

    format: int
    created_at: str
    lab_version: str
    embed_model: str
    dim: int
    save_config: dict[str, Any]
    # the vectors' space where the model declares one of its own id (a server model's file: its
    # vectors are of a known model's space); None: the model id's own (lab.embed.registry.space_of)
    embed_space: str | None = None

    @classmethod
    def read(cls, root: Path) -> "StoreInfo":
        """The info of the store at ``root``: NotFoundError where there is none, StoreError where it
        cannot be read or is of another format."""
        path = info_path(root)
        if not path.is_file():
            raise NotFoundError(f"no lab store at {root} (create one with `lab init --store {root}`)")
        return cls.parse(path.read_text(encoding="utf-8"), str(path))

    @classmethod
    def read_at(cls, location: Location) -> "StoreInfo":
        """The info of the store at a URI (``read``'s errors)."""
        text = location.read_text(INFO_FILE)
        if text is None:
            raise NotFoundError(f"no lab store at {location.uri} (create one with `lab init --store {location.uri}`)")
        return cls.parse(text, f"{location.uri}/{INFO_FILE}")

    @classmethod
    def parse(cls, text: str, where: str) -> "StoreInfo":
        try:
            info = cls(**json.loads(text))
        except (ValueError, TypeError) as exc:
            raise StoreError(f"{where} is unreadable: {exc}") from exc
        if info.format != STORE_FORMAT:
            raise StoreError(f"store format {info.format} is not supported (expected {STORE_FORMAT})")
        return info

    def text(self) -> str:
        # a store without a declared space is written as before: a lab that predates the field reads it
        fields = {k: v for k, v in self.__dict__.items() if k != "embed_space" or v is not None}
        return json.dumps(fields, indent=2, sort_keys=True)


    def write_aside(self, root: Path) -> Path:
        """Write to the info file's temporary copy; ``Path.replace`` it onto ``info_path(root)``."""
        tmp = root / (INFO_FILE + ".tmp")
        tmp.write_text(self.text(), encoding="utf-8")
        return tmp

    def put(self, root: Path, location: Location | None = None) -> "StoreInfo":
        """Replace the store's info file with this one (at its URI in one request, or in its folder
        written aside and swapped in); returns it."""
        if location is not None:
            location.write_text(INFO_FILE, self.text())
        else:
            self.write_aside(root).replace(info_path(root))
        return self

    def with_index(self, index: dict[str, Any]) -> "StoreInfo":
        """This info with other index parameters in its save config."""
        return StoreInfo(**{**self.__dict__, "save_config": {**self.save_config, "index": index}})

    def saved_config(self, root: Path) -> SaveConfig:
        """The save configuration the store at ``root`` was created with (chunking, embedding, indexes)."""
        recorded = dict(self.save_config)
        # stores made before context_turns existed were indexed without context: keep them so
        # and so were they without extra index views
        recorded["chunk"] = {"context_turns": 0, "views": [], **recorded.get("chunk", {})}
        return from_dict(SaveConfig, recorded, where=f"{info_path(root)} save_config")


def prepare_folder(root: Path, info: StoreInfo) -> Path:
    """Make ``root`` ready for a new store and write its info aside (``StoreInfo.write_aside``): the
    store exists once its tables are made and that file is moved in place. A folder holding a store,
    or anything else than what a killed creation leaves (then started over), is refused."""
    if info_path(root).exists():
        raise ConflictError(f"a store exists already at {root}")
    if _interrupted_create(root):
        # the info file is written last: its temporary copy without it is a create that was
        # killed half-way, which holds nothing anyone saved; start it over
        import logging

        logging.getLogger(__name__).warning("%s holds an interrupted store creation; starting it over", root)
        for child in root.iterdir():
            shutil.rmtree(child) if child.is_dir() else child.unlink()
    if root.exists() and any(root.iterdir()):
        raise ConflictError(f"{root} is not empty and holds no lab store; choose an empty folder")
    root.mkdir(parents=True, exist_ok=True)
    return info.write_aside(root)


def _interrupted_create(root: Path) -> bool:
    """A folder left by a killed ``Store.create``: the info file's temporary copy, perhaps the
    empty tables it was making, and nothing else."""
    if not (root / (INFO_FILE + ".tmp")).is_file() or (root / INFO_FILE).exists():
        return False
    if not {p.name for p in root.iterdir()} <= {INFO_FILE + ".tmp", "tables", "indexes", "cache", WRITE_LOCK}:
        return False
    # and its tables, if any, hold only their creating commit: no data to lose
    for log_dir in (root / "tables").glob("*/_delta_log"):
        if any(p.name != "00000000000000000000.json" for p in log_dir.glob("*.json")):
            return False
    return True
