"""mkdocs hooks: the results page is generated from the figure files before every build."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def on_pre_build(config, **kwargs) -> None:
    spec = importlib.util.spec_from_file_location("gen_results", Path(__file__).with_name("gen_results.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main()
