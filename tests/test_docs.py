"""The README is a front page (the two commands first, short), and the manual's results page is
generated from the files that hold the figures: every results file and regression condition."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("gen_results", ROOT / "docs" / "gen_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_starts_with_the_two_commands_and_stays_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").split("\n")
    assert len(lines) <= 150
    # the main job's light install first, then the tests' full one, which CI runs
    assert lines[3].startswith("bash .ci/setup --main && .venv/bin/lab demo ")
    assert lines[4].startswith("bash .ci/setup && .venv/bin/python -m pytest -q")
    assert "bash .ci/setup && .venv/bin/python -m pytest -q" in (ROOT / ".ci" / "run").read_text()
    assert "--main) MAIN_ONLY=1" in (ROOT / ".ci" / "setup").read_text()


def test_the_results_page_is_generated_from_every_figure_file(tmp_path):
    page = _generator().render()
    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        assert f"`benchmarks/results/{path.name}`" in page
    for condition in yaml.safe_load((ROOT / "goldens" / "regressions.yaml").read_text())["conditions"]:
        assert condition["name"] in page
        for value in condition["expected"].values():
            assert str(value) in page  # the expected figure itself, as the file has it


def test_a_figure_changed_in_its_file_changes_the_page(tmp_path, monkeypatch):
    gen = _generator()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "goldens").mkdir()
    (tmp_path / "goldens" / "regressions.yaml").write_text(yaml.safe_dump({"conditions": [
        {"name": "a condition", "dataset": "demo", "preset": "lab", "expected": {"recall@10": 0.1234}}]}))
    (results / "toy.json").write_text(json.dumps({"benchmark": "toy", "machine": "here", "speed": {"p99_ms": 12.5}}))
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    page = gen.render()
    assert "| speed.p99_ms | 12.5 |" in page and "recall@10 0.1234" in page
    (results / "toy.json").write_text(json.dumps({"benchmark": "toy", "machine": "here", "speed": {"p99_ms": 9.75}}))
    assert "| speed.p99_ms | 9.75 |" in gen.render()


def test_the_models_figures_are_tables_that_follow_their_file(tmp_path, monkeypatch):
    gen = _generator()
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "goldens").mkdir()
    (tmp_path / "goldens" / "regressions.yaml").write_text(yaml.safe_dump({"conditions": []}))
    row = {"lab": {"recall@10": 0.8157, "ndcg@10": 0.6004, "ci95": {"recall@10": [0.79, 0.83]}},
           "vector": {"recall@10": 0.5281, "ndcg@10": 0.3395}}
    data = {"benchmark": "models", "machine": "here",
            "quality": {"locomo": {"minilm": row, "e5": {**row, "lab_vs_minilm": {"recall@10": {"delta": 0.0077,
                                                                                             "p": 0.012}}}}},
            "speed": {"e5": {"passages_per_s_short": 19.7, "passages_per_s_long": 1.7, "model_mb": 71.9,
                             "query_ms_one_thread": {"p50_ms": 18.4, "p99_ms": 26.7}}}}
    (results / "models.json").write_text(json.dumps(data))
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    page = gen.render()
    assert "| e5 | 0.8157 [0.7900, 0.8300] | 0.6004 | +0.0077 (0.012) | 0.5281 | 0.3395 |" in page
    assert "| e5 | 19.7 | 1.7 | 18.4 / 26.7 | 71.9 |" in page
    data["speed"]["e5"]["passages_per_s_short"] = 21.5
    (results / "models.json").write_text(json.dumps(data))
    assert "| e5 | 21.5 | 1.7 |" in gen.render()


def test_the_settings_page_lists_every_declared_setting_with_its_range(monkeypatch):
    """docs/settings.md is generated from lab.fields' declarations: a bound changed on a config
    field changes the page."""
    import dataclasses

    from lab import config as C
    from lab.fields import RULE, Rule

    spec = importlib.util.spec_from_file_location("gen_settings", ROOT / "docs" / "gen_settings.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    page = gen.render()
    assert "| `fusion.k` | float | `60.0` | >= 0 | the RRF constant |" in page
    assert "| `assemble.budget` | int | `2000` | >= 1 and <= 1000000 |" in page
    assert "| `port` | int | `8080` | >= 1 and <= 65535 |" in page
    for _, prefix, cls in gen._sections():
        for f in dataclasses.fields(cls):
            assert f"| `{prefix}{f.name}` |" in page
    fields = {f.name: f for f in dataclasses.fields(C.FusionConfig)}
    monkeypatch.setattr(fields["k"], "metadata", {RULE: Rule(low=0, high=500, doc="the RRF constant")})
    assert "| `fusion.k` | float | `60.0` | >= 0 and <= 500 | the RRF constant |" in gen.render()


def test_the_manual_loads_no_web_fonts_so_it_reads_the_same_offline():
    # mkdocs-material links Google's font servers on every page unless its font is turned off
    theme = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["theme"]
    assert theme["name"] == "material" and theme.get("font") is False


def test_the_serving_page_says_the_api_docs_page_works_offline():
    from lab.serve.routes import docs_assets

    # lab serve serves Swagger UI's files itself (routes.document_routes), so /docs needs no CDN
    assert (Path(docs_assets()) / "swagger-ui-bundle.js").is_file()
    row = next(line for line in (ROOT / "docs" / "serving.md").read_text(encoding="utf-8").split("\n")
               if "`GET /docs`" in line)
    assert "CDN" not in row and "works offline" in row
