"""Rendering an assembled context: plain text or markdown, zone headers, memory ids as citations."""
from __future__ import annotations

from typing import TYPE_CHECKING

from lab.assemble.types import line
from lab.errors import ValidationError

if TYPE_CHECKING:
    from lab.assemble.types import Context

FORMATS = ("text", "markdown")
HEADERS = {"critical": "Critical", "middle": "Relevant", "recency": "Recent"}


def render(context: "Context", fmt: str = "text") -> str:
    """Zones in reading order, each item as ``[memory_id] text``; empty context -> empty string."""
    if fmt not in FORMATS:
        raise ValidationError(f"unknown context format {fmt!r}; known: {list(FORMATS)}")
    blocks: list[str] = []
    zone = None
    for item in context.items:
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
