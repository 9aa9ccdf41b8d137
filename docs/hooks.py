"""mkdocs hooks: the results page (from the figure files) and the settings reference (from the
declarations in lab.fields) are generated before every build."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def on_pre_build(config, **kwargs) -> None:
    for name in ("gen_results", "gen_settings"):
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.main()
