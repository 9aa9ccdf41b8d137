"""The oversize rule: cutting an item longer than the whole budget down to the space left in its zone."""
from __future__ import annotations

from dataclasses import replace

from lab.assemble.render import line
from lab.assemble.tokens import TokenCounter
from lab.assemble.types import _Candidate


def _truncate(c: _Candidate, counter: TokenCounter, space: int) -> _Candidate:
    prefix = line(c.item.memory_id, "")
    body = counter.truncate(c.line, space)
    text = body[len(prefix):] if body.startswith(prefix) else ""
    truncated = replace(c.item, text=text.rstrip() + " …")
    ln = line(c.item.memory_id, truncated.text)
    tokens = counter.count(ln)
    while tokens > space and text:  # the ellipsis can cost a token: shave words until it fits
        text = text.rsplit(" ", 1)[0] if " " in text.strip() else ""
        truncated = replace(c.item, text=text.rstrip() + " …")
        ln = line(c.item.memory_id, truncated.text)
        tokens = counter.count(ln)
    return _Candidate(truncated, ln, tokens, c.normalised, c.zone, c.reason + "+truncated", merged=c.merged)
