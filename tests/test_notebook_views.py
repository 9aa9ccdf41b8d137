"""The notebooks' charts and tables from lab.notebook.views, checked as Vega-Lite specs and frames."""
from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import polars as pl

from lab.notebook import views

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


def notebook(name: str):
    """notebooks/NAME.py as a module: its named cells run alone (``cell.run(**inputs)``)."""
    spec = importlib.util.spec_from_file_location(f"{name}_notebook", ROOT / "notebooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_question_header_adds_no_period_after_the_question_s_own_mark():
    import marimo as mo

    tune = notebook("tune")
    session = types.SimpleNamespace(baseline=None, ranked=lambda qid, numbers: pl.DataFrame({"memory_id": ["m1"]}))
    stub_views = types.SimpleNamespace(memories_table=lambda frame: frame)

    def header(question: str) -> str:
        selected = types.SimpleNamespace(value=pl.DataFrame({"qid": ["q1"], "question": [question]}))
        shown, _ = tune.ranked_lists_of_one_question.run(change_table=selected, mo=mo, numbers=None,
                                                             session=session, views=stub_views)
        return shown.text

    assert "two days ago? Each memory" in header("What bug got fixed two days ago?")  # once: '...ago?. Each'
    assert "the pool size. Each memory" in header("the pool size")


# ---------------------------------------------------------------------------- notebook state (issue 47 #5)
def test_the_tune_notebook_says_where_it_saved_its_knobs_in_plain_words():
    import marimo as mo

    tune = notebook("tune")
    saved = Path(".lab/tune/current.yaml")
    session = types.SimpleNamespace(configure=lambda knobs: ("search", "assemble"), numbers=lambda s, a: "numbers",
                                    write_candidate=lambda search, assemble, path: saved)
    knob = types.SimpleNamespace(value=1.0)
    shown, defs = tune.current_knobs.run(TUNED=saved, boost=knob, budget=knob, critical=knob, method=knob, mo=mo,
                                         recency=knob, rrf_k=knob, session=session,
                                         weights=types.SimpleNamespace(value={"vector": 1.0}))
    assert defs["numbers"] == "numbers"
    # the cell showed the bare return value: PosixPath('.lab/tune/current.yaml')
    assert isinstance(shown, mo.Html) and "PosixPath" not in shown.text and str(saved) in shown.text


def test_a_ranked_list_shows_each_memory_s_text_beside_its_id():
    long = "Warden (auth): Warden is the authentication service. " * 4
    ranked = pl.DataFrame({"rank": [1, 2], "memory_id": ["m1", "m2"], "gold": [True, False], "score": [0.123456, 0.1],
                           "vector": [1, None], "lexical": [None, 3], "text": [long, "short"]})
    table = views.memories_table(ranked, width=40)
    assert table.columns == ["rank", "memory_id", "text", "gold", "score", "vector", "lexical"]
    assert table["text"].to_list() == [long[:39] + "…", "short"] and table["score"].to_list() == [0.1235, 0.1]


def test_the_live_query_table_shows_the_text_where_it_is_read():
    import marimo as mo

    tune = notebook("tune")
    hits = pl.DataFrame({"rank": [1], "memory_id": ["m1"], "score": [0.5], "vector": [1], "lexical": [2],
                         "text": ["OPS-2340 fixed: the SSO callback dropped the tenant's domain"]})
    session = types.SimpleNamespace(live_search=lambda text, namespace, search: hits)
    shown, _ = tune.live_query.run(mo=mo, query_box=types.SimpleNamespace(value="what bug got fixed"), search=None,
                                   session=session, space_pick=types.SimpleNamespace(value="atlas"), views=views)
    # behind every signal's rank the text was off the edge of the table: ids only on screen
    assert shown.data.columns[:3] == ["rank", "memory_id", "text"]


def test_a_question_with_two_gold_memories_is_one_row():
    misses = pl.DataFrame({"qid": ["q1", "q1", "q2"], "category": ["single", "single", "multi"],
                           "question": ["a?", "a?", "b?"], "memory_id": ["m1", "m2", "m9"],
                           "fused_rank": [12, None, 40], "vector": [3, None, None]})
    table = views.per_question(misses, ["memory_id", "fused_rank", "vector"])
    assert table.columns == misses.columns and table["qid"].to_list() == ["q1", "q2"]
    assert table.row(0) == ("q1", "single", "a?", "m1, m2", "12, –", "3, –")
    assert table.row(1) == ("q2", "multi", "b?", "m9", "40", "–")


def test_the_rescue_summary_names_what_it_counts():
    rescues = pl.DataFrame({"qid": ["q1", "q1", "q2", "q3"], "memory_id": ["m1", "m2", "m3", "m4"],
                            "rescue": ["semantic", "semantic", "semantic", "lexical"]})
    counts = views.rescue_counts(rescues)
    assert "len" not in counts.columns  # group_by().len() named its column `len`
    assert counts.rows() == [("lexical", 1, 1), ("semantic", 2, 3)]
    assert counts.columns == ["rescue", "questions", "gold memories"]
    assert views.rescue_counts(rescues.clear()).columns == counts.columns


def test_the_errors_notebook_analyses_the_preset_unless_asked(tmp_path, monkeypatch):
    """The tune notebook rewrites its knobs file with every slider move; the errors notebook took
    that file whenever it existed, so what it analysed depended on another page's last state."""
    import marimo as mo

    errors = notebook("errors")
    monkeypatch.chdir(tmp_path)
    tuned = tmp_path / ".lab" / "tune" / "current.yaml"
    tuned.parent.mkdir(parents=True)
    tuned.write_text("search: {}\n", encoding="utf-8")
    shown, defs = errors.configuration_source.run(mo=mo, started="the preset lab")
    assert defs["source"].value == "start"
    assert shown is defs["source"] and "the preset lab" in shown.text and "last saved knobs" in shown.text
