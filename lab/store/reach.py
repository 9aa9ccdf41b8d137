"""An object store that does not answer: told apart from a damaged store, said in one line naming the store.

deltalake and pyarrow report a store they cannot reach in their own words (pyarrow's ``AWS Error
NETWORK_CONNECTION ... curlCode: 7``, deltalake's 10-line chain of ``↳ tcp connect error ↳
Connection refused``, coloured for a terminal). ``reaching`` turns any of those into one
``StoreUnavailable`` (exit 5, HTTP 503: the store is not damaged, a retry may work) naming the store
by its URI without credentials, with the innermost reason; every other error passes through
unchanged, for the callers' own damage handling.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import urlsplit, urlunsplit

from lab.errors import LabError, StoreUnavailable

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# what the clients say when no answer came (lower case); a missing key or a bad log says none of these
_NO_ANSWER = ("connection refused", "tcp connect error", "network_connection", "could not connect",
              "couldn't connect", "error sending request", "dns error", "failed to lookup address",
              "name or service not known", "temporary failure in name resolution", "timed out",
              "operation timed out", "connection reset", "no route to host", "network is unreachable",
              "dispatch failure", "broken pipe", "connection aborted", "curlcode: 28", "curlcode: 7,")
_USERINFO = re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/@\s]*@", re.IGNORECASE)
_QUERY = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^\s?#]*)\?[^\s#]*", re.IGNORECASE)


def safe_uri(uri: str) -> str:
    """``uri`` as it may be shown: no user or password, no query (where keys and tokens go)."""
    try:
        parts = urlsplit(uri)
    except ValueError:
        return scrub(uri)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, ("***@" if "@" in parts.netloc else "") + host, parts.path, "", ""))


def scrub(text: str) -> str:
    """``text`` with every URL's user info and query taken out."""
    return _QUERY.sub(r"\1?***", _USERINFO.sub(r"\1***@", text))


def unreachable(exc: BaseException) -> str | None:
    """The reason ``exc`` (from deltalake or pyarrow) gives for getting no answer, in one line;
    None when it is about something else (a missing file, a damaged log)."""
    if isinstance(exc, LabError):
        return None
    text = _ANSI.sub("", str(exc))
    if not any(marker in text.lower() for marker in _NO_ANSWER):
        return None
    # deltalake nests its causes one per line ("↳ ..."), the innermost last; pyarrow says it
    # after "Details:"
    lines = [line.strip().lstrip("↳").strip() for line in text.splitlines()]
    reason = [line for line in lines if line][-1] if any(lines) else type(exc).__name__
    reason = reason.split("Details:", 1)[-1].strip()
    return scrub(reason)[:200]


@contextmanager
def reaching(uri: str, doing: str) -> Iterator[None]:
    """Run the block's object-store calls for the store at ``uri``; no answer is a StoreUnavailable
    naming the store (``doing``: what was being done, for the message)."""
    try:
        yield
    except Exception as exc:
        reason = unreachable(exc)
        if reason is None:
            raise
        raise StoreUnavailable(f"store {safe_uri(uri)} is unreachable ({doing}: {reason}); check its endpoint "
                               "and the network, then retry") from None
