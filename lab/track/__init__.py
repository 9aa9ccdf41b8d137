"""Tracking: every `lab eval`, `lab sweep` and `lab gate` is an MLflow run. The only importer of mlflow.

The tracking store is local SQLite under ``.lab/mlflow`` unless ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` names another; artifacts sit beside it. No server is started. First use
of a new SQLite store is serialised with a file lock: MLflow creates its tables without one, and
two processes creating them at once break the store for good.
"""
from __future__ import annotations

import contextlib
import json
import logging
import shlex
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Iterator

from lab.config import to_dict
from lab.errors import ValidationError
from lab.version import __version__
from lab.workspace import current, set_library_env

EXPERIMENT = "lab"
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # MLflow 3's UI: runs, not traces
DEFAULT_DIR = Path(".lab/mlflow")
_configured: dict[str, str] = {}


def tracking_uri(uri: str | None = None) -> str:
    """The tracking URI: the argument, else the workspace's ($MLFLOW_TRACKING_URI), else SQLite under .lab/mlflow."""
    uri = uri or current().tracking_uri
    if uri:
        return uri
    return f"sqlite:///{(DEFAULT_DIR / 'mlflow.db').resolve()}"


HEALTH_TIMEOUT_S = 5.0
_reachable: set[str] = set()


def require_reachable(uri: str | None = None) -> None:
    """Refuse a tracking server nobody answers at, in seconds and in one line naming it (MLflow's
    client would retry for minutes, then fail with a traceback, after the work was done). Only
    http(s) URIs are servers; a local store is checked by opening it."""
    from urllib.error import HTTPError, URLError
    from urllib.request import urlopen

    resolved = tracking_uri(uri)
    if not resolved.startswith(("http://", "https://")) or resolved in _reachable:
        return
    try:
        with urlopen(resolved.rstrip("/") + "/health", timeout=HEALTH_TIMEOUT_S):
            pass
    except HTTPError:
        pass  # it answers (a proxy in front may not know /health): reachable
    except (URLError, OSError) as exc:
        why = getattr(exc, "reason", exc)
        raise ValidationError(f"cannot reach the MLflow tracking server at {resolved} ({why}); start it "
                              "(`mlflow server --backend-store-uri sqlite:///mlflow.db`), give another "
                              "--tracking-uri, or --no-track", field="tracking_uri") from None
    _reachable.add(resolved)


def ui_command(uri: str | None = None) -> str:
    """The command that shows these runs in MLflow's UI."""
    return f"mlflow ui --backend-store-uri {tracking_uri(uri)}"


def env_line(uri: str | None = None) -> str:
    """The shell line that points MLflow (and `mlflow.pyfunc.load_model("models:/...")`) at this
    tracking store from any folder: MLflow's own default is an ``mlflow.db`` in the working folder."""
    return f"export MLFLOW_TRACKING_URI={tracking_uri(uri)}"


def load_line(model_uri: str) -> str:
    """The Python that loads a registered champion and answers its own input example (the gate's
    first question, so it fits whatever data the model serves), after ``env_line``: the project's
    own interpreter, named by its path (a bare ``python`` is another one on many machines), and
    what it prints is the ranked ids and the assembled context, not a truncated frame."""
    return (f"{shlex.quote(sys.executable)} -c 'import mlflow; m = mlflow.pyfunc.load_model(\"{model_uri}\"); "
            "r = m.predict(m.input_example).iloc[0]; print(list(r.memory_ids)); print(r.context)'")


def _quiet() -> None:
    set_library_env({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                     "MLFLOW_LOGGING_LEVEL": "WARNING", "GIT_PYTHON_REFRESH": "quiet"})
    for pattern in (r".*An input example was not provided", r".*Add type hints to the `predict` method",
                    r".*Hint: Inferred schema contains integer column", r".*``noload`` loader strategy",
                    r".*dataset source can be interpreted in multiple ways"):
        warnings.filterwarnings("ignore", message=pattern)


class _DropKnownNoise(logging.Filter):
    """MLflow's advice that does not apply here: the model class is importable from the installed
    package (so pickling it by reference is what we want), and its output has no fixed schema."""
    NOISE = ("Passing a Python object as `python_model`", "Failed to infer model signature")

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(n in record.getMessage() for n in self.NOISE)


def client(uri: str | None = None):
    """(mlflow module, MlflowClient, experiment id), the store created on first use."""
    _quiet()
    import fcntl

    import mlflow
    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    if not any(isinstance(f, _DropKnownNoise) for f in pyfunc_log.filters):
        pyfunc_log.addFilter(_DropKnownNoise())
    resolved = tracking_uri(uri)
    require_reachable(resolved)
    mlflow.set_tracking_uri(resolved)
    if resolved not in _configured:
        root = Path(resolved[len("sqlite:///"):]).parent if resolved.startswith("sqlite:///") else DEFAULT_DIR
        root.mkdir(parents=True, exist_ok=True)
        with open(root / "mlflow.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            c = MlflowClient(resolved)
            exp = c.get_experiment_by_name(EXPERIMENT)
            exp_id = exp.experiment_id if exp else c.create_experiment(
                EXPERIMENT, artifact_location=(root / "artifacts").resolve().as_uri())
            if (exp.tags if exp else {}).get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
                # the UI opens a run list with metrics, not an empty GenAI traces page
                c.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
        _configured[resolved] = exp_id
    return mlflow, MlflowClient(resolved), _configured[resolved]


def git_commit() -> str | None:
    """The commit of the working tree lab runs from (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        return out.stdout.strip() or None if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config dicts as dotted MLflow params (``fusion.weights.vector``)."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


def base_tags(kind: str, **tags: Any) -> dict[str, str]:
    out = {"lab.kind": kind, "lab.version": __version__, "lab.git_commit": git_commit() or "unknown"}
    out.update({f"lab.{k}": str(v) for k, v in tags.items() if v is not None})
    return out


@contextlib.contextmanager
def run(name: str, kind: str, *, params: dict[str, Any] | None = None, tags: dict[str, Any] | None = None,
        uri: str | None = None, parent: str | None = None) -> Iterator[Any]:
    """An MLflow run (a child of ``parent`` when given); yields (mlflow, client, run id)."""
    mlflow, c, exp_id = client(uri)
    all_tags = base_tags(kind, **(tags or {}))
    if parent:
        all_tags["mlflow.parentRunId"] = parent
    created = c.create_run(exp_id, run_name=name, tags=all_tags)
    run_id = created.info.run_id
    status = "FINISHED"
    try:
        if params:
            log_params(c, run_id, params)
        yield mlflow, c, run_id
    except BaseException:
        status = "KILLED"
        raise
    finally:
        c.set_terminated(run_id, status=status)


def log_params(c, run_id: str, params: dict[str, Any]) -> None:
    import re

    from mlflow.entities import Param

    # MLflow names allow no '@': a view's list ("fusion.weights.vector@plain") is logged with ':'.
    # Any other name MLflow refuses (a system's own setting) is logged under a spelling it takes,
    # said once on the log, so one odd name costs its spelling, not the run; two names that would
    # become one are refused, naming both.
    names: dict[str, str] = {}
    for key in sorted(params):
        name = re.sub(r"[^\w.\- :/]", "_", str(key).replace("@", ":"))[:250]
        name = "/".join(p if p not in ("", ".", "..") else "_" for p in name.split("/"))  # no path tricks
        if name != str(key).replace("@", ":")[:250]:
            logging.getLogger(__name__).warning("MLflow param %r is logged as %r (a param name holds letters, "
                                                "digits, _ - . : / and spaces)", key, name)
        if name in names.values():
            other = next(k for k, v in names.items() if v == name)
            raise ValidationError(f"params {other!r} and {key!r} would both be logged as {name!r} in MLflow: "
                                  "rename one (a param name holds letters, digits, _ - . : / and spaces)")
        names[key] = name
    items = [Param(names[k], str(v)[:6000]) for k, v in sorted(params.items())]
    for i in range(0, len(items), 100):
        c.log_batch(run_id, params=items[i:i + 100])


def log_metrics(c, run_id: str, metrics: dict[str, float], step: int = 0) -> None:
    import math
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    items = [Metric(k.replace("@", "_at_"), float(v), now, step) for k, v in sorted(metrics.items())
             if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
    for i in range(0, len(items), 500):
        c.log_batch(run_id, metrics=items[i:i + 500])


def log_eval(result: Any, folder: Path, *, dataset: Any, store_version: str, uri: str | None = None,
             parent: str | None = None, kind: str = "eval", extra_tags: dict[str, str] | None = None) -> str:
    """One evaluation as a run: the flattened config, metrics with CI bounds, tags, the run folder."""
    m = result.metrics
    metrics = dict(m["metrics"])
    for name, (lo, hi) in m.get("ci95", {}).items():
        metrics[f"{name}.ci95_low"], metrics[f"{name}.ci95_high"] = lo, hi
    for name, value in (m.get("context") or {}).items():
        metrics[name] = value
    abstention = m.get("abstention") or {}
    if abstention:  # the fitted threshold and each part's figures (abstention.validation.auroc, ...)
        metrics["abstention.threshold"] = abstention["threshold"]
        for part in ("tune", "validation"):
            for name, value in abstention[part].items():
                if isinstance(value, (int, float)):
                    metrics[f"abstention.{part}.{name}"] = value
    tags = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(), "store_version": store_version,
            "preset": result.config.name, "run_folder": str(Path(folder).resolve()), **(extra_tags or {})}
    with run(f"{kind} {dataset.name} {result.config.name}", kind, params=flatten(to_dict(result.config)),
             tags=tags, uri=uri, parent=parent) as (_, c, run_id):
        log_metrics(c, run_id, metrics)
        log_dataset(run_id, dataset, uri)
        log_interval_table(c, run_id, m)
        c.log_artifacts(run_id, str(folder), "run")
    return run_id


def log_dataset(run_id: str, dataset: Any, uri: str | None = None) -> None:
    """The evaluation's questions as the run's input dataset (MLflow's dataset API): its name,
    digest (lab's fingerprint of corpus and gold) and source show on the run and in the runs table."""
    import pandas as pd

    mlflow, _, _ = client(uri)
    frame = pd.DataFrame(dataset.questions.to_dicts())
    data = mlflow.data.from_pandas(frame, source=str(dataset.source or dataset.name), name=dataset.name,
                                   digest=f"{dataset.fingerprint()}-{dataset.gold_fingerprint()}")
    with mlflow.start_run(run_id=run_id):
        mlflow.log_input(data, context="evaluation")


def log_interval_table(c, run_id: str, metrics: dict[str, Any]) -> None:
    """Every metric with its 95% interval as one table (``metrics_ci.json``, shown by the UI's
    artifact view): each metric once with its bounds, not a one-bar chart per bound."""
    rows = [{"metric": name, "mean": float(value), "ci95_low": float(metrics["ci95"][name][0]),
             "ci95_high": float(metrics["ci95"][name][1])}
            for name, value in metrics["metrics"].items() if name in metrics.get("ci95", {})]
    if rows:
        c.log_table(run_id, data={k: [r[k] for r in rows] for k in rows[0]}, artifact_file="metrics_ci.json")


def log_system(result: Any, folder: Path, *, dataset: Any, uri: str | None = None) -> str:
    """A memory system's evaluation (lab.adapters.harness) as a run: its settings, metrics with CI
    bounds, ingest and search speed, the round trip, tags naming the system, the run folder."""
    m = result.metrics
    metrics = dict(m["metrics"])
    for name, (lo, hi) in m.get("ci95", {}).items():
        metrics[f"{name}.ci95_low"], metrics[f"{name}.ci95_high"] = lo, hi
    speed = m.get("speed") or {}
    for key, value in {"ingest_memories_per_s": (speed.get("ingest") or {}).get("memories_per_s"),
                       "search_p50_ms": (speed.get("search") or {}).get("p50_ms"),
                       "search_p99_ms": (speed.get("search") or {}).get("p99_ms"),
                       "round_trip_delay_ms": (m.get("round_trip") or {}).get("delay_ms")}.items():
        if value is not None:
            metrics[key] = value
    system = result.system
    tags = {"dataset": dataset.name, "dataset_fingerprint": dataset.fingerprint(), "system": system["system"],
            "adapter": system.get("adapter", ""), "approximates": system.get("approximates") or "",
            "run_folder": str(Path(folder).resolve())}
    with run(f"system {dataset.name} {system['system']}", "system", params=flatten(system.get("settings") or {}),
             tags=tags, uri=uri) as (_, c, run_id):
        log_metrics(c, run_id, metrics)
        log_dataset(run_id, dataset, uri)
        log_interval_table(c, run_id, m)
        c.log_artifacts(run_id, str(folder), "run")
    return run_id


def recent_runs(n: int = 20, uri: str | None = None, kind: str | None = None) -> list[dict[str, Any]]:
    """The latest runs, newest first: id, name, kind, status, start, headline metrics, verdict."""
    _, c, exp_id = client(uri)
    flt = f"tags.`lab.kind` = '{kind}'" if kind else ""
    out = []
    for r in c.search_runs([exp_id], filter_string=flt, order_by=["attributes.start_time DESC"], max_results=n):
        tags = r.data.tags
        out.append({"run_id": r.info.run_id, "name": r.info.run_name, "kind": tags.get("lab.kind"),
                    "status": r.info.status, "start_time": r.info.start_time,
                    "parent": tags.get("mlflow.parentRunId"), "verdict": tags.get("lab.verdict"),
                    "dataset": tags.get("lab.dataset"), "metrics": dict(r.data.metrics)})
    return out


# --------------------------------------------------------------------------- registry
CHAMPION = "champion"


def champions(uri: str | None = None) -> list[dict[str, Any]]:
    """Every registered model with a champion: name, version, the gate verdict, the store it serves."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    out = []
    for rm in c.search_registered_models(max_results=100):
        try:
            mv = c.get_model_version_by_alias(rm.name, CHAMPION)
        except MlflowException:
            continue
        out.append({"model": rm.name, "version": mv.version, "uri": f"models:/{rm.name}@{CHAMPION}",
                    "verdict": mv.tags.get("lab.verdict"), "digest": mv.tags.get("lab.digest")})
    return sorted(out, key=lambda r: r["model"])


def champion(model: str, uri: str | None = None) -> dict[str, Any] | None:
    """The registered champion of ``model``: version, config, assemble and save (dicts; save None when
    it used the default index settings), run id, bundle, verdict; None when there is none."""
    return model_version(model, alias=CHAMPION, uri=uri)


def model_version(model: str, *, alias: str | None = None, version: str | None = None,
                  uri: str | None = None) -> dict[str, Any] | None:
    """A registered version of ``model`` by alias or number (as ``champion`` describes it); None
    when the model, alias or version does not exist."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    try:
        mv = c.get_model_version_by_alias(model, alias) if alias else c.get_model_version(model, str(version))
    except MlflowException:
        return None
    return {"version": mv.version, "run_id": mv.run_id, "config": json.loads(mv.tags.get("lab.config", "{}")),
            "assemble": json.loads(mv.tags.get("lab.assemble", "{}")), "bundle": mv.tags.get("lab.bundle"),
            "save": json.loads(mv.tags["lab.save"]) if "lab.save" in mv.tags else None,
            "verdict": mv.tags.get("lab.verdict"), "source": mv.source,
            "data": json.loads(mv.tags["lab.data"]) if "lab.data" in mv.tags else None}


def model_requirements() -> list[str]:
    """What the registered model's environment installs: lab's own dependencies (not its extras) at
    the versions installed here, and mlflow and pandas. lab itself travels inside the model (its
    code, logged with it), so the model rebuilds from its artifact alone on any machine: no
    ``lab @ file:///<this clone>`` that exists only here. A local version label (torch's ``+cpu``)
    is dropped: ``==2.13.0`` accepts the CPU build, and an index that has only that build serves it."""
    from importlib import metadata

    from packaging.requirements import Requirement

    pinned = {}
    for text in metadata.requires("lab") or []:
        req = Requirement(text)
        if req.marker is not None and "extra" in str(req.marker):
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:  # not installed here: the declared range, as is
            pinned[req.name.lower()] = str(req)
            continue
        pinned[req.name.lower()] = f"{req.name}=={version.split('+')[0]}"
    for name in ("mlflow", "pandas"):
        pinned.setdefault(name, f"{name}=={metadata.version(name).split('+')[0]}")
    return [pinned[name] for name in sorted(pinned)]


def lab_code() -> str:
    """The folder of the ``lab`` package, logged with the model (MLflow puts it on the path at load)."""
    return str(Path(__file__).resolve().parents[1])  # lab/track/__init__.py -> lab/


def model_signature():
    """The pyfunc model's input and output columns (``lab.track.model.LabModel``)."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Array, ColSpec, Schema

    inputs = Schema([ColSpec("string", "query"), ColSpec("string", "namespace"),
                     ColSpec("long", "k", required=False), ColSpec("long", "budget", required=False)])
    outputs = Schema([ColSpec("string", "query"), ColSpec("string", "namespace"),
                      ColSpec(Array("string"), "memory_ids"), ColSpec(Array("double"), "scores"),
                      ColSpec("string", "context"), ColSpec("long", "tokens")])
    return ModelSignature(inputs=inputs, outputs=outputs)


def find_version(model: str, digest: str, uri: str | None = None) -> str | None:
    """The registered version of ``model`` exported from the same bundle (``lab.digest`` tag), if any."""
    from mlflow.exceptions import MlflowException

    _, c, _ = client(uri)
    try:
        found = c.search_model_versions(f"name = '{model}' and tags.`lab.digest` = '{digest}'")
    except MlflowException:
        return None
    return min((mv.version for mv in found), key=int, default=None)


def model_bundle(found: dict[str, Any], uri: str | None = None) -> Path | None:
    """The bundle folder a registered version carries (``model_version``'s answer): read in place
    from a local artifact store, else downloaded; None when it carries none."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    from mlflow.exceptions import MlflowException

    mlflow, c, _ = client(uri)
    source = found.get("source") or ""
    if source.startswith("models:/m-"):  # a logged model (MLflow 3): its artifacts' own location
        location = c.get_logged_model(source.removeprefix("models:/")).artifact_location
        parsed = urlparse(location)
        if parsed.scheme in ("", "file"):
            local = Path(url2pathname(parsed.path)) / "artifacts" / "bundle"
            return local if local.is_dir() else None
    try:
        return Path(mlflow.artifacts.download_artifacts(artifact_uri=f"{source}/artifacts/bundle"))
    except (MlflowException, OSError):  # a version logged before bundles were its artifacts
        old = found.get("bundle")
        return Path(old) if old and Path(old).is_dir() else None


def export_model(run_id: str, bundle: Path, model: str, *, config_json: str, assemble_json: str,
                 verdict: str, uri: str | None = None, save_json: str | None = None,
                 data_json: str | None = None, digest: str | None = None,
                 example: dict[str, Any] | None = None) -> dict[str, Any]:
    """Log the bundle as a pyfunc model in ``run_id``, register a new version, and move @champion to
    it. A bundle already registered (same ``digest``) is not registered again: @champion moves back
    to that version and ``reused`` says so."""
    from mlflow.exceptions import MlflowException

    mlflow, c, _ = client(uri)
    try:
        c.create_registered_model(model, tags={"lab.kind": "memory-retrieval"},
                                  description="lab's gated retrieval configuration over a pinned store")
    except MlflowException as exc:
        if exc.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
    same = find_version(model, digest, uri) if digest else None
    if same is not None:
        c.set_registered_model_alias(model, CHAMPION, same)
        mv = c.get_model_version(model, same)
        return {"model": model, "version": same, "uri": f"models:/{model}@{CHAMPION}", "model_uri": mv.source,
                "reused": True}

    import pandas as pd

    from lab.track.model import LabModel  # heavy: fastapi, mlflow

    input_example = pd.DataFrame([{**example, "k": 5, "budget": 400}]) if example else None
    with mlflow.start_run(run_id=run_id):
        info = mlflow.pyfunc.log_model(name="model", python_model=LabModel(), artifacts={"bundle": str(bundle)},
                                       signature=model_signature(), input_example=input_example,
                                       pip_requirements=model_requirements(), code_paths=[lab_code()])
    tags = {"lab.config": config_json, "lab.assemble": assemble_json, "lab.bundle": str(Path(bundle).resolve()),
            "lab.verdict": verdict, **({"lab.save": save_json} if save_json else {}),
            **({"lab.digest": digest} if digest else {}),
            # the data each gate suite judged it on (corpus and gold fingerprints): a later gate
            # refuses to report a delta against it over different data
            **({"lab.data": data_json} if data_json else {})}
    mv = c.create_model_version(model, source=info.model_uri, run_id=run_id, model_id=info.model_id, tags=tags)
    c.set_registered_model_alias(model, CHAMPION, mv.version)
    return {"model": model, "version": mv.version, "uri": f"models:/{model}@{CHAMPION}", "model_uri": info.model_uri,
            "reused": False}
