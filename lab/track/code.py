"""lab's own code: the folder of the package (logged with a model) and the commit it runs from."""
from __future__ import annotations

import subprocess
from pathlib import Path


def git_commit() -> str | None:
    """The commit of the working tree lab runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def lab_code() -> str:
    """The folder of the ``lab`` package, logged with the model (MLflow puts it on the path at load)."""
    return str(Path(__file__).resolve().parents[1])  # lab/track/code.py -> lab/
