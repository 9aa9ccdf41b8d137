"""Two writer processes and a reader on one store: nothing acknowledged is lost or unfindable,
nothing is stored twice, and the store checks clean afterwards."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import polars as pl

from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline

WRITER = textwrap.dedent("""
    import json, sys
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    store, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pipe = Pipeline.open(store, embedder=FakeEmbedder())
    if name == "alpha":  # alpha's index is loaded (saves fold into it); beta's loads at each flush
        pipe.search("warm up", "shared", k=1)
    for i in range(n):
        # the shared namespace gets the same contents from both writers (de-duplication races),
        # and contents of its own; the writer's own namespace only its own
        ns, content = (("shared", f"common fact number {i // 2}") if i % 3 == 0 else
                       ("shared", f"{name} says fact {i}") if i % 3 == 1 else (name, f"{name} private note {i}"))
        report = pipe.save(content, namespace=ns, title="")
        stored = report.created[0] if report.created else report.duplicates[0]
        print(json.dumps([ns, content, stored]), flush=True)
        if i % 7 == 0 and name == "alpha":
            pipe.search(content, ns, k=3)
        if i % 5 == 4:
            pipe.writer.flush()  # index snapshots are saved while the other writer commits
    pipe.close()
""")

READER = textwrap.dedent("""
    import sys, time
    from lab.embed.fake import FakeEmbedder
    from lab.retriever import Retriever
    end = time.monotonic() + float(sys.argv[2])
    n = 0
    with Retriever.open(sys.argv[1], embedder=FakeEmbedder()) as r:
        while time.monotonic() < end:
            r.search("fact", "shared", k=5)
            n += 1
    print(n)
""")


def test_two_writers_and_a_reader_lose_nothing_and_store_nothing_twice(tmp_path):
    store = tmp_path / "s"
    with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("seed memory", namespace="shared")
    # beta stops early: alpha's last saves and snapshot must still hold every chunk beta committed
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(store), name, n], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for name, n in (("alpha", "60"), ("beta", "30"))]
    reader = subprocess.Popen([sys.executable, "-c", READER, str(store), "8"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    acked = []
    for proc in writers:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        acked += [json.loads(line) for line in out.splitlines()]
    out, err = reader.communicate(timeout=600)
    assert reader.returncode == 0, err[-3000:]
    assert int(out.split()[-1]) > 0
    assert len(acked) == 90

    with Pipeline.open(store, embedder=FakeEmbedder()) as pipe:
        memories = pipe.store.memories()
        # de-duplication held across processes: each content once per namespace, ids and chunk ids unique
        assert memories.select("namespace", "content").is_duplicated().sum() == 0
        assert memories["id"].n_unique() == memories.height
        chunks = pipe.store.chunks()
        assert chunks["chunk_id"].n_unique() == chunks.height
        # both writers were told the same id for the same content
        by_content: dict[tuple[str, str], set[str]] = {}
        for ns, content, stored in acked:
            by_content.setdefault((ns, content), set()).add(stored)
        assert all(len(ids) == 1 for ids in by_content.values())
        # the saved index snapshots hold exactly the store's visible chunks (another writer's included)
        for ns in pipe.store.namespaces():
            idx = pipe.index(ns)
            live = {c for c, alive in zip(idx.chunk_ids, idx.live) if alive}
            assert live == set(pipe.store.chunks(ns)["chunk_id"].to_list()), ns
        # every acknowledged memory is stored and found by its own text
        ids = set(memories["id"].to_list())
        lost = [a for a in acked if a[2] not in ids]
        assert not lost, lost[:3]
        unfindable = [(ns, c) for (ns, c), stored in by_content.items()
                      if next(iter(stored)) not in [h.memory_id for h in pipe.search(c, ns, k=5)]]
        assert not unfindable, unfindable[:3]
    # the seed, the common facts (alpha's 20 include beta's 10) and each writer's own
    assert memories.filter(pl.col("namespace") == "shared").height == 1 + 20 + 20 + 10
    from lab.write.check import check_store

    assert check_store(store).problems == []  # `lab store check` is clean


def test_a_writer_folds_in_what_another_writer_committed_before_its_own_commit(tmp_path):
    store = tmp_path / "s"
    with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as p:
        p.save("seed memory", namespace="n")
    a = Pipeline.open(store, embedder=FakeEmbedder())
    b = Pipeline.open(store, embedder=FakeEmbedder())  # a second writer, as another process would be
    a.search("seed", "n", k=1)  # a's index is loaded
    zebra = b.save("beta wrote this about zebras", namespace="n").created[0]
    a.save("alpha wrote this about lions", namespace="n")  # lands after b's commit
    a.close()
    b.close()
    with Pipeline.open(store, embedder=FakeEmbedder()) as fresh:
        idx = fresh.index("n")
        assert zebra in {m for m, alive in zip(idx.memory_of, idx.live) if alive}
        assert fresh.search("beta wrote this about zebras", "n", k=1)[0].memory_id == zebra


def test_the_same_content_saved_by_two_writers_at_once_is_stored_once(tmp_path):
    import threading

    store = tmp_path / "s"
    Pipeline.open(store, embedder=FakeEmbedder(), create=True).close()
    writers = [Pipeline.open(store, embedder=FakeEmbedder()) for _ in range(2)]
    got: list[list[str]] = [[], []]

    def save(w: int, barrier: threading.Barrier, content: str) -> None:
        barrier.wait()
        report = writers[w].save(content, namespace="n")
        got[w].append((report.created or report.duplicates)[0])

    for i in range(8):
        barrier = threading.Barrier(2)
        threads = [threading.Thread(target=save, args=(w, barrier, f"the same fact {i}")) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    memories = writers[0].store.memories()
    assert memories.height == 8 and got[0] == got[1]
    assert writers[0].store.chunks()["chunk_id"].is_duplicated().sum() == 0
    writers[1].delete(got[0][0])  # a soft delete of such an id works (it failed on duplicate chunk ids)
    for w in writers:
        w.close()


def test_an_index_is_never_stamped_with_commits_whose_chunks_it_did_not_read(tmp_path):
    from lab.retriever import Retriever

    store = tmp_path / "s"
    with Pipeline.open(store, embedder=FakeEmbedder(), create=True) as p:
        p.save("seed memory about rivers", namespace="n")
    writer = Pipeline.open(store, embedder=FakeEmbedder())
    reader = Retriever.open(store, embedder=FakeEmbedder())
    chunks_table = reader.store._chunks
    read_chunks = chunks_table.frame
    landed = []

    def save_in_between():  # another process's whole save lands after the reader read memories
        if not landed:
            landed.append(writer.save("late memory about volcanoes", namespace="n").created[0])
        return read_chunks()

    chunks_table.frame = save_in_between
    reader.search("rivers", "n", k=1)
    chunks_table.frame = read_chunks
    # the reader's index must know it has not seen the late memory, and catch up on the next search
    reader.search("late memory about volcanoes", "n", k=2)
    idx = reader.index("n")
    assert landed[0] in {m for m, alive in zip(idx.memory_of, idx.live) if alive}
    writer.close()
    reader.close()


def test_a_failure_while_taking_the_lock_leaves_it_free(tmp_path, monkeypatch):
    from lab.errors import StoreError
    from lab.store.store import Store

    root = tmp_path / "s"
    Pipeline.open(root, embedder=FakeEmbedder(), create=True).close()
    one, other = Store.open(root), Store.open(root)

    def broken():
        raise StoreError("its Delta log cannot be read")

    monkeypatch.setattr(one._edges, "hold", broken)
    try:
        with one.write_lock():
            pass
    except StoreError:
        pass
    with other.write_lock(timeout=2):  # would time out (ConflictError) if the failed hold kept the lock
        pass
    assert not one._memories._held


def test_a_store_under_a_path_with_spaces_and_accents(tmp_path):
    from lab.write.check import check_store

    root = tmp_path / "my store é" / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        for i in range(3):
            pipe.save(f"memory number {i}", namespace="n")
        assert pipe.store.memories().height == 3
    assert check_store(root).problems == []
