"""A writer killed in the middle of an ingest leaves the store at a committed, readable version."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import polars as pl

from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline

WRITER = textwrap.dedent("""
    import sys
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    pipe = Pipeline.open(sys.argv[1], embedder=FakeEmbedder(), create=True)
    i = int(sys.argv[2])
    while True:  # one memory per batch: as many commit boundaries as possible to die between
        pipe.save_many([{"namespace": "n", "content": f"memory {i} " + "word " * (i % 50)}], progress=False)
        i += 1
""")


def test_killed_writer_leaves_a_readable_consistent_store(tmp_path):
    store = tmp_path / "s"
    start = 0
    log = store / "tables" / "memories" / "_delta_log"
    for round_, delay in enumerate((0.0, 0.013, 0.031)):
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(start)])
        # wait until this writer has committed a few memories, then kill it at an odd moment
        target = (len(list(log.glob("*.json"))) if log.exists() else 0) + 5
        deadline = time.monotonic() + 60
        while (not log.exists() or len(list(log.glob("*.json"))) < target) and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        pipe = Pipeline.open(store, embedder=FakeEmbedder())
        memories = pipe.store.memories()
        assert memories.height > 0, f"round {round_}: the writer committed nothing"
        assert memories["id"].n_unique() == memories.height
        # every visible memory has its chunks; orphan chunks (if any) stay invisible
        with_chunks = set(pipe.store.chunks("n")["memory_id"].to_list())
        assert set(memories["id"].to_list()) == with_chunks
        hits = pipe.search("memory", "n", k=3)
        assert len(hits) == 3
        start = memories.height + 1000 * (round_ + 1)
        pipe.close()
    final = Pipeline.open(store, embedder=FakeEmbedder())
    report = final.compact()
    assert final.store.memories().height == final.store.chunks("n").select(pl.col("memory_id").n_unique()).item()
    assert report["indexes_rebuilt"] + report["indexes_kept"] == ["n"]
    assert len(final.search("memory", "n", k=3)) == 3
