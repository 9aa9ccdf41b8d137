"""The query-embedding process: the same vectors as the model in process, a clear error when it
dies or cannot start, and a new process for the next call."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from lab.config import FAKE_MODEL
from lab.embed.fake import FakeEmbedder
from lab.embed.worker import EmbedderModelError, EmbedderProcessError, ProcessEmbedder


@pytest.fixture
def worker():
    w = ProcessEmbedder(FAKE_MODEL, FakeEmbedder().dim)
    yield w
    w.close()


def test_vectors_are_those_of_the_model_in_process(worker):
    texts = ["the puppy is called Biscuit", "naïve café — ünïcode", "x" * 5000, "the puppy is called Biscuit"]
    got = worker.embed(texts)
    assert got.dtype == np.float32 and got.shape == (4, worker.dim)
    assert np.array_equal(got, FakeEmbedder().embed(texts))
    assert worker.embed([]).shape == (0, worker.dim)


def test_a_dead_process_fails_the_call_in_flight_and_the_next_call_starts_a_new_one(worker):
    worker.start()
    first = worker._proc
    send = first.stdin.write

    def die_then_send(data):  # the process dies as the texts are sent
        first.kill()
        first.wait()
        return send(data)

    first.stdin.write = die_then_send
    with pytest.raises(EmbedderProcessError, match=r"exited with code -9 while (receiving texts|embedding)"):
        worker.embed(["after the kill"])
    again = worker.embed(["after the kill"])  # a new process
    second = worker._proc
    assert second is not first and second.poll() is None
    assert np.array_equal(again, FakeEmbedder().embed(["after the kill"]))
    second.kill()  # one that died idle is replaced without failing a call
    second.wait()
    assert np.array_equal(worker.embed(["idle death"]), FakeEmbedder().embed(["idle death"]))
    assert worker._proc is not second


def test_a_model_that_cannot_load_is_named_and_close_ends_the_process(worker):
    bad = ProcessEmbedder("no-such-model", 8)
    with pytest.raises(EmbedderProcessError, match=r"no-such-model\) exited with code 1 while starting"):
        bad.start()
    wrong_dim = ProcessEmbedder(FAKE_MODEL, 7)
    with pytest.raises(EmbedderModelError, match=r"gives \d+-dimensional vectors, 7 expected"):
        wrong_dim.start()
    assert wrong_dim._proc is None  # ended, not left running
    worker.start()
    proc = worker._proc
    worker.close()
    assert proc.poll() == 0  # ended by closing its input, not killed
    with pytest.raises(EmbedderProcessError, match="is closed"):
        worker.embed(["after close"])


def test_a_process_that_stops_speaking_the_protocol_is_killed_not_read_again(worker, monkeypatch):
    worker.start()
    first = worker._proc
    fd, real_read = first.stdout.fileno(), os.read
    with monkeypatch.context() as m:  # the child's answers arrive garbled
        m.setattr(os, "read", lambda f, n: b"?" * n if f == fd else real_read(f, n))
        with pytest.raises(EmbedderProcessError, match=r"exited with code -9 while answering"):
            worker.embed(["garbled"])
    assert first.poll() == -9 and worker._proc is None
    assert np.array_equal(worker.embed(["clean again"]), FakeEmbedder().embed(["clean again"]))


def test_a_hung_process_is_killed_after_the_timeout_and_the_next_call_starts_a_new_one():
    worker = ProcessEmbedder(FAKE_MODEL, FakeEmbedder().dim, timeout_s=1.0)
    try:
        worker.start()
        first = worker._proc
        os.kill(first.pid, signal.SIGSTOP)  # alive, but it will never answer
        started = time.monotonic()
        with pytest.raises(EmbedderProcessError, match=r"did not answer within 1 s while embedding; it was killed"):
            worker.embed(["hung"])
        assert 1.0 <= time.monotonic() - started < 10
        assert first.wait(timeout=5) == -signal.SIGKILL and worker._proc is None
        assert np.array_equal(worker.embed(["answered"]), FakeEmbedder().embed(["answered"]))
    finally:
        worker.close()
    with pytest.raises(ValueError, match="timeout_s must be > 0 seconds, got 0"):
        ProcessEmbedder(FAKE_MODEL, 8, timeout_s=0)
