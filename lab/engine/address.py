"""A Ray address checked before Ray is asked: its form, something listening there, and that
something speaking gRPC (Ray's GCS and the Ray Client server both do) rather than HTTP/1, another
protocol or nothing. Each failure is one line naming the address and what answered, in seconds:
Ray itself would retry for minutes, or fail with a page of traceback."""
from __future__ import annotations

import socket
from dataclasses import dataclass

from lab.errors import ValidationError

CONNECT_TIMEOUT_S = 5.0  # a TCP connect to an unroutable address fails here, not after the OS's minutes
ANSWER_TIMEOUT_S = 3.0  # a gRPC server answers the preface at once; a silent listener is not one
# an HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server answers both
# with a SETTINGS frame of its own (frame type 4 in the fourth byte of its 9-byte header)
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
H2_SETTINGS = 0x04
TLS_RECORDS = (0x15, 0x16)  # a TLS alert or handshake record: Ray with RAY_USE_TLS answers so
FORMS = "HOST:PORT (a running cluster's head, e.g. 127.0.0.1:6379), ray://HOST:PORT (Ray Client) or auto"
HINT = ("give the head's GCS port (`ray start --head --port P`, 6379 unless told otherwise) or "
        "ray://HOST:10001 for Ray Client; or leave --ray-address out to start a local Ray")


@dataclass(frozen=True)
class RayAddress:
    """A parsed address: the text as given, where to connect, and whether it is Ray Client's."""

    text: str
    host: str
    port: int
    client: bool


def parse_address(address: str) -> RayAddress | None:
    """The host and port of ``address``; None for ``auto`` and ``local`` (Ray finds or starts the
    cluster on this machine). Any other form is refused naming the forms lab takes."""
    if address in ("auto", "local"):
        return None
    rest, client = address, False
    if "://" in address:
        scheme, _, rest = address.partition("://")
        if scheme != "ray":
            raise ValidationError(f"--ray-address {address!r}: the scheme {scheme + '://'!r} is not a Ray address "
                                  f"(the dashboard's http:// address is for `ray job submit`); expected {FORMS}",
                                  field="ray_address")
        client = True
    if rest.startswith("["):  # [IPv6]:port
        host, _, port = rest[1:].partition("]")
        port = port.removeprefix(":")
    else:
        host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ValidationError(f"--ray-address {address!r}: expected {FORMS}", field="ray_address")
    return RayAddress(address, host, int(port), client)


def _first_bytes(conn: socket.socket, want: int) -> bytes | None:
    """Up to ``want`` bytes of the peer's answer: b"" if it closed without one, None if it said
    nothing within the socket's timeout."""
    got = b""
    while len(got) < want:
        try:
            part = conn.recv(want - len(got))
        except socket.timeout:
            return got or None
        except OSError:  # reset: it closed on us
            return got
        if not part:
            return got
        got += part
    return got


def _printable(data: bytes) -> str:
    text = "".join(chr(b) if 32 <= b < 127 else "." for b in data.split(b"\r\n")[0][:40])
    return text.strip(". ") or data[:12].hex(" ")


def what_answers(address: RayAddress) -> str | None:
    """None when a gRPC (or TLS) server answers at ``address``; else what was found there, in words."""
    try:
        conn = socket.create_connection((address.host, address.port), timeout=CONNECT_TIMEOUT_S)
    except socket.gaierror as exc:
        return f"no such host {address.host!r}: {exc.strerror or exc}"
    except socket.timeout:
        return f"nothing answered the connection within {CONNECT_TIMEOUT_S:.0f} s"
    except OSError as exc:
        return f"nobody listens there: {exc.strerror or exc}"
    with conn:
        conn.settimeout(ANSWER_TIMEOUT_S)
        try:
            conn.sendall(H2_PREFACE)
        except OSError:
            return "the connection was closed before a word was said"
        first = _first_bytes(conn, 9)
    if first is None:
        return f"a TCP listener that said nothing in {ANSWER_TIMEOUT_S:.0f} s (Ray's GCS answers at once)"
    if first == b"":
        return "a listener that closed the connection without an answer"
    if len(first) == 9 and first[3] == H2_SETTINGS or first[0] in TLS_RECORDS:
        return None
    if first.startswith(b"HTTP/"):
        return f"an HTTP/1 server ({_printable(first)}...)"
    if first.lstrip().startswith(b"<"):  # an HTTP/0.9-style answer: a page without a status line
        return f"an HTTP server (it answered with a page: {_printable(first)}...)"
    return f"a server of another protocol (it said {_printable(first)!r})"


def check_address(address: str) -> RayAddress | None:
    """Refuse an address where no Ray answers, in one line naming it and what answers there."""
    parsed = parse_address(address)
    if parsed is None:
        return None
    found = what_answers(parsed)
    if found is None:
        return parsed
    if found.startswith(("nobody", "no such", "nothing")):
        raise ValidationError(f"cannot reach the Ray cluster at {address} ({found}); is it running "
                              "(`ray start --head`)? Or leave --ray-address out to start a local Ray",
                              field="ray_address")
    raise ValidationError(f"no Ray cluster at {address}: found {found}, not Ray's gRPC; {HINT}",
                          field="ray_address")


class HeadWatch:
    """Whether a cluster's head still listens, asked while a driver waits on it: Ray's driver
    would log a page of errors for a minute and then end the process without a word of lab's."""

    def __init__(self, address: RayAddress, gone_after_s: float = 4.0) -> None:
        self.address, self.gone_after_s = address, gone_after_s
        self._silent_since: float | None = None

    def gone(self) -> str | None:
        """None while the head listens (or has not been silent for ``gone_after_s``); else why not."""
        import time

        try:
            socket.create_connection((self.address.host, self.address.port), timeout=2.0).close()
            self._silent_since = None
            return None
        except OSError as exc:
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            if now - self._silent_since < self.gone_after_s:
                return None
            return f"nothing listens at {self.address.text} since {now - self._silent_since:.0f} s ({exc.strerror or exc})"
