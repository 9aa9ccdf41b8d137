"""The one definition of an exported bundle: the folder `lab gate --export` writes and `lab serve`,
the MLflow pyfunc model and the tests read.

A bundle folder holds ``config.json`` (the search configuration), ``assemble.json`` (context
assembly), ``save.json`` when the candidate had its own index-time settings, and
``manifest.json``: the gate verdict, the candidate, the store judged (path and pinned version),
the metrics and checks, and ``format`` (this module's ``BUNDLE_FORMAT``). Only a GO bundle is
served (``require_go``).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import AssembleConfig, SaveConfig, SearchConfig, from_dict, to_json
from lab.errors import ConflictError, NotFoundError, ValidationError

BUNDLE_FORMAT = 1  # manifest.json's "format"; a bundle without one was written before it existed (1)
CONFIG, ASSEMBLE, SAVE, MANIFEST = "config.json", "assemble.json", "save.json", "manifest.json"


@dataclass(frozen=True)
class Bundle:
    """A bundle as read: the gated configuration and its manifest."""

    search: SearchConfig
    assemble: AssembleConfig
    save: SaveConfig | None  # the candidate's own index-time settings, when it had them
    manifest: dict[str, Any]
    folder: Path

    @property
    def verdict(self) -> str | None:
        return self.manifest.get("verdict")

    @property
    def store(self) -> dict[str, Any]:
        """The store the gate judged: ``{"path", "version"}`` (empty for a hand-made bundle)."""
        return self.manifest.get("store") or {}


def write_bundle(folder: str | Path, search: SearchConfig, assemble: AssembleConfig, save: SaveConfig | None,
                 manifest: dict[str, Any]) -> Path:
    """Write a bundle folder; the manifest is stamped with ``BUNDLE_FORMAT``. Returns the folder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / CONFIG).write_text(to_json(search) + "\n", encoding="utf-8")
    (folder / ASSEMBLE).write_text(to_json(assemble) + "\n", encoding="utf-8")
    if save is not None:
        (folder / SAVE).write_text(to_json(save) + "\n", encoding="utf-8")
    elif (folder / SAVE).exists():
        (folder / SAVE).unlink()  # a bundle rewritten in place keeps no stale index settings
    stamped = {"format": BUNDLE_FORMAT, **manifest}
    (folder / MANIFEST).write_text(json.dumps(stamped, indent=2, default=str) + "\n", encoding="utf-8")
    return folder


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValidationError(f"bundle file {path} cannot be read: {exc}") from None


def read_bundle(folder: str | Path) -> Bundle:
    """The bundle at ``folder``, every file checked (configs validated like any config file)."""
    folder = Path(folder)
    if not (folder / MANIFEST).is_file():
        raise NotFoundError(f"no bundle at {folder}: {MANIFEST} is missing (bundles are written by "
                            "`lab gate --export`)")
    manifest = _read_json(folder / MANIFEST)
    if not isinstance(manifest, dict):
        raise ValidationError(f"bundle file {folder / MANIFEST} is not a JSON object")
    fmt = manifest.get("format", 1)
    if fmt != BUNDLE_FORMAT:
        raise ValidationError(f"bundle {folder} has format {fmt!r}; this lab reads format {BUNDLE_FORMAT}")
    for name in (CONFIG, ASSEMBLE):
        if not (folder / name).is_file():
            raise NotFoundError(f"bundle {folder} lacks {name}")
    search = from_dict(SearchConfig, _read_json(folder / CONFIG), where=f"{folder / CONFIG}: ")
    assemble = from_dict(AssembleConfig, _read_json(folder / ASSEMBLE), where=f"{folder / ASSEMBLE}: ")
    save = None
    if (folder / SAVE).is_file():
        save = from_dict(SaveConfig, _read_json(folder / SAVE), where=f"{folder / SAVE}: ")
    return Bundle(search, assemble, save, manifest, folder)


def require_go(bundle: Bundle, what: str) -> Bundle:
    """``bundle`` when its gate verdict is GO; ConflictError naming ``what`` and the verdict otherwise."""
    if bundle.verdict != "GO":
        raise ConflictError(f"refusing to serve {what}: its gate verdict is {bundle.verdict!r}, not GO "
                            f"(gate run {bundle.manifest.get('run_id')}; see its gate.md)")
    return bundle
