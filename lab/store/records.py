"""Validation and normalisation of memory and edge records coming from users and files."""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime, timezone
from typing import Any, Mapping

from lab.config import parse_time
from lab.errors import ValidationError
from lab.schema import EDGE_RELATIONS, MEMORY_TYPES

NAMESPACE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # one segment of a namespace; fullmatch: "$" alone lets a trailing newline through
MAX_NAMESPACE_SEGMENTS = 4  # "team-a/project-x": segments group namespaces for key permissions
MAX_NAMESPACE_CHARS = 128
NAMESPACE_FOLDER_SEP = "~"  # stands for "/" in a namespace's index folder; never valid in a name
MAX_ID_CHARS = 200
ID_RE = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.:@#/+-]{{0,{MAX_ID_CHARS - 1}}}$")
MAX_CONTENT_CHARS = 1_000_000
MAX_INT64 = 2**63 - 1
# names Windows reserves for devices, with or without an extension: unusable as folder names there
RESERVED_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(1, 10)),
                            *(f"lpt{i}" for i in range(1, 10))})

MEMORY_FIELDS = (
    "id", "namespace", "content", "title", "tags", "type", "source", "created_at", "updated_at",
    "accessed_at", "access_count", "importance", "pinned", "valid", "superseded_by", "metadata",
)
EDGE_FIELDS = ("namespace", "src", "dst", "relation", "weight", "created_at")


def utcnow() -> datetime:
    """The clock stored times are read from (UTC, aware)."""
    return datetime.now(timezone.utc)


def validate_namespace(name: Any) -> str:
    """A namespace is one to four segments joined by "/" ("team-a/notes"); each segment is a short
    name usable as a folder: no separators, no '..', bounded length. Its index folder is
    ``namespace_folder(name)``, one level under the store's indexes, whatever the segments."""
    if not isinstance(name, str) or not name:
        raise ValidationError(f"namespace must be a non-empty string, got {name!r}")
    segments = name.split("/")
    if (len(name) > MAX_NAMESPACE_CHARS or len(segments) > MAX_NAMESPACE_SEGMENTS
            or any(".." in s or not NAMESPACE_RE.fullmatch(s) or s.endswith(".") for s in segments)):
        raise ValidationError(
            f"invalid namespace {name!r}: use 1 to {MAX_NAMESPACE_SEGMENTS} segments joined by '/', each of "
            "1-64 characters from letters, digits, '_', '-', '.', starting with a letter or digit and "
            f"not ending with '.', without '..' ({MAX_NAMESPACE_CHARS} characters at most in all)"
        )
    for s in segments:
        if s.split(".")[0].lower() in RESERVED_NAMES:
            raise ValidationError(f"invalid namespace {name!r}: {s.split('.')[0]!r} is a reserved device name "
                                  "on Windows, unusable as a folder there; choose another")
    return name


def namespace_folder(name: str) -> str:
    """The folder name of a namespace's index: "/" becomes "~", so "team-a/notes" is one folder
    beside the others and can never be mistaken for (or deleted with) a namespace "team-a"."""
    return validate_namespace(name).replace("/", NAMESPACE_FOLDER_SEP)


def validate_id(value: Any, field: str = "id") -> str:
    if not isinstance(value, str) or not ID_RE.fullmatch(value):
        raise ValidationError(
            f"invalid {field} {value!r}: use 1-200 characters from letters, digits and _.:@#/+- "
            "starting with a letter or digit"
        )
    return value


def content_hash(namespace: str, content: str) -> str:
    """The idempotency key: the same content in the same namespace is stored once."""
    return hashlib.sha256(f"{namespace}\x00{content}".encode("utf-8")).hexdigest()


def index_hash(content: str, title: str, tags: list[str]) -> str:
    """Identifies what is chunked and indexed; changes when content, title or tags change."""
    payload = json.dumps([content, title, tags], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def default_id(namespace: str, digest: str) -> str:
    return f"{namespace}:{digest[:16]}"


def _str(raw: Mapping[str, Any], key: str, default: str, where: str) -> str:
    value = raw.get(key, default)
    if value is None:
        return default
    if not isinstance(value, str):
        raise ValidationError(f"{where}field '{key}': expected a string, got {type(value).__name__}", field=key)
    return check_utf8(value, key, where)


def check_utf8(text: str, key: str, where: str = "") -> str:
    """``text``, if it can be stored as UTF-8 (a lone surrogate, e.g. from a JSON "\\ud800", cannot)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(f"{where}field '{key}': character {exc.start} ({text[exc.start]!r}) is a lone "
                              "surrogate, not valid Unicode text", field=key) from None
    return text


def normalize_memory(
    raw: Mapping[str, Any],
    *,
    now: datetime,
    namespace: str | None = None,
    where: str = "",
) -> dict[str, Any]:
    """Check a memory record and fill defaults; the result matches schema.MEMORIES.

    ``where`` prefixes error messages (e.g. "line 12: ") so a file's bad record is easy to find.
    """
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where}a memory must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(MEMORY_FIELDS))
    if unknown:
        raise ValidationError(f"{where}unknown field(s) {unknown}; allowed: {list(MEMORY_FIELDS)}")
    ns = _namespace_field(raw, namespace, where)
    content = _content_field(raw, where)
    digest = content_hash(ns, content)
    mem_id = raw.get("id")
    try:
        mem_id = default_id(ns, digest) if mem_id is None else validate_id(mem_id)
    except ValidationError as exc:
        raise ValidationError(f"{where}field 'id': {exc}", field="id") from None
    mtype = raw.get("type", "semantic")
    if mtype not in MEMORY_TYPES:
        raise ValidationError(f"{where}field 'type': {mtype!r} is not one of {list(MEMORY_TYPES)}", field="type")
    tags = _tags_field(raw, where)
    created_at, updated_at, accessed_at = _time_fields(raw, now, where)
    access_count, importance, pinned, valid = _state_fields(raw, mtype, where)
    superseded_by = raw.get("superseded_by")
    if superseded_by is not None:
        try:
            validate_id(superseded_by, "superseded_by")
        except ValidationError as exc:
            raise ValidationError(f"{where}field {exc}", field="superseded_by") from None
    title = _str(raw, "title", "", where)
    return {
        "id": mem_id,
        "namespace": ns,
        "content": content,
        "content_hash": digest,
        "index_hash": index_hash(content, title, tags),
        "title": title,
        "tags": tags,
        "type": mtype,
        "source": _str(raw, "source", "", where),
        "created_at": created_at,
        "updated_at": updated_at,
        "accessed_at": accessed_at,
        "access_count": access_count,
        "importance": importance,
        "pinned": pinned,
        "valid": valid,
        "superseded_by": superseded_by,
        "metadata": _metadata_field(raw, where),
    }


def _namespace_field(raw: Mapping[str, Any], namespace: str | None, where: str) -> str:
    ns = raw.get("namespace", namespace)
    if ns is None:
        raise ValidationError(f"{where}field 'namespace' is required", field="namespace")
    try:
        return validate_namespace(ns)
    except ValidationError as exc:
        raise ValidationError(f"{where}field 'namespace': {exc}", field="namespace") from None


def _content_field(raw: Mapping[str, Any], where: str) -> str:
    content = raw.get("content")
    if not isinstance(content, str) or not content.strip():
        raise ValidationError(f"{where}field 'content' must be a non-empty string, got {content!r}", field="content")
    if len(content) > MAX_CONTENT_CHARS:
        raise ValidationError(
            f"{where}field 'content' has {len(content)} characters; the limit is {MAX_CONTENT_CHARS}",
            field="content")
    return check_utf8(content, "content", where)


def _tags_field(raw: Mapping[str, Any], where: str) -> list[str]:
    tags = raw.get("tags", [])
    if tags is None:
        tags = []
    if not isinstance(tags, (list, tuple)) or not all(isinstance(t, str) and t.strip() for t in tags):
        raise ValidationError(f"{where}field 'tags' must be a list of non-empty strings, got {tags!r}", field="tags")
    return list(dict.fromkeys(check_utf8(t.strip(), "tags", where) for t in tags))  # de-duplicated, order kept


def _time_fields(raw: Mapping[str, Any], now: datetime,
                 where: str) -> tuple[datetime, datetime, datetime | None]:
    """(created_at, updated_at, accessed_at): created defaults to ``now``, updated to created."""
    def _time(key: str, default: datetime | None) -> datetime | None:
        value = raw.get(key)
        if value is None:
            return default
        try:
            return parse_time(value, key)
        except ValidationError as exc:
            raise ValidationError(f"{where}field {exc}", field=key) from None

    created_at = _time("created_at", now)
    updated_at = _time("updated_at", created_at)
    if updated_at < created_at:
        raise ValidationError(f"{where}field 'updated_at' is earlier than 'created_at'", field="updated_at")
    return created_at, updated_at, _time("accessed_at", None)


def _state_fields(raw: Mapping[str, Any], mtype: str, where: str) -> tuple[int, float, bool, bool]:
    """(access_count, importance, pinned, valid), each checked (anchors are pinned by default)."""
    access_count = raw.get("access_count", 0)
    if access_count is None:
        access_count = 0
    if isinstance(access_count, bool) or not isinstance(access_count, int) or not 0 <= access_count <= MAX_INT64:
        raise ValidationError(f"{where}field 'access_count' must be an integer in 0..{MAX_INT64}, got {access_count!r}",
                              field="access_count")
    importance = raw.get("importance", 0.5)
    if importance is None:
        importance = 0.5
    if isinstance(importance, bool) or not isinstance(importance, (int, float)) or not 0 <= importance <= 1:
        raise ValidationError(f"{where}field 'importance' must be a number in [0, 1], got {importance!r}",
                              field="importance")
    pinned = raw.get("pinned", mtype == "anchor")
    valid = raw.get("valid", True)
    for key, value in (("pinned", pinned), ("valid", valid)):
        if not isinstance(value, bool):
            raise ValidationError(f"{where}field '{key}' must be true or false, got {value!r}", field=key)
    return int(access_count), float(importance), pinned, valid


def _metadata_field(raw: Mapping[str, Any], where: str) -> str:
    """The metadata object as canonical JSON (an object; episode keys a string or an integer)."""
    metadata = raw.get("metadata", {})
    if metadata is None:
        metadata = {}
    if isinstance(metadata, str):  # Parquet files carry metadata as a JSON string
        try:
            metadata = json.loads(metadata) if metadata.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValidationError(f"{where}field 'metadata' is not valid JSON: {exc}", field="metadata") from None
    if not isinstance(metadata, Mapping):
        raise ValidationError(f"{where}field 'metadata' must be an object, got {type(metadata).__name__}",
                              field="metadata")
    for key in EPISODE_KEYS:
        value = metadata.get(key)
        # episode keys group turns: a string, an integer or a boolean names one group the same way
        # in Python and in table expressions; a float or a nested value would not
        if value is not None and not isinstance(value, (str, int)):
            raise ValidationError(
                f"{where}field 'metadata.{key}' must be a string or an integer, got {type(value).__name__} {value!r}",
                field=f"metadata.{key}")
    try:
        metadata_json = json.dumps(metadata, sort_keys=True, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{where}field 'metadata' is not JSON-serialisable: {exc}", field="metadata") from None
    return check_utf8(metadata_json, "metadata", where)


def normalize_edge(
    raw: Mapping[str, Any], *, now: datetime, namespace: str | None = None, where: str = ""
) -> dict[str, Any]:
    """Check an edge record: src/dst ids, a known relation, weight in [0, 1]."""
    if not isinstance(raw, Mapping):
        raise ValidationError(f"{where}an edge must be an object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(EDGE_FIELDS))
    if unknown:
        raise ValidationError(f"{where}unknown edge field(s) {unknown}; allowed: {list(EDGE_FIELDS)}")
    out: dict[str, Any] = {}
    ns = raw.get("namespace", namespace)
    if ns is not None:
        ns = validate_namespace(ns)
    out["namespace"] = ns
    for key in ("src", "dst"):
        if key not in raw:
            raise ValidationError(f"{where}edge field '{key}' is required", field=key)
        try:
            out[key] = validate_id(raw[key], key)
        except ValidationError as exc:
            raise ValidationError(f"{where}edge field {exc}", field=key) from None
    if out["src"] == out["dst"]:
        raise ValidationError(f"{where}an edge cannot link {out['src']!r} to itself")
    relation = raw.get("relation", "related_to")
    if relation not in EDGE_RELATIONS:
        raise ValidationError(
            f"{where}edge field 'relation': {relation!r} is not one of {list(EDGE_RELATIONS)}",
            field="relation")
    out["relation"] = relation
    weight = raw.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 <= weight <= 1:
        raise ValidationError(f"{where}edge field 'weight' must be a number in [0, 1], got {weight!r}", field="weight")
    out["weight"] = float(weight)
    created = raw.get("created_at")
    try:
        out["created_at"] = now if created is None else parse_time(created, "created_at")
    except ValidationError as exc:
        raise ValidationError(f"{where}edge field {exc}", field="created_at") from None
    return out


# --------------------------------------------------------------------------- what a row means
# One definition of each, used by the write path (index-time context), search (results) and
# assembly (item text, neighbours): two copies of a rule drift apart.

def item_text(title: str | None, content: str) -> str:
    """A memory as handed to a model: ``title: content``, or the content alone without a title."""
    return f"{title}: {content}" if title else content


EPISODE_KEYS = ("episode", "session")


def _episode_value(value: Any) -> str | None:
    # as JSON text renders it (what polars' json_path_match returns for a string, an integer or a
    # boolean: the only kinds normalize_memory accepts under these keys)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def episode_of(metadata: str | None) -> str | None:
    """The episode key in a memory's JSON metadata: "episode", else "session" (null counts as
    absent), as a string; None when the memory belongs to no episode."""
    if not metadata or ("episode" not in metadata and "session" not in metadata):
        return None
    try:
        meta = json.loads(metadata)
    except ValueError:
        return None
    if not isinstance(meta, dict):
        return None
    key = _episode_value(meta.get("episode"))
    return key if key is not None else _episode_value(meta.get("session"))


def episode_expr(column: str = "metadata") -> "pl.Expr":
    """``episode_of`` as a polars expression over a JSON metadata column, for whole tables."""
    import polars as pl

    meta = pl.col(column).str
    return pl.coalesce(meta.json_path_match("$.episode"), meta.json_path_match("$.session"))


# A chunk of an extra index view (ChunkConfig.views) carries the view's name after its ordinal:
# "{memory}#{hash}#{ordinal}~{view}". Chunks of the main view have no suffix, so stores written
# before views existed read unchanged.
VIEW_MARK = "~"
# the view at the end of a chunk id (group 1); ordinals are digits, so a '~' in a memory id never matches
CHUNK_VIEW_PATTERN = r"#\d+~([^#~]+)$"


def chunk_id(memory_id: str, index_hash_: str, ordinal: int, view: str = "") -> str:
    """A chunk's id: its memory, the index hash it was made from (12 hex digits), its ordinal,
    and the index view it belongs to ("" for the main view)."""
    return f"{memory_id}#{index_hash_[:12]}#{ordinal}" + (f"{VIEW_MARK}{view}" if view else "")


def chunk_view(chunk_id_: str) -> str:
    """The index view of a chunk id ("" for the main view); memory ids may hold '~', the ordinal not."""
    found = re.search(CHUNK_VIEW_PATTERN, chunk_id_)
    return found.group(1) if found else ""


def chunk_index_hash(chunk_id_: str) -> str:
    """The index-hash prefix inside a chunk id; memory ids may contain '#', so split from the right."""
    return chunk_id_.rsplit("#", 2)[1]
