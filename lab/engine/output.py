"""Where a third-party library's own output goes: lines its C++ core writes straight to the process's
stderr (Ray's "Set ray log level from environment variable ...") land in a log file the command
names, not between lab's own lines; a run folder gets a copy of what this command's engine wrote."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MAX_COPIED = 1 << 20  # a run folder keeps at most the last megabyte of it


class EngineLog:
    """An append-only log file and where this command's part of it starts."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self.start = path.stat().st_size if path.exists() else 0

    @contextmanager
    def capturing(self) -> Iterator[None]:
        """File descriptor 2 (what C code writes to) points at the log while the block runs."""
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            with open(self.path, "ab") as log:
                os.dup2(log.fileno(), 2)
                try:
                    yield
                finally:
                    sys.stderr.flush()
                    os.dup2(saved, 2)
        finally:
            os.close(saved)

    def text(self) -> str:
        """What this command wrote to it so far (its last megabyte), as text."""
        if not self.path.exists():
            return ""
        with open(self.path, "rb") as f:
            f.seek(max(self.start, self.path.stat().st_size - MAX_COPIED))
            return f.read().decode("utf-8", errors="replace")
