"""The embedded demo set meets its spec; the LoCoMo reader reads the real file."""
from __future__ import annotations

import pytest

from datetime import timedelta

import polars as pl

from conftest import ROOT, require_dataset
from lab.embed.fake import FakeEmbedder
from lab.eval.locomo import load_conversations
from lab.pipeline import Pipeline
from lab.schema import MEMORY_TYPES


def test_demo_dataset_ingests_and_meets_its_spec(tmp_path):
    pipe = Pipeline.open(tmp_path / "s", embedder=FakeEmbedder(), create=True)
    report = pipe.ingest(ROOT / "datasets" / "demo", progress=False)
    assert len(report.created) >= 300 and report.duplicates == []
    mem = pipe.store.memories()
    assert set(mem["type"].unique()) == set(MEMORY_TYPES)
    assert mem["namespace"].n_unique() >= 2
    assert mem["created_at"].max() - mem["created_at"].min() >= timedelta(days=90)
    assert mem.filter(pl.col("type") == "anchor")["pinned"].all()
    assert mem.filter(pl.col("type") == "working").height >= 5
    edges = pipe.store.edges()
    assert report.edges == edges.height >= 50
    counts = dict(edges.group_by("relation").len().iter_rows())
    assert counts["supersedes"] >= 3 and counts["contradicts"] >= 2
    # a supersedes chain of length 3 exists: a -> b -> c
    sup = edges.filter(pl.col("relation") == "supersedes").select("src", "dst").rows()
    replaced = {dst: src for src, dst in sup}
    assert any(replaced.get(src) for src in replaced.values())
    pipe.close()


@pytest.mark.slow
def test_locomo_reader_on_the_real_file():
    path = require_dataset("locomo/locomo10-dev.json")
    convs = load_conversations(path)
    assert [c.sample_id for c in convs] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43"]
    turns = [t for c in convs for t in c.turns]
    assert len(turns) == 2760
    first = convs[0].turns[0]
    assert first["id"] == "conv-26:D1:1" and first["source"] == "D1:1"
    assert first["content"].startswith("Caroline: ")
    assert first["created_at"].isoformat() == "2023-05-08T13:56:00+00:00"
    # turns keep their order in time inside each conversation
    for conv in convs:
        times = [t["created_at"] for t in conv.turns]
        assert times == sorted(times)
    assert any("[shares an image:" in t["content"] for t in turns)
