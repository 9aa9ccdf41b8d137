"""`lab store repair` says only what it can know about a torn newest commit it takes out: that
commit's changes are gone, and whether a client was told it landed cannot be told after disk damage."""
from __future__ import annotations

from lab.cli import main
from lab.embed.fake import FakeEmbedder
from lab.pipeline import Pipeline


def test_repair_of_a_torn_newest_commit_claims_nothing_it_cannot_know(tmp_path, capsys):
    root = tmp_path / "s"
    with Pipeline.open(root, embedder=FakeEmbedder(), create=True) as pipe:
        pipe.save("kept across the tear", "n")
        pipe.save("a commit acknowledged, then damaged on disk", "n")
    log = sorted((root / "tables" / "memories" / "_delta_log").glob("*.json"))[-1]
    log.write_bytes(log.read_bytes()[:40])  # damage after the fact: the writer was told it landed
    capsys.readouterr()
    assert main(["store", "repair", "--store", str(root)]) == 0
    said = [line for line in capsys.readouterr().out.splitlines() if "torn log file" in line]
    assert len(said) == 1, said
    assert "was never acknowledged" not in said[0]  # the old line's claim, false for this very case
    assert f"table memories: took out the torn log file {log.name} (kept in _torn_commits/)" in said[0]
    assert "that commit's changes are gone" in said[0] and "it may have been acknowledged" in said[0]
    assert (root / "tables" / "memories" / "_torn_commits" / log.name).is_file()
