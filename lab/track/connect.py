"""The tracking store: its URI, whether it answers, a deadline on every call, the experiment, the client.

A local store (SQLite under ``.lab/mlflow``) keeps artifacts beside it. A tracking server
(``http(s)://``) keeps them where the server says (``mlflow server --artifacts-destination DIR``
serves them as ``mlflow-artifacts:``): lab never gives a server's experiment a location on this
machine's disk, or a second machine could not read what the first logged.
"""
from __future__ import annotations

import contextlib
import logging
import shlex
import sys
import warnings
from pathlib import Path
from dataclasses import dataclass
from typing import Any, Iterator, Union

from lab.errors import LabError, LabWarning, ValidationError
from lab.workspace import Workspace, env_kept, set_library_env

EXPERIMENT = "lab"
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")  # MLflow 3's UI: runs, not traces
DEFAULT_DIR = Path(".lab/mlflow")
# where lab before issue 55 put a server's artifacts: a folder of the first client's disk
OLD_LOCAL_ARTIFACTS = "/.lab/mlflow/artifacts"
HEALTH_TIMEOUT_S = 5.0
RETRIES = 2  # each request to a server is tried at most 1 + RETRIES times (MLflow's own default is 7, ~4 min)
_configured: dict[str, str] = {}
_reachable: set[str] = set()
_warned: set[str] = set()


@dataclass(frozen=True)
class Tracking:
    """Where runs are logged and how long a tracking server may stay silent: an edge's workspace's
    (``Tracking.of``), handed to lab.track's entry points where they take ``uri``."""

    uri: str | None = None  # None: SQLite under .lab/mlflow
    timeout: float = Workspace().tracking_timeout  # the workspace's built-in default

    @classmethod
    def of(cls, workspace: Workspace) -> "Tracking":
        return cls(workspace.tracking_uri, workspace.tracking_timeout)


# what lab.track's entry points take as ``uri``: a Tracking, or a bare URI (None: SQLite under
# .lab/mlflow), with the built-in timeout
Where = Union[Tracking, str, None]


def timeout_of(where: Where) -> float:
    """The seconds a server may stay silent on one request, for ``where``."""
    return where.timeout if isinstance(where, Tracking) else Tracking.timeout


class TrackingError(LabError):
    """The tracking store failed during a command (a server that stopped answering, answered
    errors, or refused a write). One line: the server (without credentials), what lab was doing,
    why, and what is left to clean up when a run or a model could not be closed."""

    exit_code = 5
    http_status = 503

    def __init__(self, uri: str, doing: str, reason: str) -> None:
        self.uri, self.doing, self.reason = shown_uri(uri), doing, reason
        self.left: list[str] = []  # what could not be cleaned up, each as what to do about it
        super().__init__(self._line(), field="tracking_uri")

    def leave(self, what: str) -> None:
        self.left.append(what)
        self.args = (self._line(),)

    def _line(self) -> str:
        line = f"MLflow tracking store {self.uri} failed while {self.doing}: {self.reason}"
        return line + ("; " + "; ".join(self.left) if self.left else "")


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def shown_uri(uri: str) -> str:
    """``uri`` as errors and logs show it: no user, password or token (``https://u:p@host/x?token=t``
    is shown ``https://host/x``)."""
    from urllib.parse import urlsplit, urlunsplit

    if "://" not in uri:
        return uri
    parts = urlsplit(uri)
    if "@" not in parts.netloc and not parts.query and not parts.fragment:
        return uri  # nothing to hide (and sqlite:////abs/path keeps its empty host)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, "", ""))


def tracking_uri(uri: Where = None) -> str:
    """The tracking URI: the argument's (an edge hands its workspace's, $MLFLOW_TRACKING_URI), else SQLite under .lab/mlflow."""
    uri = uri.uri if isinstance(uri, Tracking) else uri
    if uri:
        return uri
    return f"sqlite:///{(DEFAULT_DIR / 'mlflow.db').resolve()}"


def answers(uri: str, timeout: float = HEALTH_TIMEOUT_S) -> str | None:
    """None when the server at ``uri`` answers its health check within ``timeout``, else why not."""
    from urllib.error import HTTPError, URLError
    from urllib.request import urlopen

    try:  # without the URI's user and password: urllib takes them for part of the port
        with urlopen(shown_uri(uri).rstrip("/") + "/health", timeout=timeout):
            return None
    except HTTPError:
        return None  # it answers (a proxy in front may not know /health, or wants credentials)
    except (URLError, OSError, ValueError) as exc:
        return str(getattr(exc, "reason", exc)).replace(uri, shown_uri(uri))


def require_reachable(uri: Where = None) -> None:
    """Refuse a tracking server nobody answers at, in seconds and in one line naming it (MLflow's
    client would retry for minutes, then fail with a traceback, after the work was done). Only
    http(s) URIs are servers; a local store is checked by opening it."""
    resolved = tracking_uri(uri)
    if not is_server(resolved) or resolved in _reachable:
        return
    why = answers(resolved)
    if why is not None:
        raise ValidationError(f"cannot reach the MLflow tracking server at {shown_uri(resolved)} ({why}); start it "
                              f"(`{mlflow_command()} server --backend-store-uri sqlite:///mlflow.db --artifacts-destination DIR`), "
                              "give another --tracking-uri, or --no-track", field="tracking_uri")
    _reachable.add(resolved)


def ui_command(uri: Where = None) -> str:
    """The command that shows these runs in MLflow's UI (a server: its own address)."""
    resolved = tracking_uri(uri)
    # shown_uri: a database URI's password is not printed (the user adds it back from where they keep it)
    return (f"open {shown_uri(resolved)}" if is_server(resolved)
            else f"{mlflow_command()} ui --backend-store-uri {shown_uri(resolved)}")


def mlflow_command() -> str:
    """The mlflow command of this environment (the project's .venv/bin/mlflow when lab runs from
    it), so a printed line works as it is, without an activated environment."""
    beside = Path(sys.executable).parent / "mlflow"
    return shlex.quote(str(beside)) if beside.is_file() else "mlflow"


def env_line(uri: Where = None) -> str:
    """The shell line that points MLflow (and `mlflow.pyfunc.load_model("models:/...")`) at this
    tracking store from any folder: MLflow's own default is an ``mlflow.db`` in the working folder."""
    return f"export MLFLOW_TRACKING_URI={shown_uri(tracking_uri(uri))}"


def load_line(model_uri: str) -> str:
    """The Python that loads a registered champion and answers its own input example (the gate's
    first question, so it fits whatever data the model serves), after ``env_line``: the project's
    own interpreter, named by its path (a bare ``python`` is another one on many machines), and
    what it prints is the ranked ids and the assembled context, not a truncated frame."""
    return (f"{shlex.quote(sys.executable)} -c 'import mlflow; m = mlflow.pyfunc.load_model(\"{model_uri}\"); "
            "r = m.predict(m.input_example).iloc[0]; print(list(r.memory_ids)); print(r.context)'")


def deadline_env(timeout_s: float) -> dict[str, str]:
    """MLflow's HTTP settings for a per-request deadline of ``timeout_s``: a silent server is
    given up after it, refused connections are retried RETRIES times within seconds."""
    return {"MLFLOW_HTTP_REQUEST_TIMEOUT": str(max(1, round(timeout_s))),
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(RETRIES), "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
            "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0"}


def call_bound_s(timeout_s: float | None = None) -> float:
    """The longest one tracking call can take before it fails: each try's deadline, and the backoff."""
    timeout = Tracking.timeout if timeout_s is None else timeout_s
    return (1 + RETRIES) * max(1, round(timeout)) + sum(2 ** i for i in range(1, RETRIES))


def _quiet(timeout_s: float) -> None:
    set_library_env({"MLFLOW_DISABLE_TELEMETRY": "true", "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
                     "MLFLOW_LOGGING_LEVEL": "WARNING", "GIT_PYTHON_REFRESH": "quiet",
                     # MLflow prints "View run at http://user:password@host/..." after each run
                     "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"})
    # the deadline handed down (the workspace's) is the one source: set over whatever the environment said
    set_library_env(deadline_env(timeout_s), overwrite=True)
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


def failure(exc: BaseException, timeout_s: float = Tracking.timeout) -> str | None:
    """Why a tracking call failed, in a few words without credentials, when ``exc`` is the tracking
    store failing (unreachable, silent, answering errors, refusing a value); None for anything else."""
    import re

    from mlflow.exceptions import MlflowException

    lost = transport_failure(exc, timeout_s)
    if lost is not None:
        return lost
    if isinstance(exc, MlflowException):
        text = str(exc).splitlines()[0] if str(exc) else exc.error_code
        code = re.search(r"failed with error code (\d{3})", text)
        if code:
            return f"it answered HTTP {code[1]}"
        # the server's own message (a refused value): without the request URL, which may hold credentials
        return re.sub(r"\b\w+://\S+", "<url>", text)[:240]
    return None


def transport_failure(exc: BaseException, timeout_s: float = Tracking.timeout) -> str | None:
    """Why the server could not be talked to (refused, lost, silent, answering errors), else None."""
    import re

    import requests

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, requests.exceptions.Timeout) or (
                isinstance(seen, requests.exceptions.ConnectionError) and "timed out" in str(seen).lower()):
            return f"no answer within {max(1, round(timeout_s))} s (setting tracking_timeout)"
        if isinstance(seen, requests.exceptions.RetryError):
            code = re.search(r"too many (\d{3})", str(seen))
            return f"it kept answering HTTP {code[1]}" if code else "it kept answering errors"
        if isinstance(seen, requests.exceptions.ConnectionError):
            return "connection refused" if "refused" in str(seen).lower() else "connection lost"
        if isinstance(seen, requests.exceptions.RequestException):
            return "connection lost"
        seen = seen.__cause__ or seen.__context__
    return None


@contextlib.contextmanager
def guarded(uri: Where, doing: str) -> Iterator[None]:
    """A tracking store failing inside becomes one `TrackingError` line naming it (no traceback)."""
    try:
        yield
    except LabError:
        raise
    except Exception as exc:
        reason = failure(exc, timeout_of(uri))
        if reason is None:
            raise
        raise TrackingError(tracking_uri(uri), doing, reason) from None


def client(uri: Where = None):
    """(mlflow module, MlflowClient, experiment id), the experiment created on first use."""
    _quiet(timeout_of(uri))
    import mlflow
    from mlflow import MlflowClient

    logging.getLogger("mlflow").setLevel(logging.WARNING)
    pyfunc_log = logging.getLogger("mlflow.pyfunc")
    if not any(isinstance(f, _DropKnownNoise) for f in pyfunc_log.filters):
        pyfunc_log.addFilter(_DropKnownNoise())
    resolved = tracking_uri(uri)
    require_reachable(resolved)
    # MLflow also writes the URI into $MLFLOW_TRACKING_URI, for its subprocesses: one call naming a
    # store would send every later subprocess of the caller (a `lab` command, a notebook server) and
    # every edge resolving its workspace from the environment to that store
    with env_kept("MLFLOW_TRACKING_URI"):
        mlflow.set_tracking_uri(resolved)
    if resolved not in _configured:
        with guarded(Tracking(resolved, timeout_of(uri)), f"opening experiment {EXPERIMENT!r}"):
            c = MlflowClient(resolved)
            exp_id = _server_experiment(c, resolved) if is_server(resolved) else _local_experiment(c, resolved)
        _configured[resolved] = exp_id
    return mlflow, MlflowClient(resolved), _configured[resolved]


def _local_experiment(c: Any, resolved: str) -> str:
    """A local store's experiment, its artifacts beside the store. First use of a new SQLite store
    is serialised with a file lock: MLflow creates its tables without one, and two processes
    creating them at once break the store for good."""
    import fcntl

    root = Path(resolved[len("sqlite:///"):]).parent if resolved.startswith("sqlite:///") else DEFAULT_DIR
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "mlflow.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        exp = c.get_experiment_by_name(EXPERIMENT)
        exp_id = exp.experiment_id if exp else c.create_experiment(
            EXPERIMENT, artifact_location=(root / "artifacts").resolve().as_uri())
        _mark_kind(c, exp, exp_id)
    return exp_id


def _server_experiment(c: Any, resolved: str) -> str:
    """A server's experiment, created with no artifact location: the server's own (its
    ``--artifacts-destination``, served as ``mlflow-artifacts:``). The server serialises creation;
    of two clients creating it at once, one is told it exists."""
    from mlflow.exceptions import MlflowException

    exp = c.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        try:
            c.create_experiment(EXPERIMENT)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
        exp = c.get_experiment_by_name(EXPERIMENT)
    location = exp.artifact_location or ""
    if location.startswith("file:") and location.rstrip("/").endswith(OLD_LOCAL_ARTIFACTS) and resolved not in _warned:
        _warned.add(resolved)
        warnings.warn(local_artifacts_advice(resolved, exp.experiment_id, location), LabWarning, stacklevel=3)
    _mark_kind(c, exp, exp.experiment_id)
    return exp.experiment_id


def local_artifacts_advice(uri: str, experiment_id: str, location: str) -> str:
    """One line: a server's experiment keeps its artifacts on one client's disk, and what to do."""
    return (f"experiment {EXPERIMENT!r} on {shown_uri(uri)} keeps its artifacts at {location}, the disk of the "
            "machine that created it (an older lab did): run folders and bundles logged there are out of other "
            f"machines' reach; rename it (`MLFLOW_TRACKING_URI={shown_uri(uri)} mlflow experiments rename "
            f"--experiment-id {experiment_id} --new-name lab-local-artifacts`) and lab makes a new one whose "
            "artifacts the server keeps")


def _mark_kind(c: Any, exp: Any, exp_id: str) -> None:
    if (exp.tags if exp else {}).get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
        # the UI opens a run list with metrics, not an empty GenAI traces page
        c.set_experiment_tag(exp_id, *EXPERIMENT_KIND)
