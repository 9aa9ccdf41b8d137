"""Where a store lives: a folder on this machine, or a URI on object storage.

A store root given as a URI (``s3://bucket/prefix``, ``gs://``, ``abfs://``, ``file:///path``) keeps
its Delta tables, its info file and its index snapshots at that URI. The tables go through
deltalake with ``storage_options`` (the workspace's, handed down in lab.store.settings; else none: deltalake and pyarrow read the
provider's own environment variables, ``AWS_ACCESS_KEY_ID``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``,
``GOOGLE_APPLICATION_CREDENTIALS``...). lab's own files go through pyarrow's filesystem for the
scheme. What is process state and never data stays on this machine, in the store's *working
folder* under the workspace's ``store_cache``: the writers' lock, the embedding cache, and local
copies of the index snapshots (fetched from the URI when it holds a newer one, uploaded after
each save).

Object stores replace a file in one request, so there is no torn file to repair; they have no OS
lock either, so the lock guards the writers of one machine only: a store at a URI takes one
writing process at a time (readers anywhere). A ``file://`` URI goes through exactly this path on
a local disk, which is how it is tested where no object store is reachable.
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from lab.errors import StoreError, ValidationError
from lab.store.reach import reaching, safe_uri, scrub
from lab.store.settings import StoreSettings, settings_or_default

log = logging.getLogger(__name__)

# schemes deltalake opens (pyarrow's filesystem must open them too, for the info file and snapshots)
SCHEMES = ("file", "s3", "s3a", "gs", "gcs", "abfs", "abfss", "az")


def is_uri(root: str | Path) -> bool:
    """Is ``root`` a URI (``scheme://...``) rather than a folder path?"""
    return isinstance(root, str) and "://" in root


def display(root: str | Path) -> str:
    """The root as users wrote it: a URI as it is, a folder as its path."""
    return root if is_uri(root) else str(root)


@dataclass(frozen=True)
class Location:
    """A store at a URI: the URI (no trailing slash), the deltalake storage options, and the
    local working folder of this machine."""

    uri: str
    folder: Path
    options: dict[str, str] = field(default_factory=dict, repr=False)  # may hold keys: never shown

    def table(self, name: str) -> str:
        return f"{self.uri}/tables/{name}"

    def _fs(self):
        from pyarrow import fs as pafs

        try:
            with reaching(self.uri, "opening its filesystem"):
                filesystem, base = pafs.FileSystem.from_uri(self.uri)
        except StoreError:
            raise
        except Exception as exc:  # pyarrow raises ArrowInvalid / OSError for a scheme it cannot open
            raise StoreError(f"store {self.shown}: cannot open its filesystem ({scrub(str(exc))[:200]}); lab opens "
                             f"{', '.join(s + '://' for s in SCHEMES)}") from None
        return filesystem, base.rstrip("/")

    @property
    def shown(self) -> str:
        """The URI as messages show it (never credentials)."""
        return safe_uri(self.uri)

    def exists(self, rel: str) -> bool:
        from pyarrow import fs as pafs

        filesystem, base = self._fs()
        with reaching(self.uri, f"looking for {rel}"):
            return filesystem.get_file_info(f"{base}/{rel}").type != pafs.FileType.NotFound

    def read_text(self, rel: str) -> str | None:
        """The text of the file at ``rel`` under the URI (None: there is none)."""
        filesystem, base = self._fs()
        try:
            with reaching(self.uri, f"reading {rel}"), filesystem.open_input_stream(f"{base}/{rel}") as fh:
                return fh.read().decode("utf-8")
        except FileNotFoundError:
            return None

    def write_text(self, rel: str, text: str) -> None:
        """One object written in one request (an object store replaces it whole, never half)."""
        filesystem, base = self._fs()
        path = f"{base}/{rel}"
        with reaching(self.uri, f"writing {rel}"):
            filesystem.create_dir(path.rsplit("/", 1)[0], recursive=True)
            with filesystem.open_output_stream(path) as fh:
                fh.write(text.encode("utf-8"))

    def is_empty(self) -> bool:
        from pyarrow import fs as pafs

        filesystem, base = self._fs()
        with reaching(self.uri, "listing it"):
            info = filesystem.get_file_info(base)
            if info.type == pafs.FileType.NotFound:
                return True
            return not filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True))

    def delete_dir(self, rel: str) -> None:
        filesystem, base = self._fs()
        try:
            with reaching(self.uri, f"deleting {rel}"):
                filesystem.delete_dir(f"{base}/{rel}")
        except FileNotFoundError:
            pass

    def upload(self, local: Path, rel: str) -> None:
        """Copy the folder ``local`` to ``rel``: every file but the manifest first, the manifest
        last (a reader fetches a snapshot by its manifest, so it never sees half of one)."""
        filesystem, base = self._fs()
        files = sorted(p for p in local.rglob("*") if p.is_file())
        self.delete_dir(rel)
        with reaching(self.uri, f"uploading {rel}"):
            for path in sorted(files, key=lambda p: p.name == "manifest.json" and p.parent == local):
                target = f"{base}/{rel}/{path.relative_to(local).as_posix()}"
                filesystem.create_dir(target.rsplit("/", 1)[0], recursive=True)
                with open(path, "rb") as src, filesystem.open_output_stream(target) as dst:
                    while block := src.read(1 << 22):
                        dst.write(block)

    def fetch(self, rel: str, local: Path, *, again: bool = False) -> bool:
        """Make ``local`` the copy of the folder at ``rel`` when that one's manifest differs from
        the local copy's, or ``again`` (downloaded aside, then swapped in); False: there is none at
        the URI. Only keys that name a file inside ``rel`` are copied, each inside ``local``: a key
        with an empty, ``.`` or ``..`` segment (``//``, ``/../``), an absolute one or a backslash
        is skipped and named in one log line (whoever can write the bucket cannot write outside the
        working folder, nor stop a reader; the snapshot's verification judges what is left)."""
        import shutil

        from pyarrow import fs as pafs

        remote = self.read_text(f"{rel}/manifest.json")
        if remote is None:
            return False
        here = local / "manifest.json"
        if not again and here.is_file() and here.read_text(encoding="utf-8") == remote:
            return True
        filesystem, base = self._fs()
        prefix = f"{base}/{rel}/"
        tmp = local.with_name(f".{local.name}.fetch")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        skipped = []
        with reaching(self.uri, f"fetching {rel}"):
            listed = filesystem.get_file_info(pafs.FileSelector(prefix.rstrip("/"), recursive=True))
            for info in listed:
                if info.type != pafs.FileType.File:
                    continue
                target = inside(tmp, info.path[len(prefix):] if info.path.startswith(prefix) else None)
                if target is None:
                    skipped.append(info.path)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with filesystem.open_input_stream(info.path) as src, open(target, "wb") as dst:
                    while block := src.read(1 << 22):
                        dst.write(block)
        if skipped:
            log.warning("store %s: %d object(s) under %s skipped, their keys would leave the snapshot folder: %s",
                        self.shown, len(skipped), rel, ", ".join(repr(k) for k in skipped[:3]))
        shutil.rmtree(local, ignore_errors=True)
        local.parent.mkdir(parents=True, exist_ok=True)
        tmp.replace(local)
        return True


def inside(folder: Path, name: str | None) -> Path | None:
    """``folder / name`` when ``name`` is a plain relative path that stays inside ``folder``; None
    for anything else (empty, absolute, a ``.``/``..``/empty segment, a backslash or NUL)."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return None
    parts = name.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    target = folder.joinpath(*parts)
    root = folder.resolve()
    resolved = target.resolve()
    if resolved == root or root not in resolved.parents:  # (a symlink inside would lead out)
        return None
    return target


def locate(root: str, cache: Path, options: dict[str, str] | None = None) -> Location:
    """The location of a store at the URI ``root``, its working folder under ``cache``."""
    scheme = root.split("://", 1)[0].lower()
    if scheme not in SCHEMES:
        raise ValidationError(f"store {safe_uri(root)}: unknown scheme {scheme + '://'!r}; a store is a folder or a "
                              f"URI of {', '.join(s + '://' for s in SCHEMES)}", field="store")
    try:
        parts = urlsplit(root)
    except ValueError as exc:
        raise ValidationError(f"store {safe_uri(root)}: not a URI ({exc})", field="store") from None
    if "@" in parts.netloc or parts.query:
        # a key in the URI would be shown wherever the store is named, and named its working folder
        raise ValidationError(f"store {safe_uri(root)}: credentials or a query in a store URI are refused; give "
                              "them in the provider's environment variables (AWS_ACCESS_KEY_ID, ...) or "
                              "$LAB_STORAGE_OPTIONS", field="store")
    uri = root.rstrip("/")
    name = uri.split("://", 1)[1].strip("/").replace("/", "-")[-40:] or "root"
    folder = cache / f"{scheme}-{name}-{hashlib.sha256(uri.encode()).hexdigest()[:12]}"
    return Location(uri, folder, dict(options or {}))


def location_of(root: str, settings: StoreSettings | None = None) -> Location:
    """The location of the store at the URI ``root``, by ``settings``' working folders and storage
    options (None: the built-in defaults)."""
    settings = settings_or_default(settings)
    return locate(root, settings.store_cache, settings.storage_options)
