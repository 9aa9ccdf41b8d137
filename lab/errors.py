"""LabError and its few subclasses; mapped to exit codes (and later HTTP codes) at the edges."""
from __future__ import annotations


class LabError(Exception):
    """Base class of every error lab raises on purpose. ``field`` names the input field at fault
    (``content``, ``fusion.k``), when there is one: the edges report it (the server as the error
    body's ``field``) without reading it back out of the message."""

    exit_code = 1
    http_status = 500

    def __init__(self, *args: object, field: str | None = None) -> None:
        super().__init__(*args)
        self.field = field


class ValidationError(LabError, ValueError):
    """Input that does not meet the contract: a bad field, value, name or file."""

    exit_code = 2
    http_status = 422


class NotFoundError(LabError, KeyError):
    """A namespace, memory, edge or run that does not exist."""

    exit_code = 3
    http_status = 404

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else "not found"


class ConflictError(LabError):
    """The request conflicts with the store's state (exists already, incompatible model...)."""

    exit_code = 4
    http_status = 409


class StoreError(LabError):
    """The store on disk cannot be read or written as expected."""

    exit_code = 5
    http_status = 500


class StoreUnavailable(StoreError):
    """The store cannot be reached (an object store that does not answer): nothing is wrong with
    it, so a client may retry; the server answers 503."""

    exit_code = 5
    http_status = 503


class LabWarning(UserWarning):
    """Something a user should know that does not stop the work (a dataset file whose checksum lab
    does not know); the command line prints it as one ``warning:`` line."""
