"""The notebooks' charts and tables from lab.tune.views, checked as Vega-Lite specs and frames."""
from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import polars as pl

from lab.tune import views

ROOT = Path(__file__).resolve().parent.parent


def sweep_fixture() -> dict:
    rows = [{"trial": i, "fusion.k": k, "fusion.weights.vector": w, "feasible": True, "error": None,
             "tune/recall@10": 0.5 + 0.01 * i + 1e-9, "validation/recall@10": 0.45 + 0.01 * i}
            for i, (k, w) in enumerate((k, w) for k in (1.0, 60.0) for w in (0.3, 0.7))]
    return {"summary": {"objective": "recall@10"}, "results": pl.DataFrame(rows), "assembly": pl.DataFrame(),
            "source": "sweep folder runs/sweeps/t"}


def test_the_sweep_heatmap_has_axes_a_browser_can_read():
    spec = views.sweep_heatmap(sweep_fixture(), "fusion.weights.vector").to_dict()
    enc = spec["encoding"]
    # a dot in a field name is a nested field to Vega-Lite: the chart was blank with 'undefined' axes
    fields = [enc["x"]["field"], enc["y"]["field"], enc["color"]["field"]]
    assert all("." not in f for f in fields) and enc["x"]["title"] == "weight: vector" and enc["y"]["title"] == "RRF k"
    values = spec["datasets"][spec["data"]["name"]]
    assert len(values) == 4 and all(set(fields) <= set(v) for v in values)
    assert json.dumps(spec).count("undefined") == 0


def test_the_top_table_prints_four_decimals():
    top = views.top_configurations(sweep_fixture(), 3)
    assert top["tune/recall@10"].to_list() == [0.53, 0.52, 0.51] and top["gap"].to_list() == [0.05, 0.05, 0.05]


def test_a_question_header_adds_no_period_after_the_question_s_own_mark():
    import marimo as mo

    spec = importlib.util.spec_from_file_location("tune_notebook", ROOT / "notebooks" / "tune.py")
    notebook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(notebook)
    session = types.SimpleNamespace(baseline=None, ranked=lambda qid, numbers: pl.DataFrame({"memory_id": ["m1"]}))
    stub_views = types.SimpleNamespace(rounded=lambda frame: frame)

    def header(question: str) -> str:
        selected = types.SimpleNamespace(value=pl.DataFrame({"qid": ["q1"], "question": [question]}))
        shown, _ = notebook.ranked_lists_of_one_question.run(change_table=selected, mo=mo, numbers=None,
                                                             session=session, views=stub_views)
        return shown.text

    assert "two days ago? Each memory" in header("What bug got fixed two days ago?")  # once: '...ago?. Each'
    assert "the pool size. Each memory" in header("the pool size")
