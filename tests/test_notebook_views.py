"""The notebooks' charts and tables from lab.tune.views, checked as Vega-Lite specs and frames."""
from __future__ import annotations

import json

import polars as pl

from lab.tune import views


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
