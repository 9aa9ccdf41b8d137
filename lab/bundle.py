"""The one definition of an exported bundle: the folder `lab gate --export` writes and `lab serve`,
the MLflow pyfunc model and the tests read.

A bundle folder holds ``config.json`` (the search configuration), ``assemble.json`` (context
assembly), ``save.json`` when the candidate had its own index-time settings, and
``manifest.json``: the gate verdict, the candidate, the store judged (its URI and pinned version),
the metrics and checks, and ``format`` (this module's ``BUNDLE_FORMAT``). Only a GO bundle is
served (``require_go``).

A store up to ``PACK_LIMIT_BYTES`` is packed into the bundle (``store/``, a copy of the judged
store), so the bundle, and the MLflow model that carries it, work on another machine or from another
folder; a larger one is referenced by its URI and refused by name where it is not reachable.
"""
from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.config import AssembleConfig, SaveConfig, SearchConfig, from_dict, to_json
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.store.layout import WRITE_LOCK, is_store

BUNDLE_FORMAT = 1  # manifest.json's "format"; a bundle without one was written before it existed (1)
CONFIG, ASSEMBLE, SAVE, MANIFEST = "config.json", "assemble.json", "save.json", "manifest.json"
PACKED_STORE = "store"  # the packed copy of the judged store, inside the bundle folder
PACKED_QUERY_MODEL = "query_model"  # the packed copy of the candidate's query model's files (a query adapter)
PACKED_MODELS = "models"  # packed copies of local model folders (a fine-tuned model: st:PATH), one per fingerprint
PACK_LIMIT_BYTES = 512 * 2**20  # stores up to this size travel inside the bundle
_NOT_PACKED = (WRITE_LOCK, "__pycache__")  # process state, not data


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
        """The store the gate judged: ``{"path", "uri", "version", "packed"}`` (empty for a hand-made bundle)."""
        return self.manifest.get("store") or {}

    @property
    def packed_models(self) -> dict[str, Path]:
        """Local embedding models (``st:``/``onnx:`` folders, e.g. a fine-tuned model) by recorded
        id -> the copy of their folder packed into the bundle."""
        return {model_id: self.folder / rel for model_id, rel in (self.manifest.get("packed_models") or {}).items()}

    @property
    def query_model(self) -> str | None:
        """The model encoding the gated candidate's queries, when it had its own (None: the store's
        model): its recorded id or, when its files were packed into the bundle (a query adapter),
        the same id pointing at the packed copy, fingerprint kept, so that it loads wherever the
        bundle is and only with the weights that were gated."""
        rec = self.manifest.get("query_model") or {}
        if not rec.get("id"):
            return None
        if not rec.get("packed"):
            return str(rec["id"])
        scheme, rest = str(rec["id"]).split(":", 1)
        fingerprint = rest.rsplit("#", 1)[1] if "#" in rest else None
        return f"{scheme}:{(self.folder / rec['packed']).resolve()}" + (f"#{fingerprint}" if fingerprint else "")

    def store_path(self) -> Path:
        """Where the judged store is read: the packed copy inside the bundle, else the recorded path
        (NotFoundError naming the URI and version where it is not there)."""
        rec = self.store
        if rec.get("packed") and is_store(self.folder / rec["packed"]):
            return self.folder / rec["packed"]
        if not rec.get("path"):
            raise NotFoundError(f"bundle {self.folder} records no store")
        path = Path(rec["path"])
        if not is_store(path):
            raise NotFoundError(
                f"the store this bundle was exported with is not reachable: {rec.get('uri') or path.as_uri()} "
                f"(pinned version {rec.get('version')}); it was larger than the "
                f"{PACK_LIMIT_BYTES // 2**20} MB packed into a bundle, so copy it to that path, or export "
                "again on this machine")
        return path


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


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def pack_store(folder: str | Path, store: str | Path, version: str, *,
               limit: int = PACK_LIMIT_BYTES) -> dict[str, Any]:
    """The manifest's ``store`` record for ``store`` at its pinned ``version``, with a copy of it
    packed into the bundle ``folder`` when it is at most ``limit`` bytes (its whole history comes
    along, so the pin still resolves)."""
    store = Path(store).resolve()
    record: dict[str, Any] = {"path": str(store), "uri": store.as_uri(), "version": version,
                              "bytes": folder_bytes(store)}
    target = Path(folder) / PACKED_STORE
    if target.exists():
        shutil.rmtree(target)  # a bundle rewritten in place packs its store anew
    if record["bytes"] <= limit:
        shutil.copytree(store, target, ignore=shutil.ignore_patterns(*_NOT_PACKED))
        record["packed"] = PACKED_STORE
    return record


def pack_models(folder: str | Path, local: dict[str, Path]) -> dict[str, str]:
    """Copies of ``local`` model folders (recorded id -> folder) packed into the bundle ``folder``
    under ``models/FINGERPRINT``; returns id -> the copy's path inside the bundle. The bundle, and
    the MLflow model that carries it, then load those models where the original folders are not."""
    target = Path(folder) / PACKED_MODELS
    if target.exists():
        shutil.rmtree(target)  # a bundle rewritten in place packs its models anew
    packed = {}
    for model_id, source in sorted(local.items()):
        rel = f"{PACKED_MODELS}/{model_id.rsplit('#', 1)[-1]}"
        shutil.copytree(source, Path(folder) / rel)
        packed[model_id] = rel
    return packed


def pack_query_model(folder: str | Path, model_id: str | None, files: Path | None) -> dict[str, Any] | None:
    """The manifest's ``query_model`` record (None: the store's model encodes the queries): the
    model's id and, when it has ``files`` of its own (a query adapter's folder), a copy of them
    packed into the bundle ``folder``, so the model travels with the bundle."""
    target = Path(folder) / PACKED_QUERY_MODEL
    if target.exists():
        shutil.rmtree(target)  # a bundle rewritten in place packs its query model anew
    if model_id is None:
        return None
    record: dict[str, Any] = {"id": model_id}
    if files is not None:
        shutil.copytree(files, target)
        record["packed"] = PACKED_QUERY_MODEL
    return record


def bundle_digest(search: SearchConfig, assemble: AssembleConfig, save: SaveConfig | None,
                  store: dict[str, Any], models: list[dict[str, Any]], query: dict[str, Any] | None = None) -> str:
    """What makes two exports the same model: the configurations, the store judged (where and at
    which version), the embedding models' files and the query model. Run ids and timestamps are
    not in it, so exporting the same thing twice registers it once."""
    parts = {"search": to_json(search), "assemble": to_json(assemble), "save": None if save is None else to_json(save),
             "store": [store.get("uri"), store.get("version")], "models": models}
    if query is not None:  # absent, the digest is what it was before bundles carried query models
        parts["query"] = query.get("id")
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


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
