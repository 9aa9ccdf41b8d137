"""Tracking: every `lab eval`, `lab sweep` and `lab gate` is an MLflow run. The only importer of mlflow.

The tracking store is local SQLite under ``.lab/mlflow`` unless ``--tracking-uri`` or
``MLFLOW_TRACKING_URI`` names another; a local store keeps artifacts beside it, a tracking server
where the server says (``mlflow server --artifacts-destination``). No server is started. Every
call to a server has a deadline (the workspace's ``tracking_timeout``) and fails in one line.

One module per job: ``connect`` (the URI, reachability, deadlines, the experiment, errors),
``runs`` (runs, params, metrics, run folders), ``registry`` (export, versions, @champion),
``packaging`` (the registered model's requirements and signature), ``model`` (the pyfunc model),
``code`` (lab's own folder and commit).
"""
from __future__ import annotations

from lab.track.code import git_commit, lab_code
from lab.track.connect import (DEFAULT_DIR, EXPERIMENT, EXPERIMENT_KIND, HEALTH_TIMEOUT_S, Tracking, TrackingError,
                               Where, call_bound_s, client, env_line, guarded, is_server, load_line, require_reachable,
                               shown_uri, tracking_uri, ui_command)
from lab.track.packaging import model_requirements, model_signature
from lab.track.registry import (CHAMPION, champion, champions, export_model, find_version, model_bundle,
                                model_version)
from lab.track.runs import (base_tags, end_run, flatten, log_dataset, log_eval, log_interval_table, log_metrics,
                            log_params, log_system, recent_runs, run)

__all__ = ["DEFAULT_DIR", "EXPERIMENT", "EXPERIMENT_KIND", "HEALTH_TIMEOUT_S", "Tracking", "TrackingError", "Where", "call_bound_s",
           "client", "env_line", "guarded", "is_server", "load_line", "require_reachable", "shown_uri",
           "tracking_uri", "ui_command", "model_requirements", "model_signature", "CHAMPION", "champion",
           "champions", "export_model", "find_version", "model_bundle", "model_version", "base_tags", "end_run",
           "flatten", "log_dataset", "log_eval", "log_interval_table", "log_metrics", "log_params", "log_system",
           "recent_runs", "run", "git_commit", "lab_code"]

