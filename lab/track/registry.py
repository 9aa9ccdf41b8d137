"""The model registry: the gated bundle logged as a pyfunc model, its versions, and ``@champion``.

The export never leaves a registered model without a version: the model's artifacts (the bundle)
are uploaded first, then the registered model and its version are made, back to back; when that
fails, a registered model made by this export is removed, or the error says it is left and how to
remove it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from lab.errors import NotFoundError
from lab.track.code import lab_code
from lab.track.connect import (OLD_LOCAL_ARTIFACTS, TrackingError, Where, answers, client, failure, guarded, is_server,
                               local_artifacts_advice, shown_uri, timeout_of, tracking_uri, transport_failure)
from lab.track.packaging import model_requirements, model_signature
from lab.track.runs import end_run

CHAMPION = "champion"
MISSING = ("RESOURCE_DOES_NOT_EXIST", "INVALID_PARAMETER_VALUE")  # no such model, version or alias


def champions(uri: Where = None) -> list[dict[str, Any]]:
    """Every registered model with a champion: name, version, the gate verdict, the store it serves."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    out = []
    with guarded(uri, "listing registered models"):
        for rm in c.search_registered_models(max_results=100):
            try:
                mv = c.get_model_version_by_alias(rm.name, CHAMPION)
            except MlflowException as exc:
                if exc.error_code not in MISSING:
                    raise
                continue
            out.append({"model": rm.name, "version": mv.version, "uri": f"models:/{rm.name}@{CHAMPION}",
                        "verdict": mv.tags.get("lab.verdict"), "digest": mv.tags.get("lab.digest")})
    return sorted(out, key=lambda r: r["model"])


def champion(model: str, uri: Where = None) -> dict[str, Any] | None:
    """The registered champion of ``model``: version, config, assemble and save (dicts; save None when
    it used the default index settings), run id, bundle, verdict; None when there is none."""
    return model_version(model, alias=CHAMPION, uri=uri)


def model_version(model: str, *, alias: str | None = None, version: str | None = None,
                  uri: Where = None) -> dict[str, Any] | None:
    """A registered version of ``model`` by alias or number (as ``champion`` describes it); None
    when the model, alias or version does not exist (a server that fails is an error, not None)."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    with guarded(uri, f"reading model {model}"):
        try:
            mv = c.get_model_version_by_alias(model, alias) if alias else c.get_model_version(model, str(version))
        except MlflowException as exc:
            if exc.error_code in MISSING:
                return None
            raise
    return {"version": mv.version, "run_id": mv.run_id, "config": json.loads(mv.tags.get("lab.config", "{}")),
            "assemble": json.loads(mv.tags.get("lab.assemble", "{}")), "bundle": mv.tags.get("lab.bundle"),
            "save": json.loads(mv.tags["lab.save"]) if "lab.save" in mv.tags else None,
            "verdict": mv.tags.get("lab.verdict"), "source": mv.source,
            "data": json.loads(mv.tags["lab.data"]) if "lab.data" in mv.tags else None}


def find_version(model: str, digest: str, uri: Where = None) -> str | None:
    """The registered version of ``model`` exported from the same bundle (``lab.digest`` tag), if any."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    with guarded(uri, f"reading model {model}"):
        try:
            found = c.search_model_versions(f"name = '{model}' and tags.`lab.digest` = '{digest}'")
        except MlflowException as exc:
            if exc.error_code in MISSING:
                return None
            raise
    return min((mv.version for mv in found), key=int, default=None)


def model_bundle(found: dict[str, Any], uri: Where = None) -> Path | None:
    """The bundle folder a registered version carries (``model_version``'s answer): read in place
    from a local artifact store, else downloaded (a server's ``mlflow-artifacts:``); None when it
    carries none. A version whose artifacts sit on another machine's disk is refused by name."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from mlflow.exceptions import MlflowException

    mlflow, c, exp_id = client(uri)
    source = found.get("source") or ""
    with guarded(uri, f"downloading the bundle of {source}"):
        if source.startswith("models:/m-"):  # a logged model (MLflow 3): its artifacts' own location
            location = c.get_logged_model(source.removeprefix("models:/")).artifact_location
            parsed = urlparse(location)
            if parsed.scheme in ("", "file"):
                local = Path(url2pathname(parsed.path)) / "artifacts" / "bundle"
                if local.is_dir():
                    return local
                if is_server(tracking_uri(uri)) and OLD_LOCAL_ARTIFACTS in location:
                    raise NotFoundError(f"version {found.get('version')} keeps its bundle at {location}, not here: "
                                        + local_artifacts_advice(tracking_uri(uri), exp_id, location)
                                        + "; then export it again (`lab gate --export`)")
                return None
        try:
            return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{source}/artifacts/bundle"))
        except (MlflowException, OSError) as exc:  # a version logged before bundles were its artifacts
            if transport_failure(exc, timeout_of(uri)) is not None:  # ... unless the server is what failed
                raise
            old = found.get("bundle")
            return Path(old) if old and Path(old).is_dir() else None


def export_model(run_id: str, bundle: Path, model: str, *, config_json: str, assemble_json: str,
                 verdict: str, uri: Where = None, save_json: str | None = None,
                 data_json: str | None = None, digest: str | None = None,
                 example: dict[str, Any] | None = None) -> dict[str, Any]:
    """Log the bundle as a pyfunc model in ``run_id``, register a new version, and move @champion to
    it. A bundle already registered (same ``digest``) is not registered again: @champion moves back
    to that version and ``reused`` says so. A tracking failure ends ``run_id`` FAILED and removes a
    registered model this export made without a version (or says how to)."""
    mlflow, c, _ = client(uri)
    same = find_version(model, digest, uri) if digest else None
    if same is not None:
        with guarded(uri, f"moving @{CHAMPION} of {model} to version {same}"):
            c.set_registered_model_alias(model, CHAMPION, same)
            mv = c.get_model_version(model, same)
        return {"model": model, "version": same, "uri": f"models:/{model}@{CHAMPION}", "model_uri": mv.source,
                "reused": True}

    import pandas as pd

    from lab.track.model import LabModel  # heavy: fastapi, mlflow

    input_example = pd.DataFrame([{**example, "k": 5, "budget": 400}]) if example else None
    tags = {"lab.config": config_json, "lab.assemble": assemble_json, "lab.bundle": str(Path(bundle).resolve()),
            "lab.verdict": verdict, **({"lab.save": save_json} if save_json else {}),
            **({"lab.digest": digest} if digest else {}),
            # the data each gate suite judged it on (corpus and gold fingerprints): a later gate
            # refuses to report a delta against it over different data
            **({"lab.data": data_json} if data_json else {})}
    made = False
    doing = f"uploading the model of run {run_id} (its bundle)"
    try:
        with mlflow.start_run(run_id=run_id):
            info = mlflow.pyfunc.log_model(name="model", python_model=LabModel(), artifacts={"bundle": str(bundle)},
                                           signature=model_signature(), input_example=input_example,
                                           pip_requirements=model_requirements(), code_paths=[lab_code()])
        doing = f"registering {model}"
        made = _registered(c, model)
        mv = c.create_model_version(model, source=info.model_uri, run_id=run_id, model_id=info.model_id, tags=tags)
        doing = f"moving @{CHAMPION} of {model} to version {mv.version}"
        c.set_registered_model_alias(model, CHAMPION, mv.version)
    except Exception as exc:
        reason = failure(exc, timeout_of(uri))
        if reason is None:
            raise
        error = TrackingError(tracking_uri(uri), doing, reason)
        for left in (end_run(c, run_id, "FAILED", uri), _unmake(c, model, uri) if made else None):
            if left:
                error.leave(left)
        raise error from None
    return {"model": model, "version": mv.version, "uri": f"models:/{model}@{CHAMPION}", "model_uri": info.model_uri,
            "reused": False}


def _registered(c: Any, model: str) -> bool:
    """Make the registered model ``model`` unless it exists; True when this call made it."""
    from mlflow.exceptions import MlflowException

    try:
        c.create_registered_model(model, tags={"lab.kind": "memory-retrieval"},
                                  description="lab's gated retrieval configuration over a pinned store")
        return True
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        return False


def _unmake(c: Any, model: str, uri: Where) -> str | None:
    """Remove the registered model this export made, when it has no version; None when done (or
    nothing to do), else what to do about the model left without a version."""
    resolved = tracking_uri(uri)
    try:
        if is_server(resolved) and answers(resolved, timeout=3) is not None:
            raise ConnectionError("no answer")
        if not c.search_model_versions(f"name = '{model}'"):
            c.delete_registered_model(model)
        return None
    except Exception:  # noqa: BLE001 - the store failing again: say what is left instead
        return (f"registered model {model} may be left without a version: when the server is back, delete it "
                f"in its UI ({shown_uri(resolved)}/#/models/{model}) unless it has one")
