"""A dataset reference: which dataset, from which root, how it is loaded; small and picklable, it
travels with a unit of work (a Ray task loads the dataset its driver named, from the same root)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from lab.errors import ValidationError
from lab.eval.dataset import EvalDataset
from lab.eval.goldens import BUILT_IN, default_datasets, load_dataset, project_folder
from lab.eval.longmemeval import NAMED, is_gzip, is_longmemeval, load_longmemeval


@dataclass(frozen=True)
class DatasetOptions:
    """How a dataset is loaded beyond its defaults (LoCoMo's derived facts and summaries;
    LongMemEval's granularity, turn | session, and corpus, user | all: None is the official protocol's)."""

    observations: bool = False
    summaries: bool = False
    granularity: str | None = None
    corpus: str | None = None


@dataclass(frozen=True)
class DatasetRef:
    """``name``: locomo, scifact, demo, a golden .yaml, a LoCoMo or LongMemEval .json, a BEIR or
    tables folder; ``root``: the datasets root the built-in names are read from (None: the
    caller's workspace's, `at`); ``split``: BEIR's qrels split; ``project``: the folder whose
    ``goldens/`` and ``datasets/`` the demo and golden files' named datasets come from."""

    name: str
    root: str | Path | None = None
    split: str = "train"
    options: DatasetOptions = DatasetOptions()
    project: str | Path | None = None

    def at(self, root: str | Path, project: str | Path | None = None) -> "DatasetRef":
        """This reference with ``root`` as its datasets root and ``project`` as its project, where
        it names none itself (a workspace's: `at(ws.datasets_root, ws.project)`)."""
        return replace(self, root=self.root or root, project=self.project or project)

    def load(self) -> EvalDataset:
        opts, path = self.options, Path(self.name)
        if self.name in NAMED:  # the shared development half, or its oracle, by name
            path = Path(self.root or default_datasets(self.project)) / NAMED[self.name]
            if not path.is_file():
                raise ValidationError(f"{self.name}: {path} not found (`lab datasets` says where it goes)")
        if path.is_file() and (is_gzip(path) or (path.suffix == ".json" and is_longmemeval(path))):
            return load_longmemeval(path, granularity=opts.granularity or "turn", corpus=opts.corpus or "user")
        if opts.granularity or opts.corpus:
            raise ValidationError(f"--granularity and --corpus apply to a LongMemEval file, not {self.name!r}")
        return load_dataset(self.name, self.root, split=self.split, observations=self.options.observations,
                            summaries=self.options.summaries, project=self.project)

    def portable(self) -> "DatasetRef":
        """This reference as another process (a Ray worker, maybe elsewhere) must read it: a path
        made absolute (a worker's working folder is not the caller's), the root and project resolved here."""
        named = self.name if self.name in BUILT_IN or not Path(self.name).exists() else str(Path(self.name).resolve())
        project = project_folder(self.project).resolve()
        return replace(self, name=named, root=Path(self.root or default_datasets(project)).resolve(), project=project)
