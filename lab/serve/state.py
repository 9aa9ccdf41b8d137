"""What the app and its routes share: the app's state, the error routes raise, and the one error
body every error leaves as (``{"error": {"status", "code", "message", "field"}}``)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse

from lab.serve.auth import KeyRing, RateLimiter
from lab.serve.metrics import Metrics
from lab.serve.service import MemoryService
from lab.serve.settings import Settings

CODES = {400: "bad_request", 401: "unauthenticated", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
         409: "conflict", 413: "too_large", 415: "not_json", 421: "misdirected", 422: "invalid", 429: "rate_limited", 500: "internal", 503: "unavailable"}


class ApiError(Exception):
    """An HTTP error with lab's body; raised by routes and dependencies."""

    def __init__(self, status: int, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field, self.headers = status, message, field, headers


def error_response(status: int, message: str, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": {"status": status, "code": CODES.get(status, "error"), "message": message, "field": field}}
    return JSONResponse(body, status_code=status, headers=headers)


@dataclass
class AppState:
    settings: Settings
    service: MemoryService
    keys: KeyRing
    limiter: RateLimiter
    metrics: Metrics
    auth_on: bool
    proxy_client: Any = None  # an httpx.AsyncClient to the chat proxy's upstream, when one is set
