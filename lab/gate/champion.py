"""The champion a candidate is held against: found in the model registry by its ``@champion``
alias, then read as the bundle that version carries (`lab.bundle`), as serving reads it. Its
search and index-time settings and the data each suite judged it on come from the bundle's files
and manifest; the registry only says which version it is and where its bundle lies."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from lab import track as tracking
from lab.bundle import Bundle, read_bundle
from lab.config import SaveConfig, SearchConfig, from_dict, to_dict
from lab.errors import NotFoundError

if TYPE_CHECKING:
    from lab.track.connect import Where


def judged_on(suite: Mapping[str, Any]) -> dict[str, str]:
    """The data a suite judged on, from its figures as a report or manifest keeps them
    (`SuiteResult.as_dict`): the dataset and its corpus and gold fingerprints."""
    return {"dataset": suite.get("dataset"), "corpus": suite.get("dataset_fingerprint"),
            "gold": suite.get("gold_fingerprint")}


@dataclass(frozen=True)
class Champion:
    """The registered champion a candidate is held against: its configs, the data each suite judged
    it on, and what the report shows of it (``record``)."""
    version: str
    search: SearchConfig | None
    save: SaveConfig | None
    data: Mapping[str, Mapping[str, str]] | None  # suite -> dataset, corpus and gold fingerprints
    record: Mapping[str, Any]  # what gate.json shows of it: version, run, bundle, assembly and save settings, data
    query_model: str | None = None  # the model encoding its queries, when it had its own (a packed adapter)

    @classmethod
    def from_bundle(cls, bundle: Bundle, found: Mapping[str, Any]) -> Champion:
        """The champion as its bundle says it is; ``found`` is the registry's answer that located it."""
        suites = bundle.manifest.get("metrics") or {}
        data = {name: judged_on(figures) for name, figures in suites.items()} or None
        record = {"version": found["version"], "run_id": found.get("run_id"), "assemble": to_dict(bundle.assemble),
                  "bundle": str(bundle.folder), "save": None if bundle.save is None else to_dict(bundle.save),
                  "verdict": bundle.verdict, "source": found.get("source"), "data": data,
                  "query_model": bundle.query_model}
        return cls(str(found["version"]), bundle.search, bundle.save, data, record, bundle.query_model)

    @classmethod
    def from_record(cls, rec: Mapping[str, Any] | None) -> Champion | None:
        """The champion as a gate report recorded it (gate.json): who it was, and its save settings;
        its search config is in its bundle, not in the report."""
        if not rec:
            return None
        save = from_dict(SaveConfig, rec["save"], where="champion save") if rec.get("save") else None
        return cls(rec.get("version"), None, save, rec.get("data"), dict(rec), rec.get("query_model"))


def registered_champion(model: str, uri: Where = None) -> Champion | None:
    """The ``@champion`` of ``model`` read from its bundle (None: the model has no champion). A local
    artifact store's bundle is read in place; a remote one's is downloaded, store and all."""
    found = tracking.champion(model, uri)
    if found is None:
        return None
    folder = tracking.model_bundle(found, uri)
    if folder is None:
        raise NotFoundError(f"the champion of {model} (version {found['version']}) carries no bundle artifact, so "
                            "the gate cannot read what it is held against: export a champion again "
                            "(`lab gate --export`)")
    return Champion.from_bundle(read_bundle(folder), found)
