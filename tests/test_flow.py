"""The flow's stages return typed values the shells word; `lab eval`'s overrides merge in the flow;
the gate is judge, record and export composed by a short `run_gate`, holding the candidate against
the champion's bundle; the flow runs in the workspace it is given, never installing one."""
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
    from lab.flow import results as s
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


def test_no_library_code_installs_a_workspace():
    """The flow takes its workspace as an argument and passes paths down: below the edges nothing
    changes the process's workspace (`use`, `install`)."""
    # a Ray worker is an edge of its own: it installs the workspace its driver shipped with the task
    # (lab's units are handed their values; a user's own system class may still ask for it)
    edges = ("lab/cli/", "lab/serve/", "lab/workspace.py", "lab/engine/on_ray.py")
    bad = []
    for path in sorted((ROOT / "lab").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith(edges):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "lab.workspace":
                bad += [f"{rel}: imports {a.name}" for a in node.names if a.name in ("use", "install")]
            if (isinstance(node, ast.Attribute) and node.attr in ("use", "install")
                    and isinstance(node.value, ast.Name) and node.value.id == "workspace"):
                bad.append(f"{rel}:{node.lineno}: workspace.{node.attr}")
    assert bad == []


def test_the_stages_share_one_embedding_cache_unless_the_workspace_names_one(tmp_path):
    from lab.flow.layout import Layout
    from lab.workspace import Workspace

    layout = Layout(tmp_path / "dvc")
    assert layout.embedding_cache(Workspace()) == tmp_path / "dvc" / "embeddings"
    assert layout.embedding_cache(Workspace(embed_cache=tmp_path / "mine")) == tmp_path / "mine"


def test_the_export_stage_names_the_index_stages_store_from_the_layout_and_the_params(tmp_path):
    """No metrics file is read: the store is named by the prepared data and the index parameters."""
    from dataclasses import replace

    import pytest

    from lab.errors import ValidationError
    from lab.eval.goldens import load_dataset
    from lab.eval.tables import write_tables
    from lab.flow.layout import Layout, StageOptions
    from lab.flow.params import StageParams
    from lab.flow.stages import index_store, stage_export
    from lab.workspace import Workspace

    layout = Layout(tmp_path / "dvc")
    write_tables(load_dataset("demo"), layout.prepared)
    ctx0 = StageParams("demo", "lab", {"context_turns": 0}, "m", "s.yaml", "g.yaml")
    assert index_store(ctx0, layout).parent == layout.eval_root / "stores"
    assert index_store(ctx0, layout) != index_store(replace(ctx0, index={"context_turns": 1}), layout)
    # a gate report but no index stage store: refused, naming the stage to run
    (layout.gate / "m-best").mkdir(parents=True)
    (layout.gate / "m-best" / "gate.json").write_text("{}")
    with pytest.raises(ValidationError, match="is not built: run `lab stage index` first"):
        stage_export(ctx0, layout, StageOptions(Workspace()))


def test_the_champion_is_read_from_its_bundle(tmp_path):
    """The gate holds a candidate against what the champion's bundle says (as serving reads it):
    its configs, and the data each suite judged it on from the manifest's figures."""
    from lab.bundle import read_bundle, write_bundle
    from lab.config import AssembleConfig, ChunkConfig, SaveConfig
    from lab.gate.champion import Champion
    from lab.search.presets import resolve

    figures = {"demo": {"dataset": "demo", "dataset_fingerprint": "c1", "gold_fingerprint": "g1", "questions": 3}}
    save = SaveConfig(chunk=ChunkConfig(context_turns=0))
    folder = write_bundle(tmp_path / "b", resolve("lab"), AssembleConfig(budget=777), save,
                          {"verdict": "GO", "metrics": figures})
    champion = Champion.from_bundle(read_bundle(folder), {"version": "3", "run_id": "r1", "source": "models:/m-1"})
    assert (champion.version, champion.search, champion.save) == ("3", resolve("lab"), save)
    assert champion.data == {"demo": {"dataset": "demo", "corpus": "c1", "gold": "g1"}}
    assert champion.record["bundle"] == str(folder) and champion.record["assemble"]["budget"] == 777
    # a report's record of it reads back (gate.json keeps no search config: that is in the bundle)
    again = Champion.from_record(champion.record)
    assert (again.version, again.save, again.data, again.search) == ("3", save, champion.data, None)
