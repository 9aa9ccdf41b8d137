"""What the server serves: a gated configuration, from an exported bundle or the model registry.

Only a configuration whose gate verdict is GO is served. The bundle (written by ``lab gate`` on
export) carries the search, assembly and, when the candidate had its own, index-time settings; the
registry's model version points at its bundle and carries the verdict as a tag.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lab import track
from lab.bundle import Bundle, read_bundle, require_go
from lab.config import AssembleConfig, SaveConfig, SearchConfig
from lab.embed.registry import require_recorded
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.serve.settings import DEMO_MODEL
from lab.store.location import is_uri
from lab.store.layout import WRITE_LOCK, is_store
from lab.store.settings import StoreSettings
from lab.store.store import Store

if TYPE_CHECKING:
    from lab.track.connect import Where

MODEL_URI = re.compile(r"^models:/(?P<name>[^/@]+)(?:@(?P<alias>[^/@]+)|/(?P<version>\d+))$")


@dataclass(frozen=True)
class Served:
    """The gated configuration: search, assembly and (when the bundle has one) index-time settings."""
    search: SearchConfig
    assemble: AssembleConfig
    save: SaveConfig | None
    manifest: dict[str, Any]
    source: str  # where it came from: "models:/NAME@ALIAS (version N)" or the bundle folder
    folder: Path | None = None  # the bundle folder read (the packed store sits inside it)
    query_model: str | None = None  # the model the gate judged encoding the queries (a packed adapter), if its own

    def describe(self) -> dict[str, Any]:
        m = self.manifest
        return {"source": self.source, "candidate": m.get("candidate"), "verdict": m.get("verdict"),
                "config": self.search.name, "gate_run": m.get("run_id"), "exported_at": m.get("exported_at")}


def load_bundle(folder: str | Path, source: str | None = None) -> Served:
    """The bundle at ``folder`` (``lab.bundle``); refused unless its manifest's verdict is GO."""
    bundle = require_go(read_bundle(folder), str(folder))
    name = bundle_name(folder)
    # its embedding models load here, from the files it was gated with (a bundle written before
    # bundles recorded them names none)
    require_recorded(bundle.manifest.get("embedding_models") or [], f"bundle {name}", bundle.packed_models)
    return Served(bundle.search, bundle.assemble, bundle.save, bundle.manifest, source or f"bundle {name}",
                  Path(folder), bundle.query_model)


def bundle_name(folder: str | Path) -> str:
    """A bundle named by its folder's name, not its path (/ready shows the source and must not
    reveal paths); `lab gate --export` writes runs/gate/GATE-RUN/bundle, so a folder named
    ``bundle`` is named by its parent, the gate run it came from."""
    path = Path(folder).resolve()
    return path.parent.name if path.name == "bundle" and path.parent.name else path.name


def load_model(model_uri: str, tracking_uri: Where = None) -> Served:
    """The registered model version ``model_uri`` names (models:/NAME@ALIAS or models:/NAME/VERSION)."""
    match = MODEL_URI.match(model_uri)
    if not match:
        raise ValidationError(f"model {model_uri!r}: expected models:/NAME@ALIAS or models:/NAME/VERSION")
    found = track.model_version(match["name"], alias=match["alias"], version=match["version"], uri=tracking_uri)
    if found is None:
        how = ("`lab demo` registers it on GO" if model_uri == DEMO_MODEL else
               "a GO from `lab gate --export` registers one; or serve a folder with --bundle; or, after "
               "`lab demo`, serve the demo's champion with `lab serve --demo`")
        raise NotFoundError(f"no registered model version {model_uri} in {track.shown_uri(track.tracking_uri(tracking_uri))} ({how})")
    if found.get("verdict") != "GO":
        raise ConflictError(f"refusing to serve {model_uri} (version {found['version']}): its gate verdict is "
                            f"{found.get('verdict')!r}, not GO")
    # the bundle the model version carries (its artifact): what the pyfunc model serves too, even
    # when the folder it was exported from has been rewritten by a later export
    folder = track.model_bundle(found, tracking_uri)
    if folder is None:
        raise NotFoundError(f"{model_uri} (version {found['version']}) carries no bundle artifact")
    return load_bundle(folder, source=f"{model_uri} (version {found['version']})")


def seed_store(served: Served, store: str | Path, stores: StoreSettings | None = None) -> str | None:
    """Make ``store`` a copy of the store the served configuration was judged on (its packed copy
    or recorded path) when ``store`` does not exist yet; returns what was copied, None when the store
    was already there."""
    import shutil

    if is_store(store, stores):
        return None
    if is_uri(store):  # the packed copy is a folder: a store at a URI is seeded by `lab ingest`
        raise ValidationError(f"--demo seeds a store folder, not the URI {store}: serve a folder, or fill the "
                              "store with `lab ingest`")
    store = Path(store)
    if served.folder is None:
        raise NotFoundError("the served configuration names no bundle folder to seed a store from")
    bundle = Bundle(served.search, served.assemble, served.save, served.manifest, served.folder)
    source = bundle.store_path()
    if store.exists() and any(store.iterdir()):
        raise ConflictError(f"{store} exists and is not a lab store: cannot seed it with the demo data")
    store.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, store, dirs_exist_ok=True, ignore=shutil.ignore_patterns(WRITE_LOCK))
    return f"seeded from the store the champion was judged on (version {bundle.store.get('version')})"


def served_save_config(served: Served, stores: StoreSettings | None = None) -> SaveConfig | None:
    """The index-time settings the gate judged: the bundle's own, else those of the store it was
    evaluated on (when that store is still there), else None (the served store's own)."""
    if served.save is not None:
        return served.save

    path = (served.manifest.get("store") or {}).get("path")
    if path and is_store(path, stores):
        return Store.open(path, read_only=True, settings=stores).recorded_config()
    return None
