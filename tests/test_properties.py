"""hypothesis properties: what is saved is what is read back; ingest is idempotent."""
from __future__ import annotations

import json
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline
from lab.schema import MEMORY_TYPES

text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=200).filter(lambda s: s.strip())
tag = st.text(st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=10)
base = datetime(2025, 1, 1, tzinfo=timezone.utc)
when = st.integers(min_value=0, max_value=10**8).map(lambda s: base + timedelta(seconds=s))
json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
memory = st.fixed_dictionaries(
    {"content": text, "namespace": st.sampled_from(["ns1", "ns2"])},
    optional={
        "title": st.text(max_size=40),
        "tags": st.lists(tag, max_size=4, unique=True),
        "type": st.sampled_from(MEMORY_TYPES),
        "source": st.text(max_size=20),
        "created_at": when,
        "importance": st.floats(0, 1),
        "pinned": st.booleans(),
        "valid": st.booleans(),
        "access_count": st.integers(0, 1000),
        "metadata": st.dictionaries(st.text(max_size=8), json_value, max_size=4),
    },
)

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(memory, min_size=1, max_size=8))
def test_store_round_trip(records):
    with tempfile.TemporaryDirectory() as tmp:
        pipe = Pipeline.open(Path(tmp) / "s", embedder=FakeEmbedder(), create=True)
        report = pipe.save_many(records, progress=False)
        # de-duplicate the way the store does: first of each (namespace, content) wins
        firsts = {}
        for rec in records:
            firsts.setdefault((rec["namespace"], rec["content"]), rec)
        assert len(report.created) == len(firsts)
        reopened = Pipeline.open(Path(tmp) / "s", embedder=FakeEmbedder())
        for mem_id, rec in zip(report.created, firsts.values()):
            row = reopened.get(mem_id)
            assert row["content"] == rec["content"] and row["namespace"] == rec["namespace"]
            assert row["title"] == rec.get("title", "")
            assert row["tags"] == rec.get("tags", [])
            assert row["type"] == rec.get("type", "semantic")
            assert row["source"] == rec.get("source", "")
            assert row["created_at"] == rec.get("created_at", row["created_at"])
            assert row["importance"] == rec.get("importance", 0.5)
            assert row["valid"] == rec.get("valid", True)
            assert row["access_count"] == rec.get("access_count", 0)
            assert json.loads(row["metadata"]) == rec.get("metadata", {})


@SETTINGS
@given(st.lists(memory, min_size=1, max_size=8), st.integers(1, 3))
def test_ingest_is_idempotent(records, repeats):
    with tempfile.TemporaryDirectory() as tmp:
        pipe = Pipeline.open(Path(tmp) / "s", embedder=FakeEmbedder(), create=True)
        first = pipe.save_many(records, progress=False)
        version = pipe.store.version()
        for _ in range(repeats):
            again = pipe.save_many(records, progress=False)
            assert again.created == []
            assert set(again.duplicates) == set(first.created)
        assert pipe.store.version() == version  # nothing was written
        assert pipe.store.memories().height == len(first.created)
