"""What a registered model carries besides its bundle: its environment (requirements) and its signature."""
from __future__ import annotations


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
