"""The environment variables a file that reaches a server may read (an adapter file, a server model's
file), and what errors and log lines may show of them and of URLs: values read shown as their
``${NAME}``, a URL's user info and query values as ``***``. Declared here, below every layer that
calls a server, so an adapter and an embedding backend keep the one set of rules."""
from __future__ import annotations

import logging
import re
from typing import Any, Mapping
from urllib.parse import quote, urlsplit, urlunsplit

from lab.errors import ValidationError

_ENV = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")

CLIENT_LOGGERS = ("httpx", "httpx2", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy",
                  "httpcore.socks", "mcp.client.streamable_http", "mcp.client.stdio", "mcp.client.client", "client")


def redact_url(url: str) -> str:
    """``url`` with its userinfo, query values and fragment as ``***`` (host and path kept, to say where)."""
    try:
        parts = urlsplit(url)
    except ValueError:  # not parseable as a URL (a bad IPv6 host): say nothing of it
        return "***"
    netloc = parts.netloc if "@" not in parts.netloc else "***@" + parts.netloc.rpartition("@")[2]
    query = "&".join(f"{key}=***" if sep else "***"
                     for key, sep, _ in (pair.partition("=") for pair in parts.query.split("&"))) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, "***" if parts.fragment else ""))


class FileEnv:
    """The environment variables an adapter file may read: those it declares (``reads_env``), from
    ``env`` (the environment the edge read). Remembers the values it handed out, for ``redact``."""

    def __init__(self, declared: Any, env: Mapping[str, str] | None, where: str) -> None:
        declared = [] if declared is None else declared
        if not isinstance(declared, list) or not all(isinstance(n, str) and _NAME.match(n) for n in declared):
            raise ValidationError(f"{where}: reads_env is a list of environment variable names "
                                  f"(like [LAB_HTTP_URL, LAB_API_KEY]), got {declared!r}")
        self.declared = tuple(declared)
        self.env = env or {}
        self.where = where
        self.read_values: dict[str, str] = {}  # name -> the value read (shown as ${name}, never as itself)

    def read(self, name: str, field: str) -> str | None:
        """The variable ``name`` (None: unset); refused, naming it, unless the file declares it."""
        if name not in self.declared:
            wanted = ", ".join([*self.declared, name])
            raise ValidationError(f"{self.where}: {field} reads ${{{name}}}, which the file does not declare; an "
                                  f"adapter file lists the environment variables it may read: reads_env: [{wanted}]")
        value = self.env.get(name)
        if value:
            self.read_values[name] = value
        return value

    def expand(self, text: str, field: str) -> str:
        """``${VAR}`` and ``${VAR:-default}`` in ``text``; every name is checked before any is read."""
        for m in _ENV.finditer(text):
            if m.group(1) not in self.declared:
                self.read(m.group(1), field)  # refuses, naming it

        def one(m: re.Match) -> str:
            value = self.read(m.group(1), field)
            if value is not None:
                return value
            if m.group(2) is not None:
                return m.group(2)
            raise ValidationError(f"{self.where}: {field}: ${{{m.group(1)}}} is not set in the environment "
                                  "(and has no :-default)")

        return _ENV.sub(one, text)

    def redact(self, text: str) -> str:
        """``text`` with every value read shown as its ``${NAME}`` (also percent-encoded) and every URL's
        userinfo and query values as ``***``: what errors and log lines may say."""
        for name, value in sorted(self.read_values.items(), key=lambda kv: -len(kv[1])):
            for form in dict.fromkeys((value, quote(value, safe=""), quote(value))):
                text = text.replace(form, f"${{{name}}}")
        return _URL.sub(lambda m: redact_url(m.group(0)), text)

    def guard_logs(self) -> "_Redacting":
        """Redact the client libraries' log lines until the returned filter's ``remove()``."""
        return _Redacting(self)


class _Redacting(logging.Filter):
    """A filter on the client loggers that rewrites each record's text (and traceback) redacted."""

    def __init__(self, file_env: FileEnv) -> None:
        super().__init__()
        self.file_env = file_env
        for name in CLIENT_LOGGERS:
            logging.getLogger(name).addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = self.file_env.redact(record.getMessage()), None
        if record.exc_info:
            record.exc_text = self.file_env.redact(logging.Formatter().formatException(record.exc_info))
            record.exc_info = None
        return True

    def remove(self) -> None:
        for name in CLIENT_LOGGERS:
            logging.getLogger(name).removeFilter(self)
