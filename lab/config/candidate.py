"""A candidate: the search configuration a sweep picks and the gate judges, with the index-time
and assembly settings it was chosen with, and its file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.config.assemble import AssembleConfig
from lab.config.reading import read_config_mapping, to_dict
from lab.config.save import SaveConfig
from lab.config.search import SearchConfig
from lab.errors import ValidationError
from lab.fields import from_dict


@dataclass(frozen=True)
class Candidate:
    """What a sweep picks and the gate judges: a search configuration, plus the index-time (``save``)
    and assembly settings it was chosen with, and the model encoding its queries (``query_model``,
    e.g. a query adapter ``adapter:PATH`` from `lab adapt`); None means the defaults (the store's
    model encodes the queries)."""

    search: SearchConfig
    save: SaveConfig | None = None
    assemble: AssembleConfig | None = None
    query_model: str | None = None

    def to_yaml(self, header: str = "") -> str:
        """A candidate file: the SearchConfig's keys at the top level (so it is also a preset file),
        then ``save:`` and ``assemble:`` sections."""
        import yaml

        data = to_dict(self.search)
        for name in ("save", "assemble"):
            if getattr(self, name) is not None:
                data[name] = to_dict(getattr(self, name))
        if self.query_model is not None:
            data["query_model"] = self.query_model
        return header + yaml.safe_dump(data, sort_keys=True)


def load_candidate(path: str | Path) -> Candidate:
    """A candidate file (.yaml/.yml/.json): a SearchConfig, optionally with ``save:`` (index-time)
    and ``assemble:`` sections and a ``query_model:`` (a model id), e.g. a sweep's best.yaml."""
    p = Path(path)
    data = dict(read_config_mapping(p))
    save = data.pop("save", None)
    assemble = data.pop("assemble", None)
    query_model = data.pop("query_model", None)
    if query_model is not None and (not isinstance(query_model, str) or not query_model.strip()):
        raise ValidationError(f"{p}: query_model: expected a model id (e.g. adapter:models/adapter-locomo), "
                              f"got {query_model!r}", field="query_model")
    try:
        return Candidate(from_dict(SearchConfig, data),
                         None if save is None else from_dict(SaveConfig, save, where="save"),
                         None if assemble is None else from_dict(AssembleConfig, assemble, where="assemble"),
                         query_model)
    except ValidationError as exc:
        raise ValidationError(f"{p}: {exc}", field=exc.field) from None
