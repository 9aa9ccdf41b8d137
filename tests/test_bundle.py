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


def test_a_packed_store_travels_with_the_bundle_and_an_unreachable_one_is_refused_by_name(tmp_path):
    from lab.bundle import pack_store

    store = tmp_path / "judged"
    (store / "tables").mkdir(parents=True)
    (store / "lab-store.json").write_text("{}")
    (store / "tables" / "part.parquet").write_bytes(b"x" * 100)
    (store / ".lab-write.lock").write_text("")
    small = tmp_path / "small"
    record = pack_store(small, store, "3")
    write_bundle(small, resolve("lab"), AssembleConfig(), None, {"verdict": "GO", "store": record})
    assert read_bundle(small).store_path() == small / "store"  # read from inside the bundle
    assert not (small / "store" / ".lab-write.lock").exists()  # process state is not packed

    big = tmp_path / "big"
    record = pack_store(big, store, "3", limit=10)  # over the limit: referenced, not packed
    write_bundle(big, resolve("lab"), AssembleConfig(), None, {"verdict": "GO", "store": record})
    assert "packed" not in record and read_bundle(big).store_path() == store.resolve()
    store.rename(tmp_path / "moved")
    with pytest.raises(NotFoundError, match=r"not reachable: file://.*/judged \(pinned version 3\)"):
        read_bundle(big).store_path()


def test_a_bundle_folder_named_bundle_is_named_by_its_gate_run_and_never_by_its_path(tmp_path):
    # `lab gate --export` writes runs/gate/GATE-RUN/bundle: "bundle bundle" said nothing
    exported = write_bundle(tmp_path / "lab-memory-demo-best" / "bundle", resolve("lab"), AssembleConfig(), None,
                            {"verdict": "GO"})
    assert load_bundle(exported).source == "bundle lab-memory-demo-best"
    named = write_bundle(tmp_path / "mine", resolve("lab"), AssembleConfig(), None, {"verdict": "GO"})
    assert load_bundle(named).source == "bundle mine"
    assert str(tmp_path) not in load_bundle(exported).source  # /ready shows it: no path


def test_no_champion_registered_suggests_the_demo_champion(tmp_path):
    from lab.serve.bundle import load_model
    from lab.serve.settings import DEMO_MODEL

    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with pytest.raises(NotFoundError, match=r"no registered model version models:/lab-memory@champion .*"
                                            r"serve the demo's champion with `lab serve --demo`"):
        load_model("models:/lab-memory@champion", empty)
    # the demo's own champion missing: --demo is what failed, so the hint is `lab demo`
    with pytest.raises(NotFoundError, match=r"\(`lab demo` registers it on GO\)"):
        load_model(DEMO_MODEL, empty)
