"""Each settings input is declared once (lab.fields): its bounds, choices and doc live on the
config field, and the configs, the server's settings, the workspace, sweep files, the command line
and the served request models all check against that one declaration."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest

from lab import config as C
from lab.errors import ValidationError
from lab.fields import RULE, coerce, from_dict, kind_at, rule, rule_at
from lab.serve.settings import Settings, load_settings
from lab.tune.params import PARAMS
from lab.tune.spec import parse_spec
from lab.workspace import Workspace

# every settings object, with the prefix its fields are named by in errors
DECLARED = [(C.ChunkConfig, "chunk."), (C.EmbedConfig, "embed."), (C.VectorIndexConfig, "index.vector."),
            (C.LexicalIndexConfig, "index.lexical."), (C.IndexConfig, "index."), (C.FilterConfig, "filters."),
            (C.GraphConfig, "graph."), (C.AnalysisConfig, "analysis."), (C.FusionConfig, "fusion."),
            (C.SearchConfig, ""), (C.AssembleConfig, "assemble."), (Settings, ""), (Workspace, "")]


def _outside(r) -> list:
    """Values the rule refuses: just past each bound, NaN, the infinities, a string."""
    bad: list = [math.nan, math.inf, -math.inf, "3"]
    if r.low is not None:
        bad.append(r.low - 1)
    if r.above is not None:
        bad.append(r.above)
    if r.high is not None:
        bad.append(r.high + 1)
    return bad


@pytest.mark.parametrize("cls,prefix", DECLARED, ids=[c.__name__ for c, _ in DECLARED])
def test_every_declared_bound_and_choice_is_enforced_naming_its_field(cls, prefix):
    for f in dataclasses.fields(cls):
        r = f.metadata.get(RULE)
        assert r is not None and r.doc, f"{cls.__name__}.{f.name} has no declared rule with a one-line doc"
        if r.choices is not None:
            with pytest.raises(ValidationError, match=re.escape(f"{f.name} must be {r.allowed()}, got 'zzz'")) as refused:
                cls(**{f.name: "zzz"})
            assert refused.value.field == prefix + f.name
        elif r.numeric:
            mapping = isinstance(getattr(cls(), f.name), dict)
            for value in _outside(r):
                given = {"some_key": value} if mapping else value
                where = f"{prefix}{f.name}.some_key" if mapping else prefix + f.name
                with pytest.raises(ValidationError, match=f"must be a finite number {r.allowed()}") as refused:
                    cls(**{f.name: given})
                assert refused.value.field == where, (cls.__name__, f.name, value)


def test_sweep_parameters_take_their_kind_and_bounds_from_the_config_field():
    roots = {"search": C.SearchConfig(), "save": C.SaveConfig(), "assemble": C.AssembleConfig()}
    for name, p in PARAMS.items():
        root, _, rest = p.path.partition(".")
        value = roots[root]
        for step in rest.split("."):
            value = value.get(step) if isinstance(value, dict) else getattr(value, step)
        if value is not None:
            assert isinstance(value, p.kind), (name, p.kind, value)
    assert PARAMS["fusion.k"].rule == rule(C.FusionConfig, "k")
    assert PARAMS["fusion.weights.vector"].rule == rule(C.FusionConfig, "weights")  # a weight's is the dict's
    assert kind_at(C.SaveConfig, "index.lexical.stemmer") is str and kind_at(C.SaveConfig, "index.models") is tuple
    spec = {"name": "t", "dataset": "demo", "space": {"fusion.demote_factor": [1.5]}}
    with pytest.raises(ValidationError, match=r"space.fusion.demote_factor must be a finite number >= 0 and <= 1, "
                                              r"got 1.5") as refused:
        parse_spec(spec)
    assert refused.value.field == "space.fusion.demote_factor"
    assert rule_at(C.SearchConfig, "fusion.demote_factor").allowed() == ">= 0 and <= 1"


def test_text_values_are_coerced_by_the_field_type_and_errors_name_the_field_not_the_source():
    s = load_settings({"port": "9001", "rate": "2.5"}, env={"LAB_SERVE_AUTH": "off"})
    assert (s.port, s.rate, s.auth) == (9001, 2.5, "off")
    with pytest.raises(ValidationError, match=r"setting port from \$LAB_SERVE_PORT: '80.5' is not an integer") as bad:
        load_settings({}, env={"LAB_SERVE_PORT": "80.5"})
    assert bad.value.field == "port"
    w = Workspace.resolve(env={"LAB_WRITE_LOCK_TIMEOUT": "5", "LAB_STORE": "s"})
    assert (w.write_lock_timeout, str(w.store)) == (5.0, "s")
    with pytest.raises(ValidationError, match=r"write_lock_timeout from \$LAB_WRITE_LOCK_TIMEOUT must be a finite "
                                              r"number > 0, got -1.0") as bad:
        Workspace.resolve(env={"LAB_WRITE_LOCK_TIMEOUT": "-1"})
    assert bad.value.field == "write_lock_timeout"
    assert coerce(bool, "on", "x", text=True) is True
    with pytest.raises(ValidationError, match="x: expected true or false, got 'on'"):
        coerce(bool, "on", "x")  # a file's or a request's value keeps its own type


def test_config_errors_from_a_mapping_carry_the_dotted_field():
    for data, where in [({"fusion": {"kk": 1}}, "fusion.kk"), ({"fusion": {"k": "x"}}, "fusion.k"),
                        ({"graph": {"edge_weights": {"supersedes": -1}}}, "graph.edge_weights.supersedes"),
                        ({"signals": ["vector", "psychic"]}, "signals"),
                        ({"filters": {"since": "yesterday"}}, "filters.since"),
                        ({"fusion": {"weights": {"vector": 0, "lexical": 0}}}, "fusion.weights")]:
        with pytest.raises(ValidationError) as refused:
            from_dict(C.SearchConfig, data)
        assert refused.value.field == where, (data, refused.value.field, str(refused.value))


def test_serve_flags_take_help_choices_and_checks_from_the_settings_declarations(capsys):
    import argparse

    from lab.cli import build_parser, main

    serve = next(a for a in build_parser()._subparsers._group_actions[0].choices.items() if a[0] == "serve")[1]
    by_dest = {a.dest: a for a in serve._actions if isinstance(a, argparse.Action)}
    flagged = [f for f in dataclasses.fields(Settings) if f.name in by_dest]  # the rest: environment or file only
    assert len(flagged) == 20
    for f in flagged:
        r = f.metadata[RULE]
        flag = by_dest[f.name]
        assert r.doc in flag.help
        assert flag.choices == (list(r.choices) if r.choices else None)
        assert flag.type is None  # coerced by load_settings, the one place every source goes through
    assert main(["serve", "--port", "0"]) == 2
    assert "setting port from the command line must be a finite number >= 1 and <= 65535, got 0" in capsys.readouterr().err
