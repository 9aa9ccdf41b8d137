"""params.yaml, checked: the parameters the DVC pipeline's stages run with (`StageParams`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from lab.config import SaveConfig, read_yaml
from lab.fields import from_dict, setting
from lab.errors import ValidationError
from lab.eval.stores import save_config

@dataclass(frozen=True)
class IndexParams:
    """params.yaml's ``index``: the pipeline store's index-time levers (checked by the ChunkConfig
    they build)."""
    context_turns: int | None = setting(None, doc="earlier turns indexed with each memory (none: the default)")
    time_in_text: bool = setting(False, doc="index each memory with its date")
    views: tuple[str, ...] | None = setting(None, doc="extra index-time views (none: the default)")


@dataclass(frozen=True)
class Profile:
    """A dataset's sweep file and the gate it must pass."""
    sweep: str = setting(doc="the dataset's sweep file")
    gate: str = setting(doc="the gate file its candidates must pass")


@dataclass(frozen=True)
class ParamsFile:
    """params.yaml as written."""
    dataset: str = setting(doc="the dataset the stages run on (a key of profiles)")
    preset: str = setting(doc="the sweep's base and the candidates stage's baseline")
    model: str = setting(doc="the pipeline's registered model, one per dataset")
    profiles: dict[str, Profile] = setting(doc="per dataset: its sweep file and gate")
    index: IndexParams = setting(default_factory=IndexParams, doc="the store's index-time levers")


@dataclass(frozen=True)
class StageParams:
    """params.yaml, checked: the dataset, the baseline preset, the index-time levers, the model
    family, and the dataset's profile (its sweep and gate files)."""
    dataset: str
    preset: str
    index: Mapping[str, Any]  # context_turns, time_in_text, views (each optional)
    model: str
    sweep: str  # the profile's sweep file
    gate: str  # the profile's gate file

    @property
    def registered_model(self) -> str:
        """The registered model of the DVC pipeline on this dataset: one champion per dataset, apart
        from `lab demo`'s and the user's own."""
        return f"{self.model}-{self.dataset}"

    def save_config(self) -> SaveConfig:
        """The index-time settings of the pipeline's store."""
        index = self.index
        return save_config(index.get("context_turns"), bool(index.get("time_in_text", False)), index.get("views"))


def load_params(path: str | Path) -> StageParams:
    """params.yaml, checked: every problem names its key."""
    p = Path(path)
    data = read_yaml(p, "params file")
    if not isinstance(data, dict):
        raise ValidationError(f"{p}: expected a mapping of parameters")
    try:
        raw = from_dict(ParamsFile, data)
    except ValidationError as exc:
        raise ValidationError(f"{p}: {exc}", field=exc.field) from None
    if raw.dataset not in raw.profiles:
        raise ValidationError(f"{p}: profiles has no entry for dataset {raw.dataset!r}; known: {sorted(raw.profiles)}",
                              field="dataset")
    profile = raw.profiles[raw.dataset]
    index = {k: v for k, v in dataclasses.asdict(raw.index).items() if v is not None}
    return StageParams(raw.dataset, raw.preset, index, raw.model, profile.sweep, profile.gate)
