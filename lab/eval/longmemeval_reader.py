"""Reading a LongMemEval file as it comes: one question at a time off the top-level JSON list,
from a .json or a .json.gz, so memory stays bounded by one question, never the whole tree."""
from __future__ import annotations

import gzip
import json
import re
import zlib
from pathlib import Path
from typing import Any, Iterator

from lab.errors import ValidationError
from lab.eval.dataset import file_sha256

CHUNK = 1 << 20  # characters read at a time by the streaming reader


def is_gzip(path: str | Path) -> bool:
    """A gzip file by its name (``.gz``) or by its first two bytes."""
    if str(path).endswith(".gz"):
        return True
    with open(path, "rb") as f:
        return f.read(2) == b"\x1f\x8b"


def content_sha256(path: str | Path) -> str:
    """The SHA-256 of the file's JSON: of its bytes, or of what a .gz holds (read a megabyte at a time)."""
    if not is_gzip(path):
        return file_sha256(path)
    import hashlib

    h = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except (EOFError, OSError, zlib.error) as exc:
        raise _bad_gzip(path, exc) from None
    return h.hexdigest()


def _bad_gzip(path: str | Path, exc: BaseException) -> ValidationError:
    why = "it ends early (a truncated file?)" if isinstance(exc, EOFError) else str(exc) or type(exc).__name__
    return ValidationError(f"{path}: not a readable gzip file: {why}"[:400])


def iter_questions(path: str | Path) -> Iterator[Any]:
    """Each element of the file's top-level JSON list, decoded one at a time; a file that is not
    UTF-8 text, or a question nested deeper than a JSON reader follows, is refused naming the file
    and the question (its number, and its id when it can be read)."""
    gz = is_gzip(path)
    try:
        yield from _iter_questions(path, gz)
    except UnicodeDecodeError as exc:
        raise ValidationError(f"{path}: not UTF-8 text (byte {exc.start} of a read): a LongMemEval file is a JSON "
                              "list of questions") from None
    except (EOFError, OSError, zlib.error) as exc:
        if not gz:
            raise
        raise _bad_gzip(path, exc) from None


def _iter_questions(path: str | Path, gz: bool = False) -> Iterator[Any]:
    decoder = json.JSONDecoder()
    n = 0
    with (gzip.open(path, "rt", encoding="utf-8") if gz else open(path, encoding="utf-8")) as f:
        buf, pos = f.read(CHUNK), 0
        pos = _skip(buf, pos)
        if pos >= len(buf) or buf[pos] != "[":
            raise ValidationError(f"{path}: a LongMemEval file is a JSON list of questions")
        pos += 1
        while True:
            pos = _skip(buf, pos)
            while pos >= len(buf):
                more = f.read(CHUNK)
                if not more:
                    raise ValidationError(f"{path}: the JSON list ends early (a truncated file?)")
                buf, pos = buf[pos:] + more, 0
                pos = _skip(buf, pos)
            if buf[pos] == "]":
                return
            if buf[pos] == ",":
                pos += 1
                continue
            n += 1
            while True:
                try:
                    item, end = decoder.raw_decode(buf, pos)
                    break
                except RecursionError:  # nesting no LongMemEval question has: refused, not followed
                    raise ValidationError(f"{path} question {n}{_id_near(buf, pos)}: nested deeper than a JSON "
                                          "reader follows (a question is an object of lists of turns)") from None
                except json.JSONDecodeError:
                    more = f.read(CHUNK)
                    if not more:
                        raise ValidationError(f"{path}: not valid JSON near byte {pos} of the last read "
                                              "(a truncated or damaged file?)") from None
                    buf, pos = buf[pos:] + more, 0
            yield item
            buf, pos = buf[end:], 0


_QID = re.compile(r'"question_id"\s*:\s*"([^"\\]{1,200})"')


def _id_near(buf: str, pos: int) -> str:
    """`` (ID)``: the id of the question that starts at ``pos``, when its text says it early on."""
    m = _QID.search(buf, pos, pos + 4096)
    return f" ({m.group(1)!r})" if m else ""


def _skip(buf: str, pos: int) -> int:
    while pos < len(buf) and buf[pos] in " \t\r\n":
        pos += 1
    return pos
