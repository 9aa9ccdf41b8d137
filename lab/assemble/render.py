"""Rendering an assembled context: plain text or markdown, zone headers, memory ids as citations."""
from __future__ import annotations

from typing import Any, Sequence

from lab.errors import ValidationError

FORMATS = ("text", "markdown")
HEADERS = {"critical": "Critical", "middle": "Relevant", "recency": "Recent"}


def line(memory_id: str, text: str) -> str:
    """An item as rendered (and as paid for): the citation, then the text."""
    return f"[{memory_id}] {text}"


def render(items: Sequence[Any], fmt: str = "text") -> str:
    """A context's items (``ContextItem``: zone, memory_id, text, created_at) in reading order, zone
    by zone, each as ``[memory_id] text``; no items -> empty string."""
    if fmt not in FORMATS:
        raise ValidationError(f"unknown context format {fmt!r}; known: {list(FORMATS)}")
    blocks: list[str] = []
    zone = None
    for item in items:
        if item.zone != zone:
            zone = item.zone
            title = HEADERS[zone]
            blocks.append(f"## {title}" if fmt == "markdown" else f"=== {title} ===")
        text = line(item.memory_id, item.text)
        if fmt == "markdown":
            when = f" _({item.created_at:%Y-%m-%d %H:%M})_" if item.created_at else ""
            text = f"- **[{item.memory_id}]**{when} {item.text}"
        blocks.append(text)
    return "\n".join(blocks)
