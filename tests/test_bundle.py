"""The one bundle definition (lab.bundle): written and read back equal, GO required to serve, a
newer format refused, and no other module spelling out the bundle's files."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.bundle import BUNDLE_FORMAT, read_bundle, require_go, write_bundle
from lab.config import AssembleConfig, ChunkConfig, SaveConfig
from lab.errors import ConflictError, NotFoundError, ValidationError
from lab.search.presets import resolve
from lab.serve.bundle import load_bundle

ROOT = Path(__file__).resolve().parent.parent


def test_a_bundle_round_trips_and_carries_its_format(tmp_path):
    search, assemble = resolve("lab"), AssembleConfig(budget=777)
    save = SaveConfig(chunk=ChunkConfig(context_turns=0))
    folder = write_bundle(tmp_path / "b", search, assemble, save, {"verdict": "GO", "run_id": "r1"})
    got = read_bundle(folder)
    assert (got.search, got.assemble, got.save) == (search, assemble, save)
    assert got.manifest["format"] == BUNDLE_FORMAT and got.verdict == "GO"
    served = load_bundle(folder)  # the server reads through it
    assert (served.search, served.assemble, served.save) == (search, assemble, save)
    # rewritten without index settings, the old save.json does not linger
    write_bundle(folder, search, assemble, None, {"verdict": "GO"})
    assert read_bundle(folder).save is None


def test_only_go_is_served_and_a_newer_format_is_refused(tmp_path):
    folder = write_bundle(tmp_path / "b", resolve("lab"), AssembleConfig(), None, {"verdict": "NO-GO"})
    with pytest.raises(ConflictError, match="verdict is 'NO-GO'"):
        require_go(read_bundle(folder), "b")
    with pytest.raises(ConflictError, match="not GO"):
        load_bundle(folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": BUNDLE_FORMAT + 1}))
    with pytest.raises(ValidationError, match=f"format {BUNDLE_FORMAT + 1}"):
        read_bundle(folder)
    with pytest.raises(NotFoundError, match="manifest.json is missing"):
        read_bundle(tmp_path / "nowhere")


def test_no_other_module_spells_out_the_bundle_files():
    files = re.compile(r"""["'](config|assemble|save)\.json["']""")
    # (lab/embed reads model folders, and a third-party adapter may export one, whose own config.json
    # is a transformers file, not a bundle's)
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "lab").rglob("*.py"))
                 if p.name != "bundle.py" or p.parent.name != "lab"
                 if p.parent.name not in ("embed", "thirdparty")
                 if files.search(p.read_text(encoding="utf-8"))]
    assert offenders == []
