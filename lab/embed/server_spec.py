"""What names a model behind an OpenAI-compatible server: ``openai:MODEL@BASE_URL``, or a model file.

The two forms:

- ``openai:text-embedding-3-small@https://api.openai.com/v1``: the model the server is asked for
  (``MODEL``, sent as the request's ``model``) and where (``BASE_URL``, to which ``/embeddings``
  is added). The key, when the server wants one, is read from ``OPENAI_API_KEY`` if that is set.
- ``openai:PATH`` (a ``.yaml``, ``.yml`` or ``.json`` file): the same two values plus what the
  id form leaves at its defaults: the dimension, query and passage prefixes (an instruction is a
  query prefix), whether to L2-normalise, the vector space, batch size, concurrency, time bounds,
  retries, and which environment variable holds the key (``reads_env``, ``auth``, as adapter files
  do).

A file is the id form with settings. Its model id is the id form's, ``openai:MODEL@BASE_URL``, plus
``#`` and a fingerprint of the settings that change the vectors (dimension, prefixes,
normalisation) when any differs from the default: transport settings (batch size, concurrency,
time bounds, the key) never change a model's id, so its embedding cache and stores are shared.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from lab.config.file_env import FileEnv, redact_url
from lab.config.reading import read_config_file
from lab.errors import ValidationError
from lab.workspace import process_environment

PREFIX = "openai:"
RERANK_PREFIX = "rerank:"  # a rerank server (lab.search.rerank): the same forms, kind: rerank in a file
SHAPES = ("cohere", "tei")  # a rerank request's shape: Cohere/Jina (documents, top_n) or TEI (texts)
FILE_SUFFIXES = (".yaml", ".yml", ".json")
DEFAULT_KEY_ENV = "OPENAI_API_KEY"
RERANK_KEY_ENV = "RERANK_API_KEY"  # the key the id form of a rerank server sends, when set
_ID = re.compile(r"(?P<model>[^@\s]+)@(?P<url>https?://\S+)")
FILE_FIELDS = ("kind", "model", "base_url", "reads_env", "auth", "dimensions", "send_dimensions", "query_prefix",
               "query_instruction", "passage_prefix", "normalize", "space", "batch_size", "concurrency",
               "timeout_s", "deadline_s", "retries", "tokenizer", "max_tokens", "shape")
LIMITS = {"batch_size": (1, 2048), "concurrency": (1, 64), "retries": (0, 20), "max_tokens": (8, 1_000_000)}


def is_server_model(name: object) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


@dataclass(frozen=True)
class ServerSpec:
    """One server model: where, which, and how to call it (see the module's docstring)."""

    model: str
    base_url: str  # as called (may hold what the environment gave: never shown unredacted)
    env: FileEnv = field(compare=False, repr=False)
    auth_header: str | None = None
    auth_prefix: str = "Bearer "
    auth_env: str | None = None
    auth_required: bool = False  # a file's auth: the variable must be set; the id form's: sent when set
    dimensions: int | None = None
    send_dimensions: bool = False
    query_prefix: str = ""
    passage_prefix: str = ""
    normalize: bool = True
    space: str | None = None
    batch_size: int = 64
    concurrency: int = 4
    timeout_s: float = 30.0
    deadline_s: float = 120.0
    retries: int = 6
    tokenizer: str | None = None
    max_tokens: int = 512
    source: str = ""  # the id or the file it was read from
    kind: str = "openai-embeddings"  # or "rerank"
    shape: str = "cohere"  # a rerank server's request shape (SHAPES)

    @property
    def shown_url(self) -> str:
        """The base URL as errors, logs and ids may show it (userinfo and query values as ***)."""
        return redact_url(self.env.redact(self.base_url))

    @property
    def model_id(self) -> str:
        vectors = {"dimensions": self.dimensions, "query_prefix": self.query_prefix,
                   "passage_prefix": self.passage_prefix, "normalize": self.normalize}
        base = f"{RERANK_PREFIX if self.kind == 'rerank' else PREFIX}{self.model}@{self.shown_url}"
        if vectors == {"dimensions": None, "query_prefix": "", "passage_prefix": "", "normalize": True}:
            return base
        digest = hashlib.sha256(json.dumps(vectors, sort_keys=True).encode()).hexdigest()[:12]
        return f"{base}#{digest}"

    def headers(self) -> dict[str, str]:
        """The request headers; the key read now (a file's declared variable, else OPENAI_API_KEY when set)."""
        headers = {"Content-Type": "application/json"}
        if self.auth_env:
            secret = self.env.read(self.auth_env, "auth.env")
            if secret:
                headers[self.auth_header or "Authorization"] = f"{self.auth_prefix}{secret}"
            elif self.auth_required:
                raise ValidationError(f"{self.source}: auth reads ${self.auth_env}, which is not set",
                                      field="embed.model")
        return headers


def parse_server_model(name: str, env: Mapping[str, str] | None = None, *, kind: str = "openai-embeddings") -> ServerSpec:
    """The spec ``name`` (``openai:MODEL@BASE_URL`` or ``openai:PATH``) names; every problem is one
    ValidationError naming the value."""
    env = process_environment() if env is None else env
    prefix = RERANK_PREFIX if kind == "rerank" else PREFIX
    rest = name[len(prefix):] if name.startswith(prefix) else name
    path = Path(rest.split("#", 1)[0]).expanduser()
    if rest.endswith(FILE_SUFFIXES) or (path.suffix in FILE_SUFFIXES and path.is_file()):
        return _from_file(path, env, kind)
    m = _ID.fullmatch(rest.split("#", 1)[0])
    if not m:
        example = ("rerank:rerank-v3.5@https://api.cohere.com/v2" if kind == "rerank"
                   else "openai:text-embedding-3-small@https://api.openai.com/v1")
        raise ValidationError(f"model {name!r}: a server model is {prefix}MODEL@BASE_URL (like {example}) or "
                              f"{prefix}FILE.yaml", field=_field(kind))
    key_env = RERANK_KEY_ENV if kind == "rerank" else DEFAULT_KEY_ENV
    file_env = FileEnv([key_env], env, name)
    return ServerSpec(model=m["model"], base_url=m["url"].rstrip("/"), env=file_env, auth_env=key_env,
                      source=f"{prefix}{m['model']}@{redact_url(m['url'])}", kind=kind)


def _from_file(path: Path, env: Mapping[str, str], kind: str) -> ServerSpec:
    where = f"model file {path}"
    if not path.is_file():
        raise ValidationError(f"{where}: no such file", field="embed.model")
    raw = read_config_file(path)  # JSON or YAML, aliases bounded (a "billion laughs" file is refused)
    if not isinstance(raw, dict):
        raise ValidationError(f"{where}: expected a mapping of settings, got {type(raw).__name__}", field="embed.model")
    unknown = sorted(set(raw) - set(FILE_FIELDS))
    if unknown:
        raise ValidationError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(FILE_FIELDS)}",
                              field="embed.model")
    if raw.get("shape") is not None and (kind != "rerank" or raw["shape"] not in SHAPES):
        raise ValidationError(f"{where}: shape is for a rerank file, one of {', '.join(SHAPES)}; got {raw['shape']!r}",
                              field=_field(kind))
    if raw.get("kind") != kind:
        raise ValidationError(f"{where}: kind must be {kind!r}, got {raw.get('kind')!r}", field="embed.model")
    for needed in ("model", "base_url"):
        if not isinstance(raw.get(needed), str) or not raw[needed].strip():
            raise ValidationError(f"{where}: {needed} is required (a string)", field="embed.model")
    file_env = FileEnv(raw.get("reads_env"), env, where)
    base_url = file_env.expand(raw["base_url"], "base_url").rstrip("/")
    if not re.match(r"https?://[^/\s]", base_url):
        raise ValidationError(f"{where}: base_url {redact_url(file_env.redact(base_url))!r} is not an http:// or "
                              "https:// URL", field="embed.model")
    auth = raw.get("auth")
    if auth is not None and (not isinstance(auth, dict) or not isinstance(auth.get("env"), str)
                             or set(auth) - {"env", "header", "prefix"}):
        raise ValidationError(f"{where}: auth is {{env: VAR, header: NAME, prefix: TEXT}} (header and prefix "
                              f"optional), got {auth!r}", field="embed.model")
    if auth is not None and auth["env"] not in file_env.declared:
        file_env.read(auth["env"], "auth.env")  # refused, naming the undeclared variable
    if raw.get("query_prefix") is not None and raw.get("query_instruction") is not None:
        raise ValidationError(f"{where}: query_prefix and query_instruction are one setting; give one",
                              field="embed.model")
    spec = ServerSpec(
        model=raw["model"].strip(), base_url=base_url, env=file_env,
        auth_header=(auth or {}).get("header"), auth_prefix=str((auth or {}).get("prefix", "Bearer ")),
        auth_env=(auth or {}).get("env"), auth_required=auth is not None,
        dimensions=_int(raw, "dimensions", where, (1, 65536)), send_dimensions=_bool(raw, "send_dimensions", where, False),
        query_prefix=_str(raw, "query_prefix", where) or _str(raw, "query_instruction", where),
        passage_prefix=_str(raw, "passage_prefix", where), normalize=_bool(raw, "normalize", where, True),
        space=_space(raw.get("space"), where),
        batch_size=_int(raw, "batch_size", where, LIMITS["batch_size"]) or 64,
        concurrency=_int(raw, "concurrency", where, LIMITS["concurrency"]) or 4,
        timeout_s=_seconds(raw, "timeout_s", where, 30.0), deadline_s=_seconds(raw, "deadline_s", where, 120.0),
        retries=6 if raw.get("retries") is None else _int(raw, "retries", where, LIMITS["retries"]) or 0,
        tokenizer=_tokenizer(raw.get("tokenizer"), path, where),
        max_tokens=_int(raw, "max_tokens", where, LIMITS["max_tokens"]) or 512,
        source=f"{RERANK_PREFIX if kind == 'rerank' else PREFIX}{path}", kind=kind, shape=raw.get("shape") or "cohere")
    if spec.send_dimensions and spec.dimensions is None:
        raise ValidationError(f"{where}: send_dimensions needs dimensions", field="embed.model")
    return spec


def _field(kind: str) -> str:
    return "rerank.server" if kind == "rerank" else "embed.model"


def _int(raw: dict, key: str, where: str, bounds: tuple[int, int]) -> int | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not bounds[0] <= value <= bounds[1]:
        raise ValidationError(f"{where}: {key} must be an integer from {bounds[0]} to {bounds[1]}, got {value!r}",
                              field="embed.model")
    return value


def _bool(raw: dict, key: str, where: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ValidationError(f"{where}: {key} must be true or false, got {value!r}", field="embed.model")
    return value


def _str(raw: dict, key: str, where: str) -> str:
    value = raw.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{where}: {key} must be a string, got {value!r}", field="embed.model")
    return value


def _seconds(raw: dict, key: str, where: str, default: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise ValidationError(f"{where}: {key} must be a number of seconds above 0 and at most 3600, got {value!r}",
                              field="embed.model")
    return float(value)


def _space(value: Any, where: str) -> str | None:
    """A declared vector space: the id or alias of a known model whose vectors these are (checked
    against the known models when the embedder is made: lab.embed.registry)."""
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValidationError(f"{where}: space must be a known model's id or alias, got {value!r}", field="embed.model")
    return value


def _tokenizer(value: Any, path: Path, where: str) -> str | None:
    """A folder holding ``tokenizer.json`` (for chunking), relative to the file; None: the bundled MiniLM's."""
    if value is None:
        return None
    folder = (path.parent / str(value)).expanduser()
    if folder.is_file():
        folder = folder.parent
    if not (folder / "tokenizer.json").is_file():
        raise ValidationError(f"{where}: tokenizer {value!r}: no tokenizer.json in {folder}", field="embed.model")
    return str(folder.resolve())
