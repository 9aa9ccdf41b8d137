"""One mapping from what an operation raised to what a client is told, used by every face (the
REST app, the MCP tools, the chat proxy through the app): the same status, code and message for
the same problem, whichever way it was asked.

A message is lab's own: no file path, no list of other namespaces, no stack trace, no pydantic
documentation link. What a client cannot act on (a store that cannot be read, a model that
failed) is said in general words and logged in full.
"""
from __future__ import annotations

import logging
import re
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from pydantic import ValidationError as PydanticValidationError

from lab.embed.worker import EmbedderModelError, EmbedderProcessError
from lab.errors import LabError, StoreError, StoreUnavailable
from lab.serve.state import CODES, ApiError

log = logging.getLogger("lab.serve")

# an absolute file path (two segments or more), but not one of our own routes (/v1/...)
_PATH = re.compile(r"(?<![\w/])(?!/v1/)(?:[A-Za-z]:)?(?:/[^\s/'\"()]+){2,}/?")
_KNOWN = re.compile(r";\s*known: \[[^\]]*\]")


@dataclass(frozen=True)
class PublicError:
    status: int
    message: str
    field: str | None = None
    headers: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def code(self) -> str:
        return CODES.get(self.status, "error")


def public_message(exc: LabError, store_root: str | tuple[str, ...]) -> str:
    """A lab error's message as a client may see it: no file paths (nor the store's URI), no list
    of other namespaces."""
    text = str(exc)
    for root in sorted((store_root,) if isinstance(store_root, str) else store_root, key=len, reverse=True):
        # the whole path or URI only, never the same letters inside a word
        text = re.sub(r"(?<![\w.-])" + re.escape(root) + r"(?![\w.-])", "<store>", text)
    text = _KNOWN.sub("", text)
    return _PATH.sub("<path>", text)


def store_roots(store: Any) -> tuple[str, ...]:
    """What names the served store in a message, to hide from clients: its folder's absolute path
    and, for a store at a URI, the URI."""
    return (str(store.root.resolve()),) + ((store.where,) if store.location is not None else ())


def first_problem(errors: Sequence[Mapping[str, Any]], known: Callable[[tuple], list[str]],
                  prefix: str = "") -> PublicError:
    """The first of pydantic's ``errors`` (a model's or FastAPI's request validation), in lab's
    words: where, and what is wrong (pydantic's own text ends with a link to its documentation,
    which a client has no use for). An unknown field is answered with ``known(loc)``, the fields
    known where it was sent."""
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    where = ".".join(str(p) for p in ((prefix,) if prefix else ()) + loc)
    message = first.get("msg", "invalid")
    if first.get("type") == "extra_forbidden":
        names = known(loc)
        message = f"unknown field; known: {names}" if names else "unknown field"
    return PublicError(422, f"{where}: {message}" if where else message, where or None)


def validation_error(exc: PydanticValidationError, model: Any = None, prefix: str = "") -> PublicError:
    """The first problem of validating ``model``, in lab's words (``first_problem``); an unknown
    top-level field is answered with the fields ``model`` knows."""
    def known(loc: tuple) -> list[str]:
        return sorted(getattr(model, "model_fields", {}) or {}) if len(loc) == 1 else []

    return first_problem(exc.errors(include_url=False), known, prefix)


def public_error(exc: BaseException, store_root: str | tuple[str, ...], *, where: str = "") -> PublicError:
    """What a client is told about ``exc``; ``where`` names the request in log lines."""
    if isinstance(exc, ApiError):
        return PublicError(exc.status, exc.message, exc.field, dict(exc.headers or {}))
    if isinstance(exc, PydanticValidationError):
        return validation_error(exc)
    if isinstance(exc, EmbedderProcessError):
        log.error("query embedding failed on %s: %s", where, exc)
        return PublicError(503, "query embedding failed (the model process is restarted); retry the request",
                           headers={"Retry-After": "1"})
    if isinstance(exc, EmbedderModelError):
        log.error("the query embedding model failed on %s: %s", where, exc)
        return PublicError(500, "the query embedding model failed; the server log has the details")
    if isinstance(exc, StoreUnavailable):  # nothing is damaged: the client may retry (log: one line)
        log.error("store unreachable on %s: %s", where, exc)
        return PublicError(503, "the store is unreachable (its object storage does not answer); retry later",
                           headers={"Retry-After": "5"})
    if isinstance(exc, LabError):
        if isinstance(exc, StoreError) or exc.http_status >= 500:
            log.error("store error on %s: %s", where, exc)
            return PublicError(500, "the store could not be read or written; the server log has the details")
        return PublicError(exc.http_status, public_message(exc, store_root), exc.field)
    raise TypeError(f"not an error a client is told about: {type(exc).__name__}")


def body_of(error: PublicError) -> dict[str, Any]:
    return {"error": {"status": error.status, "code": error.code, "message": error.message, "field": error.field}}
