"""A model from a local folder: ``st:PATH`` (sentence-transformers) or ``onnx:PATH`` (an ONNX
export and its ``tokenizer.json``); a bare folder path is read as whichever of the two it holds.

The embedder's id is the backend, the absolute path and a fingerprint of the folder's model
files, so a store refuses vectors from weights changed under the same path.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from lab.config import EmbedConfig
from lab.embed.base import Embedder, MissingExtra, files_fingerprint
from lab.embed.onnx import OnnxEmbedder
from lab.embed.st import SentenceTransformerEmbedder
from lab.errors import ConflictError, ValidationError

PREFIXES = ("st:", "onnx:")
FINETUNE_META = "lab-finetune.json"  # what `lab adapt --kind finetune` writes beside a model's weights
_WEIGHTS = ("model.safetensors", "pytorch_model.bin")


def looks_local(name: str) -> bool:
    if name.startswith(("openai:", "adapter:")):  # a server model, an adapter (their own forms; paths have slashes)
        return False
    return name.startswith(PREFIXES) or "/" in name or name.startswith((".", "~"))


def _split(name: str) -> tuple[str | None, Path, str | None]:
    """(backend or None, folder, recorded fingerprint or None) of a local model's name."""
    backend = None
    for prefix in PREFIXES:
        if name.startswith(prefix):
            backend, name = prefix[:-1], name[len(prefix):]
    fingerprint = None
    if "#" in name:
        name, fingerprint = name.rsplit("#", 1)
    return backend, Path(name).expanduser(), fingerprint


def _onnx_file(folder: Path) -> Path | None:
    if (folder / "model.onnx").is_file():
        return folder / "model.onnx"
    found = sorted(folder.glob("*.onnx")) or sorted(folder.glob("onnx/*.onnx"))
    return found[0] if len(found) == 1 else None


def _st_missing(folder: Path) -> list[str]:
    missing = []
    if not (folder / "modules.json").is_file() and not (folder / "config.json").is_file():
        missing.append("modules.json or config.json")
    if not any((folder / w).is_file() for w in _WEIGHTS):
        missing.append(" or ".join(_WEIGHTS))
    if not (folder / "tokenizer.json").is_file():
        missing.append("tokenizer.json")
    return missing


def _onnx_missing(folder: Path) -> list[str]:
    missing = []
    if _onnx_file(folder) is None:
        missing.append("model.onnx (or exactly one *.onnx file)")
    if not (folder / "tokenizer.json").is_file():
        missing.append("tokenizer.json")
    return missing


def model_files(backend: str, folder: Path) -> list[Path]:
    """The files whose contents make the model (the fingerprint's input)."""
    if backend == "onnx":
        onnx = _onnx_file(folder)
        return [p for p in (onnx, folder / "tokenizer.json") if p is not None]
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix in (".json", ".safetensors", ".bin", ".txt"))


def local_embedder(name: str, config: EmbedConfig) -> Embedder:
    backend, folder, model_id = _checked(name)
    if backend == "st":
        _require(name, "sentence_transformers", "sentence-transformers", None)
        return SentenceTransformerEmbedder(batch_size=config.batch_size, path=folder, model_id=model_id)
    _require(name, "onnxruntime", "onnxruntime", "onnx")
    onnx = _onnx_file(folder)
    assert onnx is not None
    return OnnxEmbedder(onnx, folder, model_id=model_id, batch_size=config.batch_size)


def local_model_folder(name: str) -> Path:
    """The folder the local model ``name`` loads from (checked as `local_model_id` checks it)."""
    return _checked(name)[1]


def local_model_id(name: str) -> str:
    """The id (backend, folder, fingerprint) of the local model ``name``, without loading it;
    a folder that is missing, not a model, or whose files changed since ``name`` was recorded is
    refused, named."""
    return _checked(name)[2]


# a recorded local model id -> a copy of its folder (a bundle's packed one), read where the folder
# the id names is not there; the id stays the recorded one, so the stores it made still match
_PACKED: dict[str, Path] = {}


def use_packed_copy(model_id: str, folder: str | Path) -> None:
    """Let the local model ``model_id`` (``st:/abs/path#fingerprint``, as a store or bundle records
    it) load from ``folder`` wherever its own folder is missing. The copy must hold the recorded
    fingerprint's files: it is checked like the original when the model is opened."""
    _PACKED[model_id] = Path(folder).resolve()


def _checked(name: str) -> tuple[str, Path, str]:
    backend, folder, recorded = _split(name)
    if not folder.is_dir() and name in _PACKED:
        _, copy, model_id = _checked(f"{backend + ':' if backend else ''}{_PACKED[name]}"
                                     + (f"#{recorded}" if recorded else ""))
        return backend or model_id.split(":", 1)[0], copy, name
    if not folder.is_dir():
        raise ValidationError(f"embed.model {name!r}: {folder} is not a folder", field="embed.model")
    folder = folder.resolve()
    if backend is None:  # a bare folder: whichever kind it holds
        backend = "st" if not _st_missing(folder) else "onnx" if not _onnx_missing(folder) else None
        if backend is None:
            raise ValidationError(
                f"embed.model {name!r}: {folder} is not a model folder: a sentence-transformers folder lacks "
                f"{', '.join(_st_missing(folder))}; an ONNX one lacks {', '.join(_onnx_missing(folder))}",
                field="embed.model")
    missing = _st_missing(folder) if backend == "st" else _onnx_missing(folder)
    if missing:
        kind = "a sentence-transformers" if backend == "st" else "an ONNX"
        raise ValidationError(f"embed.model {name!r}: {folder} is not {kind} model folder: "
                              f"it lacks {', '.join(missing)}", field="embed.model")
    fingerprint = files_fingerprint(model_files(backend, folder))[:12]
    if recorded is not None and recorded != fingerprint:
        raise ConflictError(f"the model files in {folder} changed since {name!r} was recorded "
                            f"(fingerprint {recorded}, now {fingerprint}): its stored vectors are of other weights")
    return backend, folder, f"{backend}:{folder}#{fingerprint}"


def _require(name: str, module: str, package: str, extra: str | None) -> None:
    if importlib.util.find_spec(module) is None:
        hint = f"pip install 'lab[{extra}]'" if extra else "reinstall lab"
        raise MissingExtra(f"model {name!r} needs {package}, which is not installed: {hint}", field="embed.model")
