"""The flow's stages return typed values the shells word; `lab eval`'s overrides merge in the flow;
the gate is judge, record and export composed by a short `run_gate`."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_run_gate_only_composes_judge_record_and_export():
    from lab.gate import run

    source = inspect.getsource(run.run_gate)
    assert len(source.splitlines()) < 40
    calls = {n.func.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"judge", "record", "export_bundle"} <= calls


def test_no_dict_crosses_from_the_flow_to_the_shells():
    """Every public function of lab/flow returns a typed value, never a bare dict."""
    bad = []
    for path in sorted((ROOT / "lab" / "flow").glob("*.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and node.returns is not None:
                if "dict[" in ast.unparse(node.returns):
                    bad.append(f"{path.name}:{node.name} -> {ast.unparse(node.returns)}")
    assert bad == []


def test_stage_results_are_worded_by_the_shell():
    from lab.cli.stage import describe
    from lab.flow import stages as s
    from lab.gate.report import Exported

    assert describe(s.Prepared("demo", 3, 2, Path("p"))) == "demo: 3 memories, 2 questions -> p"
    assert describe(s.Indexed(Path("st"))) == "store st"
    assert describe(s.CandidatesMade(10, "lab", 0.5)) == "10 candidate rows; lab recall@10 0.5000"
    assert describe(s.Swept("ndcg@10", 0.25, 0.125, Path("b.yaml"))) == (
        "best ndcg@10 0.2500 on tune, 0.1250 on validation -> b.yaml")
    done = Exported("m", "2", "models:/m@champion", "runs:/x", True, "/abs/b")
    assert describe(s.ExportedModel("m", done, Path("b"))) == (
        "exported m version 2 (the same bundle as before: not registered again) -> b")


def test_a_candidate_files_settings_take_one_field_overrides(tmp_path):
    from lab.eval.runner import EvalOptions
    from lab.flow.evaluate import EvalCandidate, Overrides, plan

    path = tmp_path / "cand.yaml"
    path.write_text(yaml.safe_dump({"name": "c", "save": {"chunk": {"context_turns": 0}},
                                    "assemble": {"budget": 777, "counter": "exact"}}))
    kept = plan(EvalCandidate(file=path), Overrides(), EvalOptions(budget=2000))
    assert kept.save.chunk.context_turns == 0 and kept.options.budget == 777
    assert kept.options.assemble.counter == "exact" and [c.name for c in kept.configs] == ["c"]
    over = plan(EvalCandidate(file=path), Overrides(context_turns=1, time_in_text=True, budget=0, counter="estimate"),
                EvalOptions(budget=2000))
    assert (over.save.chunk.context_turns, over.save.chunk.time_in_text) == (1, True)
    assert over.options.budget is None and over.options.assemble.counter == "estimate"
    presets = plan(EvalCandidate(presets=("lab", "vector")), Overrides(), EvalOptions(budget=2000))
    assert [c.name for c in presets.configs] == ["lab", "vector"] and presets.options.budget == 2000
