"""The datasets `lab` knows, where it looks for them, and how to put them there.

Nothing is downloaded at run time: loaders read files from the datasets root (``--datasets``, else
``$LAB_DATASETS``, else ``../shared/datasets`` beside the project). `lab datasets` reports, per
dataset, where it looked, whether the files are there, their SHA-256 against the files the
README's figures were measured on, the source and licence, and the steps that place it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.errors import ValidationError
from lab.eval.goldens import default_datasets, project_folder
from lab.eval.longmemeval_reader import content_sha256


@dataclass(frozen=True)
class Known:
    name: str  # what `--dataset` takes
    title: str
    folder: str  # under the datasets root
    files: dict[str, str | None]  # relative path -> SHA-256 of the file the figures were measured on (None: none published)
    source: str
    licence: str
    steps: tuple[str, ...]
    any_of: bool = False  # found when any of the files is there (each is a dataset of its own)


KNOWN: tuple[Known, ...] = (
    Known(
        "locomo", "LoCoMo dev (long-term conversational memory): 5 conversations, 2,760 turns, 999 questions",
        "locomo", {"locomo10-dev.json": "1c9979aed9f236d0d6700ff90f205f01c1796875da7956cf94672edd87753933"},
        "snap-research/LoCoMo, commit 3eb6f2c, data/locomo10.json (Maharana et al., ACL 2024)",
        "CC BY-NC 4.0: research and evaluation use only",
        ("git clone https://github.com/snap-research/LoCoMo && git -C LoCoMo checkout 3eb6f2c",
         "mkdir -p $DATASETS/locomo && cp LoCoMo/LICENSE* $DATASETS/locomo/ 2>/dev/null || true",
         "python -c \"import json; d = json.load(open('LoCoMo/data/locomo10.json')); "
         "keep = {'conv-26', 'conv-30', 'conv-41', 'conv-42', 'conv-43'}; "
         "json.dump([s for s in d if s['sample_id'] in keep], open('$DATASETS/locomo/locomo10-dev.json', 'w'))\"",
         "lab datasets   # 'found'; a checksum other than the one listed means other bytes (the same "
         "conversations serialised differently still load)")),
    Known(
        "scifact", "BEIR SciFact, train split: 5,183 abstracts, 809 claims",
        "scifact", {"corpus.jsonl": "dec31c8182f3d744c7d2c09423756fd1d17cbef75808db13ba01cc0aab4d1ac6",
                    "queries.jsonl": "812042faf8eac3764df5236a620fab381e40b2748674a88a287c17d70e628a4b",
                    "qrels/train.tsv": "ac0902d9b1cb717df182aaff1306175877fdb8f55bb5c3e8597ad694fc8e539f"},
        "BEIR (Thakur et al., 2021) over SciFact (Wadden et al., 2020): "
        "https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip",
        "claims CC BY 4.0, abstracts ODC-By 1.0",
        ("curl -LO https://public.ukp.informatik.tu-darmstadt.de/thakur/BEIR/datasets/scifact.zip && unzip scifact.zip",
         "mkdir -p $DATASETS/scifact/qrels && cp scifact/corpus.jsonl $DATASETS/scifact/ && "
         "cp scifact/qrels/train.tsv $DATASETS/scifact/qrels/",
         "python -c \"import json; ids = {l.split('\\t')[0] for l in open('scifact/qrels/train.tsv')}; "
         "open('$DATASETS/scifact/queries.jsonl', 'w').writelines(l for l in open('scifact/queries.jsonl') "
         "if json.loads(l)['_id'] in ids)\"   # the train claims only",
         "lab datasets")),
    Known(
        "longmemeval", "LongMemEval (ICLR 2025): 500 questions, each with its own haystack of chat sessions "
        "(S: ~40 sessions each, M: ~500, oracle: the evidence sessions only); `lab eval --dataset PATH/FILE.json`",
        "longmemeval", {"longmemeval_s_cleaned.json": None, "longmemeval_m_cleaned.json": None,
                        "longmemeval_oracle.json": "821a2034d219ab45846873dd14c14f12cfe7776e73527a483f9dac095d38620c"},
        "xiaowu0162/LongMemEval (Wu et al., ICLR 2025): the cleaned release on its model hub page "
        "(huggingface.co/datasets/xiaowu0162/longmemeval-cleaned)",
        "MIT",
        ("download longmemeval_s_cleaned.json (and _m_cleaned, _oracle if wanted) from the LongMemEval release "
         "on a machine that can reach it",
         "mkdir -p $DATASETS/longmemeval && cp longmemeval_*.json $DATASETS/longmemeval/",
         "lab eval --dataset $DATASETS/longmemeval/longmemeval_s_cleaned.json --preset lab   # a file whose "
         "checksum lab does not know is evaluated with a warning naming it"),
        any_of=True),
    *(Known(
        name, f"LongMemEval-S (cleaned), development half{what}: 250 questions (lab-split-v1, by question type and "
        f"abstention); `lab eval --dataset {name}`", "longmemeval", {file: sha},
        "xiaowu0162/LongMemEval (Wu et al., ICLR 2025), the cleaned release as mirrored per question in "
        "hussainzs/Memoria at 959167b (evaluations/data/lme_jsons/); checksum: of the JSON inside the .gz",
        "MIT",
        (f"place {file} (built as the README beside it says: half of the S release, compact JSON, gzip) in "
         "$DATASETS/longmemeval/",
         f"lab datasets   # 'found' when the JSON inside matches; then lab eval --dataset {name} --preset bm25"))
      for name, what, file, sha in (
          ("longmemeval-s-dev", "", "longmemeval_s_dev.json.gz",
           "0f782144aa5013058fb5ef265c056252f89491ba1a7477468cdca192bfe1c0ed"),
          ("longmemeval-oracle-dev", " with its evidence sessions only (oracle)", "longmemeval_oracle_dev.json.gz",
           "592ac91d04ac914f4834996f456ad4b7ecd5b03d6268a8aea352645d78800ff8"))),
)


def _sha256(path: Path) -> str:
    """The file's SHA-256; a .gz's is of the JSON inside (the checksum its README publishes); a
    .gz that cannot be read says so in place of a checksum (its status: differs)."""
    try:
        return content_sha256(path)
    except ValidationError as exc:
        return f"unreadable: {exc}"


def survey(datasets: str | Path | None = None, *, verify: bool = True,
           project: str | Path | None = None) -> list[dict[str, Any]]:
    """One entry per dataset: name, where, status (found | missing | differs), files with their
    checksums, source, licence and steps; then the bundled demo and any other BEIR folder found."""
    root = Path(datasets) if datasets else default_datasets(project)
    demo = project_folder(project) / "datasets" / "demo"
    out: list[dict[str, Any]] = []
    for k in KNOWN:
        folder = root / k.folder
        files = []
        for rel, expected in k.files.items():
            p = folder / rel
            got = _sha256(p) if verify and p.is_file() else None
            files.append({"path": str(p), "present": p.is_file(), "sha256_expected": expected, "sha256": got,
                          "matches": (got == expected) if got and expected else None})
        present = (any if k.any_of else all)(f["present"] for f in files)
        status = "missing" if not present else ("differs" if any(f["matches"] is False for f in files) else "found")
        out.append({"name": k.name, "title": k.title, "where": str(folder), "status": status, "files": files,
                    "source": k.source, "licence": k.licence,
                    "steps": [s.replace("$DATASETS", str(root)) for s in k.steps]})
    out.append({"name": "demo", "title": "the bundled demo: 347 memories, 250 edges, 120 golden questions",
                "where": str(demo), "status": "found" if demo.is_dir() else "missing",
                "files": [], "source": "written for this project (datasets/demo, goldens/demo.yaml)",
                "licence": "the project's own (MIT)", "steps": []})
    known_folders = {k.folder for k in KNOWN}
    if root.is_dir():
        for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in known_folders):
            if (sub / "corpus.jsonl").is_file():
                out.append({"name": str(sub), "title": f"a BEIR folder ({sub.name})", "where": str(sub),
                            "status": "found" if (sub / "queries.jsonl").is_file() else "incomplete (no queries.jsonl)",
                            "files": [], "source": "BEIR format (corpus.jsonl, queries.jsonl, qrels/<split>.tsv)",
                            "licence": "see the folder", "steps": []})
    return out
