"""The settings a store is opened with, handed down from an edge: where a store at a URI keeps its
working folder, its storage options, how long a writer waits for the lock, the shared embedding cache."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from lab.errors import ValidationError
from lab.workspace import Workspace


@dataclass(frozen=True)
class StoreSettings:
    """A workspace's store settings (``StoreSettings.of``); ``None`` where a store is opened means
    the built-in defaults, which are an uninstalled ``Workspace()``'s (``StoreSettings.default``)."""

    store_cache: Path
    storage_options: Mapping[str, str] = field(default_factory=dict)
    lock_timeout: float = 600.0
    embed_cache: Path | None = None
    open_namespaces: int = 1024  # the workspace's: views and indexes kept open (lab.index.open_namespaces)

    def __post_init__(self) -> None:
        cap = self.open_namespaces
        if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1:
            raise ValidationError(f"open_namespaces must be a whole number >= 1 (namespaces kept open), got {cap!r}",
                                  field="open_namespaces")

    @classmethod
    def of(cls, workspace: Workspace) -> "StoreSettings":
        return cls(workspace.store_cache, workspace.storage, workspace.write_lock_timeout, workspace.embed_cache,
                   workspace.open_namespaces)

    @classmethod
    def default(cls) -> "StoreSettings":
        # derived from the workspace's own defaults, so the two cannot drift apart
        return cls.of(Workspace())


def settings_or_default(settings: StoreSettings | None) -> StoreSettings:
    return settings if settings is not None else StoreSettings.default()
