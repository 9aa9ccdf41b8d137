from __future__ import annotations

import pytest

from lab.chunking import chunk_text
from lab.config import ChunkConfig
from lab.embed.fake import WordTokenizer

TOK = WordTokenizer()


def words(n: int) -> str:
    return " ".join(f"w{i}" for i in range(n))


def test_empty_content_is_one_empty_chunk():
    chunks = chunk_text("", TOK, ChunkConfig(size=5, overlap=2))
    assert len(chunks) == 1 and chunks[0].text == "" and chunks[0].n_tokens == 0


def test_one_token():
    chunks = chunk_text("hello", TOK, ChunkConfig(size=5, overlap=2))
    assert [c.text for c in chunks] == ["hello"]


def test_exactly_the_window_stays_one_chunk():
    chunks = chunk_text(words(5), TOK, ChunkConfig(size=5, overlap=2))
    assert len(chunks) == 1 and chunks[0].n_tokens == 5


def test_one_over_the_window_makes_two_overlapping_chunks():
    chunks = chunk_text(words(6), TOK, ChunkConfig(size=5, overlap=2))
    assert [c.text for c in chunks] == ["w0 w1 w2 w3 w4", "w3 w4 w5"]
    assert [c.n_tokens for c in chunks] == [5, 3]


def test_windows_step_by_size_minus_overlap_and_cover_everything():
    content = words(23) + "."
    chunks = chunk_text(content, TOK, ChunkConfig(size=10, overlap=4))
    starts = [c.text.split()[0] for c in chunks]
    assert starts == ["w0", "w6", "w12", "w18"]
    assert chunks[-1].text.endswith("w22.")  # trailing punctuation is kept
    assert chunks[0].start_char == 0 and chunks[-1].end_char == len(content)
    for c in chunks:
        assert content[c.start_char:c.end_char] == c.text


def test_title_and_tags_are_prepended_to_every_chunk():
    chunks = chunk_text(words(12), TOK, ChunkConfig(size=10, overlap=2), title="Deploy notes", tags=["ops", "k8s"])
    assert len(chunks) == 2
    for c in chunks:
        assert c.text.startswith("Deploy notes\ntags: ops, k8s\n")


def test_header_can_be_turned_off():
    chunks = chunk_text("x", TOK, ChunkConfig(prepend_title_tags=False), title="T", tags=["a"])
    assert chunks[0].text == "x"


def test_unicode_is_sliced_on_token_boundaries(real_embedder):
    content = "Café naïve résumé — 東京 で 会議 🙂 " * 40
    chunks = chunk_text(content, real_embedder.tokenizer, ChunkConfig(size=50, overlap=10))
    assert len(chunks) > 2
    for c in chunks:
        assert content[c.start_char:c.end_char] == c.text
        assert c.n_tokens <= 50
    # every character of the content is in some chunk
    covered = set()
    for c in chunks:
        covered.update(range(c.start_char, c.end_char))
    assert covered == set(range(len(content)))


@pytest.mark.parametrize("n", [349, 350, 351, 900])
def test_real_tokenizer_windows(real_embedder, n):
    content = " ".join(["memory"] * n)
    chunks = chunk_text(content, real_embedder.tokenizer, ChunkConfig())
    expected = 1 if n <= 350 else 1 + -(-(n - 350) // 200)
    assert len(chunks) == expected


# ------------------------------------------------------------------ index-time context
def _episode(pipe_, ids, start=0):
    from datetime import datetime, timedelta, timezone

    t0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
    texts = {"t1": "Did you go to the pottery class?", "t2": "Yes, I loved it.", "t3": "Great to hear.",
             "t4": "Next week again."}
    return [{"id": i, "content": texts[i], "created_at": (t0 + timedelta(minutes=n)).isoformat(),
             "metadata": {"episode": "s1"}} for n, i in enumerate(ids, start=start)]


def _indexed(p, memory_id, view=""):
    """The texts indexed for a memory in one index view ("" the main one, "plain" without context)."""
    import polars as pl

    from lab.store.records import chunk_view

    rows = p.store.chunks("ns").filter(pl.col("memory_id") == memory_id)
    return [t for c, t in rows.select("chunk_id", "text").iter_rows() if chunk_view(c) == view]


def test_context_turns_index_earlier_turns_of_the_episode_but_return_the_memory(tmp_path):
    from lab.config import ChunkConfig, SaveConfig
    from lab.config import SearchConfig
    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline

    cfg = SaveConfig(chunk=ChunkConfig(context_turns=1, time_in_text=True))
    with Pipeline.open(tmp_path / "a", cfg, embedder=FakeEmbedder(), create=True) as p:
        p.save_many(_episode(p, ["t1", "t2", "t3"]), namespace="ns", progress=False)
        assert _indexed(p, "t2") == ["8 May 2023\nDid you go to the pottery class?\nYes, I loved it."]
        assert _indexed(p, "t1") == ["8 May 2023\nDid you go to the pottery class?"]
        # a word only in t1 now also finds t2 (its reply), and the result is t2's own content
        res = p.search("pottery", "ns", 5, config=SearchConfig(signals=("lexical",)))
        hits = {r.memory_id: r.content for r in res}
        assert hits["t2"] == "Yes, I loved it."
        # saved alone later, a turn gets the same context as in a batch (earlier turns come from the store)
        p.save_many(_episode(p, ["t4"], start=3), namespace="ns", progress=False)
        assert _indexed(p, "t4") == ["8 May 2023\nGreat to hear.\nNext week again."]
        # an update re-indexes with its context, once
        p.update("t2", content="Yes, I loved it a lot.")
        assert _indexed(p, "t2") == ["8 May 2023\nDid you go to the pottery class?\nYes, I loved it a lot."]
    with Pipeline.open(tmp_path / "b", embedder=FakeEmbedder(), create=True) as p:  # default: 2 turns, no date
        p.save_many(_episode(p, ["t1", "t2", "t3", "t4"]), namespace="ns", progress=False)
        assert _indexed(p, "t4") == ["Yes, I loved it.\nGreat to hear.\nNext week again."]
        p.save_many([{"id": "solo", "content": "No episode here."}], namespace="ns", progress=False)
        assert _indexed(p, "solo") == ["No episode here."]
    off = SaveConfig(chunk=ChunkConfig(context_turns=0))
    with Pipeline.open(tmp_path / "c", off, embedder=FakeEmbedder(), create=True) as p:
        p.save_many(_episode(p, ["t1", "t2"]), namespace="ns", progress=False)
        assert _indexed(p, "t2") == ["Yes, I loved it."]


def test_context_turns_is_validated():
    from lab.config import ChunkConfig
    from lab.errors import ValidationError

    with pytest.raises(ValidationError, match="context_turns"):
        ChunkConfig(context_turns=-1)


def test_a_store_recorded_before_context_turns_existed_keeps_indexing_without_context(tmp_path):
    import json

    from lab.embed.fake import FakeEmbedder
    from lab.pipeline import Pipeline
    from lab.store.layout import info_path

    with Pipeline.open(tmp_path / "old", embedder=FakeEmbedder(), create=True):
        pass
    meta = info_path(tmp_path / "old")
    info = json.loads(meta.read_text())
    del info["save_config"]["chunk"]["context_turns"]  # as written by earlier versions
    meta.write_text(json.dumps(info))
    with Pipeline.open(tmp_path / "old", embedder=FakeEmbedder()) as p:
        assert p.config.chunk.context_turns == 0
        p.save_many(_episode(p, ["t1", "t2"]), namespace="ns", progress=False)
        assert _indexed(p, "t2") == ["Yes, I loved it."]
