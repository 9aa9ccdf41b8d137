"""One request of an HTTP adapter file, bounded: its path rendered segment by segment and kept on
the base URL's host, the whole call within a deadline, the answer within a size, parsed as JSON."""
from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from lab.adapters.base import AdapterError
from lab.adapters.templates import placeholders, render_path, render_plain

# a path that names a host of its own ("http://x/...", "//x/...", "\\x"): a client would leave base_url for it
_ABSOLUTE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9+.-]*:)?[/\\]{2}")


@dataclass(frozen=True)
class Bounds:
    """How long one call may take and how much it may read (an adapter file's timeout_s, deadline_s,
    max_answer_mb)."""
    timeout_s: float  # each connect, send and read
    deadline_s: float  # the whole call, first byte sent to last byte read
    max_bytes: int  # the answer's body, decoded

    def describe_size(self) -> str:
        return f"max_answer_mb {self.max_bytes / 1024 / 1024:g}"


def _shown(value: Any) -> str:
    text = str(value)
    return repr(text if len(text) <= 100 else text[:100] + "...")


def checked_path(call: str, req: Mapping[str, Any], values: Mapping[str, Any], captured: Mapping[str, Any],
                 error: Callable[[str, str], AdapterError]) -> str:
    """``req``'s path with each value as one segment, or an error naming the placeholder(s) whose
    value would make it an absolute URL (another host) as written."""
    template = str(req["path"])
    if _ABSOLUTE.match(render_plain(template, values)):
        culprits = [f"{{{n}}}{' (captured)' if n in captured else ''} = {_shown(values[n])}"
                    for n in sorted(placeholders(template)) if values.get(n) is not None
                    and (_ABSOLUTE.match(str(values[n])) or "://" in str(values[n]))]
        what = ", ".join(culprits) if culprits else f"the path template {template!r}"
        raise error(call, f"{req['method']} {template}: refused, the path would be an absolute URL that leaves "
                          f"base_url's host: {what}")
    return render_path(template, values)


def send(client: Any, call: str, req: Mapping[str, Any], values: Mapping[str, Any], body: Any, params: Any,
         bounds: Bounds, captured: Mapping[str, Any], error: Callable[[str, str], AdapterError]) -> tuple[Any, int]:
    """The parsed JSON answer (None when empty) and the status of one request; every failure is one
    ``error(call, problem)`` (the caller redacts it)."""
    import httpx

    path = checked_path(call, req, values, captured, error)
    method = req["method"]
    one = min(bounds.timeout_s, bounds.deadline_s)
    try:
        request = client.build_request(method, path, json=body, params=params, timeout=httpx.Timeout(one))
    except httpx.InvalidURL as exc:  # a value too long for a URL, say
        raise error(call, f"{method} {req['path']}: the rendered URL is not one a client can send ({exc})") from None
    base, url = client.base_url, request.url
    if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port) or \
            not url.raw_path.startswith(base.raw_path.rstrip(b"/")):
        raise error(call, f"{method} {req['path']}: refused, the request would go to {url}, outside base_url {base}")
    deadline = time.monotonic() + bounds.deadline_s
    try:
        r = client.send(request, stream=True)
        try:
            content = _read(call, f"{method} {url}", r, bounds, deadline, error)
        finally:
            r.close()
    except httpx.TimeoutException:
        raise error(call, f"no answer from {url} within {bounds.timeout_s:g} s (timeout_s)") from None
    except httpx.HTTPError as exc:
        raise error(call, f"cannot reach {url} ({type(exc).__name__}: {exc})") from None
    text = content[:300].decode("utf-8", "replace")
    if r.status_code >= 300 and r.status_code not in req["accept"]:
        raise error(call, f"{method} {path} answered {r.status_code}: {text}")
    try:
        answer = json.loads(content) if content else None
    except RecursionError:
        raise error(call, f"{method} {path} answered {r.status_code} with JSON nested too deeply to read") from None
    except ValueError:
        raise error(call, f"{method} {path} answered {r.status_code} with a body that is not JSON: "
                          f"{text[:200]!r}") from None
    return answer, r.status_code


def _read(call: str, what: str, r: Any, bounds: Bounds, deadline: float,
          error: Callable[[str, str], AdapterError]) -> bytes:
    """The answer's body, read chunk by chunk: refused once it passes the size bound or the deadline
    (a body dripped a byte at a time never trips a read timeout)."""
    declared = r.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > bounds.max_bytes:
        raise error(call, f"the answer to {what} declares {int(declared)} bytes, more than "
                          f"{bounds.describe_size()} ({bounds.max_bytes} bytes; the file's max_answer_mb)")
    body = bytearray()
    for chunk in r.iter_bytes():
        body += chunk
        if len(body) > bounds.max_bytes:
            raise error(call, f"the answer to {what} passed {bounds.describe_size()} ({bounds.max_bytes} bytes; "
                              "the file's max_answer_mb) and was dropped")
        if time.monotonic() > deadline:
            raise error(call, f"the answer to {what} did not finish within deadline_s {bounds.deadline_s:g} "
                              f"({len(body)} bytes read; the file's deadline_s)")
    return bytes(body)
