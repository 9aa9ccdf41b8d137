"""Progress on long work, one way for every stage: a tqdm bar on a terminal, and where output is
piped or logged (CI, `lab demo > log`, DVC) a plain line now and then with the count and the
elapsed time, and one when the stage ends, so no stretch of work is silent."""
from __future__ import annotations

import sys
import time
from typing import Any, Iterable, Iterator

LINE_EVERY_S = 5.0  # piped output: a line at most this often while a stage runs
QUIET_UNDER_S = 1.0  # piped output: a stage shorter than this says nothing at its end


class _Off:
    """No progress asked for."""

    def __init__(self, iterable: Iterable | None = None) -> None:
        self.iterable = iterable
        self.n = 0

    def __iter__(self) -> Iterator:
        return iter(self.iterable or ())

    def update(self, n: int = 1) -> None:
        self.n += n

    def close(self) -> None:
        pass


class LineProgress(_Off):
    """Progress as plain lines on stderr: ``desc: n/total unit (elapsed s)``."""

    def __init__(self, iterable: Iterable | None, total: int | None, desc: str, unit: str, stream: Any = None) -> None:
        super().__init__(iterable)
        self.total, self.desc, self.unit = total, desc, unit
        self.stream = stream or sys.stderr
        self.start = self.last = time.monotonic()
        self.closed = False

    def _line(self, ending: str) -> None:
        of = f"/{self.total}" if self.total is not None else ""
        print(f"{self.desc}: {self.n}{of} {self.unit} {ending}", file=self.stream, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= LINE_EVERY_S:
            self.last = now
            self._line(f"({now - self.start:.0f} s so far)")

    def __iter__(self) -> Iterator:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        elapsed = time.monotonic() - self.start
        if elapsed >= QUIET_UNDER_S:
            self._line(f"in {elapsed:.1f} s")


def progress(iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it",
             enabled: bool = True) -> Any:
    """A progress reporter with tqdm's ``update``/``close``/iteration: a bar on a terminal, lines
    when piped, nothing when not ``enabled``."""
    if not enabled:
        return _Off(iterable)
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, leave=False, mininterval=0.5)
    return LineProgress(iterable, total, desc, unit)
