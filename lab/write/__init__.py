"""The write side of a store: validation, de-duplication, chunk rows, commits, index upkeep."""
from __future__ import annotations

from lab.write.writer import EDITABLE, IngestReport, Writer

__all__ = ["EDITABLE", "IngestReport", "Writer"]
