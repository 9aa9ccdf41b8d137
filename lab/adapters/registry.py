"""Systems by name, adapter file or ``module:Class``: what `lab eval --system` accepts.

- a built-in name: ``lab`` (this pipeline, in process) and the third-party systems that install and
  run offline here, each an optional extra (``pip install -e '.[txtai]'``): ``txtai``, ``chroma``,
  ``mem0``, ``mempalace``;
- an adapter file (``.yaml``): ``kind: http`` (lab.adapters.http), ``kind: mcp`` (lab.adapters.mcp)
  or ``kind: python`` (``class: module:Class`` and ``options:`` for its constructor);
- ``module:Class``: a class implementing ``lab.adapters.base.MemorySystem``, built with ``folder``
  (a scratch folder of its own) as its one argument (a ``kind: python`` file's ``options`` follow
  it as keyword arguments; a class taking no folder is built with the options alone).

An adapter file is trusted like code: it names a command to run (mcp), a module to import (python)
and the environment variables to send (``reads_env``). What can be checked is checked before
anything runs: a ``kind: python`` file's fields and the shape of its ``module:Class``, and that the
module is not one of Python's own (``os:system``, ``subprocess:Popen`` are no memory systems); after
the import, that the name is a subclass of ``MemorySystem``, before it is called.
"""
from __future__ import annotations

import importlib
import inspect
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from lab.adapters.base import AdapterError, MemorySystem
from lab.adapters.http import HttpSystem, known_fields
from lab.adapters.mcp import McpSystem
from lab.config import read_yaml
from lab.errors import LabError, ValidationError


@dataclass(frozen=True)
class Builtin:
    module: str
    cls: str
    extra: str | None  # the optional extra that installs it (None: always here)
    needs: tuple[str, ...]  # the packages it imports
    what: str


BUILTIN: dict[str, Builtin] = {
    "lab": Builtin("lab.adapters.lab_system", "LabSystem", None, (), "this pipeline, in process (a preset)"),
    "txtai": Builtin("lab.adapters.thirdparty.txtai_system", "TxtaiSystem", "txtai", ("txtai",),
                     "txtai Embeddings, hybrid dense + BM25 (its default weights)"),
    "chroma": Builtin("lab.adapters.thirdparty.chroma_system", "ChromaSystem", "chroma", ("chromadb",),
                      "ChromaDB, dense (cosine HNSW)"),
    "mem0": Builtin("lab.adapters.thirdparty.mem0_system", "Mem0System", "mem0", ("mem0",),
                    "mem0 with infer=False (raw text, dense only: no LLM extraction)"),
    "mempalace": Builtin("lab.adapters.thirdparty.mempalace_system", "MempalaceSystem", "mempalace", ("mempalace",),
                         "MemPalace drawers (ChromaDB + BM25 mix)"),
}


def require_packages(name: str) -> None:
    """A built-in whose packages are missing names the extra that installs them."""
    spec = BUILTIN[name]
    for package in spec.needs:
        if importlib.util.find_spec(package) is None:
            raise ValidationError(f"system {name!r} needs the package {package!r}, which is not installed: "
                                  f"pip install -e '.[{spec.extra}]'")


_TARGET = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")


def load_class(target: str, where: str) -> type[MemorySystem]:
    """The ``MemorySystem`` subclass ``target`` (``package.module:Class``) names. Its shape, and that the
    module is not part of Python itself, are checked before the import; nothing it names is called."""
    if not isinstance(target, str) or not _TARGET.match(target):
        raise ValidationError(f"{where}: {target!r} is not module:Class (like mypackage.memory:MySystem)")
    module_name, _, cls_name = target.partition(":")
    top = module_name.split(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        raise ValidationError(f"{where}: {target!r} names a module of Python's standard library ({top!r}), "
                              "which holds no memory system; name a subclass of lab.adapters.base.MemorySystem")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValidationError(f"{where}: cannot import {module_name!r} ({exc})") from None
    cls = getattr(module, cls_name, None)
    if not isinstance(cls, type) or not issubclass(cls, MemorySystem):
        what = ("not in the module" if cls is None else f"a {type(cls).__name__}" if not isinstance(cls, type)
                else "a class")
        raise ValidationError(f"{where}: {target!r} is {what}, not a subclass of lab.adapters.base.MemorySystem "
                              "(refused before it is called)")
    return cls


def open_system(target: str, folder: Path, *, lab_factory: Callable[[Path], MemorySystem] | None = None,
                settings: dict[str, Any] | None = None, env: Mapping[str, str] | None = None) -> MemorySystem:
    """The system ``target`` names, with ``folder`` as its scratch space (created). ``lab_factory``
    builds lab itself (the caller knows the preset and models); ``settings`` set a built-in's knobs;
    ``env`` is the environment adapter files read (``${VAR}``, auth secrets), read at the edge."""
    folder.mkdir(parents=True, exist_ok=True)
    path = Path(target)
    if path.suffix in (".yaml", ".yml"):
        return _from_file(path, env or {}, folder)
    if ":" in target and target.split(":")[0] not in BUILTIN:
        return build(load_class(target, "--system"), folder, {}, "--system")
    if target not in BUILTIN:
        raise ValidationError(f"unknown system {target!r}; known: {sorted(BUILTIN)}, an adapter file (.yaml) "
                              "or module:Class")
    if target == "lab":
        if lab_factory is None:
            raise ValidationError("system 'lab' needs a preset to evaluate")
        return lab_factory(folder)
    require_packages(target)
    spec = BUILTIN[target]
    cls = getattr(importlib.import_module(spec.module), spec.cls)
    return cls(folder, **(settings or {}))


def _from_file(path: Path, env: Mapping[str, str], folder: Path) -> MemorySystem:
    data = read_yaml(path, "system adapter file")
    if not isinstance(data, dict):
        raise ValidationError(f"{path}: an adapter file is a mapping with 'kind' (http, mcp or python)")
    kind = data.get("kind")
    where = str(path)
    if kind == "http":
        return HttpSystem(data, where, env)
    if kind == "mcp":
        return McpSystem(data, where, env)
    if kind == "python":
        return _python_system(data, where, folder)
    raise ValidationError(f"{where}: kind {kind!r} is not one of ['http', 'mcp', 'python']")


def build(cls: type[MemorySystem], folder: Path, options: Mapping[str, Any], where: str) -> MemorySystem:
    """``cls(folder, **options)`` (the manual's classes take their scratch folder first), or
    ``cls(**options)`` for a class that takes none (no parameter named ``folder``, and no required
    first positional one the options do not give); a constructor that does not fit is named with
    its signature before it is called, and whatever it raises is one AdapterError."""
    signature = inspect.signature(cls)
    positional = [p for p in signature.parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    # the options may name the folder themselves (``folder: null``): then it is theirs to give
    takes_folder = "folder" not in options and ("folder" in signature.parameters or bool(
        positional and positional[0].default is inspect.Parameter.empty and positional[0].name not in options))
    args = (folder,) if takes_folder else ()
    try:
        signature.bind(*args, **options)
    except TypeError as exc:
        given = ", ".join([*(["folder"] if args else []), *(f"{k}=..." for k in options)])
        raise ValidationError(f"{where}: {cls.__name__}{signature} cannot be called as {cls.__name__}({given}): "
                              f"{exc}; a kind: python file's options are its keyword arguments") from None
    try:
        return cls(*args, **options)
    except LabError:
        raise
    except Exception as exc:  # noqa: BLE001 - a user's constructor: anything it raises is its failure
        raise AdapterError(getattr(cls, "name", None) or cls.__name__, "start",
                           f"{cls.__name__}(...) raised {type(exc).__name__}: {exc}") from exc


def _python_system(data: Mapping[str, Any], where: str, folder: Path) -> MemorySystem:
    """A ``kind: python`` file's system: every field checked before the class is imported, and the
    class checked before it is built."""
    known_fields(data, ("kind", "name", "class", "options"), where, ("class",))
    options = data.get("options") or {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in options):
        raise ValidationError(f"{where}: options are the class's keyword arguments, a mapping of names to values; "
                              f"got {options!r}")
    name = data.get("name")
    if name is not None and not isinstance(name, str):
        raise ValidationError(f"{where}: name is a string, got {name!r}")
    system = build(load_class(data["class"], where), folder, options, where)
    if name:
        system.name = name
    return system
