"""One interface for a memory system, so one harness evaluates every system, lab included.

A system stores memories under namespaces and answers searches with its own ids; the harness
keeps the map from the dataset's ids to the system's, so gold labels apply whatever ids a system
makes. An adapter says what it approximates (``approximates``): a system run without the feature it
is known for (mem0 without its LLM extraction) is reported as such, beside its figures.
"""
from __future__ import annotations

import math
import re
from abc import ABC, abstractmethod
from typing import Any, Mapping, Sequence

from lab.adapters.templates import ranked
from lab.errors import LabError, ValidationError

Memory = dict[str, Any]  # id, content, created_at (ISO 8601 or None), metadata


class AdapterError(LabError):
    """A system's call failed or answered something unusable; the message names the system and the call."""
    exit_code = 6
    http_status = 502

    def __init__(self, system: str, call: str, problem: str) -> None:
        super().__init__(f"system {system!r}, {call}: {problem}")
        self.system, self.call = system, call


# what a tracking server accepts in a parameter name (MLflow's rule): the settings become the run's params
SETTING_NAME = re.compile(r"^[A-Za-z0-9_\-. :/]{1,200}$")


def check_setting_names(settings: Any, where: str, prefix: str = "") -> dict[str, Any]:
    """``settings`` (a file's ``settings:``, nested) whose every name may be a run parameter once
    flattened with dots, or a ValidationError naming the first that may not and the allowed characters."""
    if not isinstance(settings, Mapping):
        raise ValidationError(f"{where}: settings is a mapping of names to values, got {type(settings).__name__}")
    for key, value in settings.items():
        name = f"{prefix}{key}"
        if not isinstance(key, str) or not SETTING_NAME.match(key) or ".." in name or name.startswith("/"):
            raise ValidationError(f"{where}: settings name {name!r} cannot be a run parameter: use letters, digits "
                                  "and _ - . : / or space (at most 200 characters, no '..', not starting with '/')")
        if isinstance(value, Mapping):
            check_setting_names(value, where, name + ".")
    return dict(settings)


def ranked_hits(system: str, answer: Any, hits: str, id_path: str, score_path: str | None) -> list[tuple[str, float]]:
    """The (id, score) pairs ``hits`` reaches in a search answer, best first, or one error naming the
    first hit without an id or a score that is not a finite number (and its field)."""
    try:
        found = ranked(answer, hits, id_path, score_path)
    except ValueError as exc:
        raise AdapterError(system, "search", str(exc)) from None
    return hits_or_error(system, found, id_path)


def batch_ids(system: str, batch: Sequence[Memory], ids: list[Any], where: str) -> dict[str, str]:
    """source id -> system id for a batch saved in one call, whose answer lists one id per memory
    in order (``where``: the answer's path to them, for the error)."""
    if len(ids) != len(batch):
        raise AdapterError(system, "save", f"{len(batch)} memories sent, {len(ids)} ids at '{where}' in the answer")
    return {str(m["id"]): str(i) for m, i in zip(batch, ids)}


def hits_or_error(system: str, found: list, id_path: str) -> list[tuple[str, float]]:
    """The ranked (id, score) pairs of ``templates.ranked``, or an error naming the first hit without an id."""
    missing = [n for n in found if isinstance(n, int)]
    if missing:
        raise AdapterError(system, "search", f"result {missing[0]} has no id at '{id_path}'")
    return found


class MemorySystem(ABC):
    """What the harness needs of a memory system. ``name`` names it in results; ``approximates``
    says how this adapter's setup differs from the system as its authors run it (empty: not at all)."""

    name: str = "system"
    approximates: str = ""
    # what the system is measured as: its defaults, or a knob set (``settings`` names it)
    settings: dict[str, Any] = {}

    def reset(self, namespace: str) -> None:
        """Forget everything stored under ``namespace`` (the harness starts each namespace clean)."""

    @abstractmethod
    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        """Store ``memories``; returns each one's source id -> the id the system gave it."""

    @abstractmethod
    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        """The system's best ``k`` for ``query``: (system id, score), best first."""

    def context(self, namespace: str, query: str, budget: int) -> str | None:
        """An assembled context within ``budget`` tokens, for systems that make one (None: not offered)."""
        return None

    def close(self) -> None:
        """Release files, processes and connections."""

    def describe(self) -> dict[str, Any]:
        return {"system": self.name, "adapter": type(self).__name__, "approximates": self.approximates,
                "settings": dict(self.settings)}

    def __enter__(self) -> "MemorySystem":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Guarded(MemorySystem):
    """A user's system as the harness calls it: whatever its call raises becomes one
    `AdapterError` naming the system, the call and the error (exit 6, the other systems go on),
    and an answer of the wrong shape is named before the harness reads it."""

    def __init__(self, inner: MemorySystem) -> None:
        self.inner = inner
        self.name, self.approximates, self.settings = inner.name, inner.approximates, inner.settings

    def _call(self, call: str, fn, *args: Any) -> Any:
        try:
            return fn(*args)
        except (LabError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - a user's code: anything it raises is its failure
            raise AdapterError(self.name, call, f"{type(exc).__name__}: {exc}") from exc

    def reset(self, namespace: str) -> None:
        self._call("reset", self.inner.reset, namespace)

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        ids = self._call("save", self.inner.save, namespace, memories)
        if not isinstance(ids, dict):
            raise AdapterError(self.name, "save", f"returned a {type(ids).__name__}, not a dict of source id -> "
                                                  "the system's id")
        return {str(k): str(v) for k, v in ids.items()}

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        hits = self._call("search", self.inner.search, namespace, query, k)
        if not isinstance(hits, (list, tuple)) or not all(isinstance(h, (list, tuple)) and len(h) == 2 for h in hits):
            raise AdapterError(self.name, "search", f"returned {str(hits)[:80]!r}, not a list of (id, score) pairs")
        try:
            out = [(str(i), float(s)) for i, s in hits]
        except (TypeError, ValueError):
            raise AdapterError(self.name, "search", f"returned a score that is not a number: {str(hits)[:80]!r}") \
                from None
        bad = next(((i, s) for i, s in out if not math.isfinite(s)), None)
        if bad is not None:  # NaN sorts anywhere and poisons every mean: refused, not ranked
            raise AdapterError(self.name, "search", f"returned the score {bad[1]!r} for id {bad[0][:80]!r}, "
                                                    "not a finite number")
        return out

    def context(self, namespace: str, query: str, budget: int) -> str | None:
        return self._call("context", self.inner.context, namespace, query, budget)

    def close(self) -> None:
        self._call("close", self.inner.close)

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()
