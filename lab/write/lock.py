"""One write at a time: the decorator every method that changes a store runs under (``Writer``'s
and ``Upkeep``'s), taking the store's writer lock and keeping the loaded indexes in step."""
from __future__ import annotations

import functools
from typing import Any, Callable


def locked(method: Callable[..., Any]) -> Callable[..., Any]:
    """Run a write under the store's writer lock, after catching the loaded indexes up with what
    other processes committed: our own commit then lands on an index that already holds theirs,
    and the de-duplication check and the commit are one step no other writer can come between."""
    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.store.read_only:
            return method(self, *args, **kwargs)  # refused inside, with the read-only message
        with self.store.write_lock():
            self.indexes.catch_up()
            before = self.store.known_version()
            result = method(self, *args, **kwargs)
            # nobody else committed meanwhile (we hold the lock): loaded indexes this write did not
            # touch are as current after it as they were before
            self.indexes.advance(before, self.store.known_version())
            return result

    return run
