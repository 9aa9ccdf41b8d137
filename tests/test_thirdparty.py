"""The built-in third-party systems (each an optional extra; all installed under CI) through the
harness on the demo goldens: they save, search, map ids back and find a fresh memory, and each
run is logged to a real MLflow store (its settings as params)."""
from __future__ import annotations

import importlib.util
import os

import pytest

from lab.adapters.harness import evaluate_system
from lab.adapters.registry import BUILTIN, open_system, require_packages
from lab.errors import ValidationError
from conftest import demo_questions

THIRD_PARTY = ["txtai", "chroma", "mem0", "mempalace"]


def installed(name: str) -> bool:
    return all(importlib.util.find_spec(p) is not None for p in BUILTIN[name].needs)


@pytest.mark.slow
@pytest.mark.parametrize("name", THIRD_PARTY)
def test_each_system_runs_offline_on_the_demo_goldens(name, tmp_path):
    if not installed(name):
        if os.environ.get("CI") == "true":
            pytest.fail(f"system {name!r} is not installed under CI: .ci/setup installs the extra {BUILTIN[name].extra!r}")
        pytest.skip(f"the extra {BUILTIN[name].extra!r} is not installed")
    dataset = demo_questions(40)
    with open_system(name, tmp_path / name) as system:
        result = evaluate_system(system, dataset, progress=False)
    m = result.metrics
    # dense MiniLM retrieval on the demo goldens lands well above chance and below perfect
    assert 0.4 < m["metrics"]["recall@10"] < 1.0, m["metrics"]
    assert set(result.run["memory_id"]) <= {str(x["id"]) for x in dataset.memories}
    assert m["round_trip"]["found"], m["round_trip"]
    assert m["speed"]["ingest"]["memories_per_s"] > 0 and m["speed"]["search"]["p99_ms"] > 0
    if name == "mem0":
        assert "infer=False" in m["system"]["approximates"]
    from test_adapters_tracked import logged

    assert logged(result, dataset, tmp_path).metrics["recall_at_10"] == m["metrics"]["recall@10"]  # tracking on


def test_a_missing_system_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "txtai" else real(n, *a))
    with pytest.raises(ValidationError, match=r"needs the package 'txtai', which is not installed: pip install -e '.\[txtai\]'"):
        require_packages("txtai")
