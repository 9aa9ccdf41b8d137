"""The server's committer: one thread that takes queued writes in order and commits them, with
consecutive creates committed together (one chunks commit, one memories commit for up to
``group_max`` memories, their texts embedded ahead in one model call outside the store lock), and
saves the changed index snapshots once writes go quiet (``snapshot_seconds``).

A write is acknowledged (its future set) after its commit and its index update, under the store
lock the searches take too, so the next search sees it.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future

from lab.errors import ConflictError, LabError
from lab.pipeline import Pipeline
from lab.serve.jobs import Job, Observer
from lab.serve.settings import Settings
from lab.serve.work import Create, Write

log = logging.getLogger("lab.serve")


class Committer:
    """The write queue and its one committer thread, over ``pipeline``'s writer; ``lock`` is the
    store lock (shared with the searches), ``embed_lock`` the store model's (shared with the
    query embedder when it is the same model)."""

    def __init__(self, settings: Settings, pipeline: Pipeline, lock: threading.Lock, embed_lock: threading.Lock,
                 observer: Observer) -> None:
        self.settings, self.pipeline, self.lock, self.embed_lock, self.observer = (
            settings, pipeline, lock, embed_lock, observer)
        self.store, self.writer = pipeline.store, pipeline.writer
        self._writes: deque[Job] = deque()
        self._cond = threading.Condition()
        self.closing = False
        self._dirty_since: float | None = None  # first write after the last saved snapshot
        self.thread = threading.Thread(target=self._loop, name="lab-committer", daemon=True)

    def submit(self, work: Write) -> Future:
        job = Job(work, Future(), size=work.size if isinstance(work, Create) else 1)
        with self._cond:
            if self.closing:
                raise ConflictError("the server is shutting down")
            self._writes.append(job)
            self._cond.notify()
        return job.future

    def close(self) -> None:
        """Take no more writes; the thread ends once the queued ones are committed."""
        with self._cond:
            self.closing = True
            self._cond.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._writes and not self.closing:
                    idle = self._idle_wait()
                    if idle is not None and idle <= 0:
                        break
                    self._cond.wait(idle)
                if not self._writes:
                    if self.closing:
                        return
                    group: list[Job] = []
                else:
                    group = self._take_group()
            if not group:
                self._save_snapshots()
                continue
            group = [job for job in group if job.future.set_running_or_notify_cancel()]
            if group and isinstance(group[0].work, Create):
                self._commit_creates(group)
            else:
                for job in group:
                    self._run_write(job)
            if self._dirty_since is None:
                self._dirty_since = time.monotonic()

    def _idle_wait(self) -> float | None:
        """Seconds until changed index snapshots are due to be saved; None when nothing changed."""
        if self._dirty_since is None:
            return None
        return self._dirty_since + self.settings.snapshot_seconds - time.monotonic()

    def _take_group(self) -> list[Job]:
        """The next write, with the creates queued right behind it (called holding the condition)."""
        first = self._writes.popleft()
        if not isinstance(first.work, Create):
            return [first]
        group, size = [first], first.size
        deadline = time.monotonic() + self.settings.group_wait_ms / 1000
        while size < self.settings.group_max:
            if self._writes:
                nxt = self._writes[0]
                if not isinstance(nxt.work, Create) or size + nxt.size > self.settings.group_max:
                    break
                group.append(self._writes.popleft())
                size += nxt.size
                continue
            left = deadline - time.monotonic()
            if left <= 0 or self.closing:
                break
            self._cond.wait(left)
        return group

    def _save_snapshots(self) -> None:
        """Writes went quiet: save the embedding cache and the changed index snapshots, so a
        restart loads them instead of catching up from far behind."""
        try:
            with self.lock:
                self.writer.flush()
        except LabError as exc:
            log.warning("saving index snapshots failed (kept in memory, retried later): %s", exc)
        self._dirty_since = None

    def _commit_creates(self, group: list[Job]) -> None:
        records = [r for job in group for r in job.work.records]
        started = time.perf_counter()
        try:
            # validation reads no store: done once, outside the lock, for the embedding ahead and
            # the outcomes below (save_many checks the records again itself)
            rows = self.writer.validate(records)
            if self.pipeline.cache is not None:
                with self.lock:
                    fresh = [r for r in rows if self.store.find_by_hash(r["namespace"], r["content_hash"]) is None]
                    texts = self.writer.chunk_texts(fresh)
                with self.embed_lock:  # the model runs outside the store lock: searches go on meanwhile
                    self.writer.embed(texts)
            with self.lock:
                report = self.writer.save_many(records, progress=False)
        except BaseException as exc:
            if len(group) == 1:
                group[0].future.set_exception(exc)
                return
            for job in group:  # one bad request must not fail the others: each alone
                self._commit_creates([job])
            return
        self.observer.committed(len(records), time.perf_counter() - started)
        created, claimed = set(report.created), set()
        remaining = iter(rows)
        for job in group:
            outcomes = []
            for row in (next(remaining) for _ in job.work.records):
                rid = report.id_map.get(row["id"], row["id"])
                fresh = rid in created and rid not in claimed
                claimed.add(rid)
                outcomes.append({"id": rid, "namespace": row["namespace"],
                                 "status": "created" if fresh else "duplicate"})
            job.future.set_result({"memories": outcomes, "version": report.version})

    def _run_write(self, job: Job) -> None:
        try:
            with self.lock:
                result = job.work.run(self.writer)
            job.future.set_result(result)
        except BaseException as exc:
            job.future.set_exception(exc)
