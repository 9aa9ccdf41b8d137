"""Embeddings from an OpenAI-compatible server (``/embeddings``): hosted APIs, text-embeddings-inference,
vLLM, Ollama, infinity, LM Studio. What names one: ``lab.embed.server_spec``.

Texts go in batches of ``batch_size``, at most ``concurrency`` requests at once per model in a
process (a Ray worker is a process: each keeps the same limit). A request answered 429 or 5xx, or
not at all, is sent again after the server's ``Retry-After`` or a doubling wait, while the
request's deadline allows; anything else is one error naming the URL and the problem, never the key.
Answers are checked: one vector per text, all of one dimension (the declared or first seen one),
finite, then L2-normalised (or, with ``normalize: false``, checked to be of unit length).
"""
from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from lab.embed.base import normalize_rows
from lab.embed.server_spec import ServerSpec
from lab.embed.st import HFTokenizer, model_dir
from lab.errors import LabError

MAX_ANSWER_BYTES = 256 * 1024 ** 2
MAX_WAIT_S = 30.0  # the longest pause between two attempts, whatever Retry-After asks
_limits: dict[str, threading.BoundedSemaphore] = {}  # per model and server: requests in flight in this process
_limits_lock = threading.Lock()


class ServerError(LabError):
    """A model server that did not give a usable answer: unreachable, refused, or answered wrongly."""

    exit_code = 1
    http_status = 502


def _wait_from(retry_after: str | None, attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: the server's Retry-After (seconds or a date),
    else 0.25 s doubling per attempt."""
    if retry_after:
        try:
            return max(0.0, float(retry_after))
        except ValueError:
            try:
                return max(0.0, parsedate_to_datetime(retry_after).timestamp() - time.time())
            except (TypeError, ValueError):
                pass
    return 0.25 * 2 ** attempt


def route_url(base_url: str, route: str) -> str:
    """``base_url`` with ``route`` added to its path (a query string, as some hosted APIs take a key
    or version in, stays after it)."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + route, parts.query, parts.fragment))


class ServerClient:
    """POSTs JSON to one server, within its spec's bounds (see the module's docstring)."""

    def __init__(self, spec: ServerSpec) -> None:
        self.spec = spec
        self._client: Any = None
        self._lock = threading.Lock()
        self.requests = 0  # requests sent (retries included): lets a caller see a cached run made none
        key = f"{spec.model}@{spec.base_url}"
        with _limits_lock:
            self._limit = _limits.setdefault(key, threading.BoundedSemaphore(spec.concurrency))

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:
                import httpx

                self._client = httpx.Client(timeout=self.spec.timeout_s, follow_redirects=False)
            return self._client

    def error(self, problem: str) -> ServerError:
        return ServerError(self.spec.env.redact(problem), field="embed.model")

    def post(self, route: str, body: dict) -> tuple[Any, dict]:
        """The parsed JSON answer to ``body`` POSTed to ``base_url + route``, and its headers."""
        spec = self.spec
        url, shown = route_url(spec.base_url, route), route_url(spec.shown_url, route)
        headers = spec.headers()
        deadline = time.monotonic() + spec.deadline_s
        # the HTTP client's own log lines (a request's URL) redacted while this request runs; the
        # client loggers are left as they were found afterwards
        guard = spec.env.guard_logs()
        try:
            return self._attempts(url, shown, body, headers, deadline)
        finally:
            guard.remove()

    def _attempts(self, url: str, shown: str, body: dict, headers: dict, deadline: float) -> tuple[Any, dict]:
        spec = self.spec
        last, attempts, why = "", 0, f"within deadline_s {spec.deadline_s:g}"
        with self._limit:
            for attempt in range(spec.retries + 1):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                attempts += 1
                status, content, answer_headers, last = self._once(url, shown, body, headers, left)
                if status is not None and status < 300:
                    return self._parsed(content, shown, status), answer_headers
                if status is not None and status != 429 and status < 500:
                    raise self.error(self._refusal(status, content, shown))
                wait = min(_wait_from(answer_headers.get("retry-after") if status else None, attempt), MAX_WAIT_S)
                if attempt == spec.retries:
                    why = f"after {attempts} attempt(s) (retries {spec.retries})"
                    break
                if time.monotonic() + wait >= deadline:
                    break
                time.sleep(wait)
        raise self.error(f"{shown}: no usable answer {why} ({attempts} attempt(s); last: {last})")

    def _once(self, url: str, shown: str, body: dict, headers: dict, left: float) -> tuple:
        """(status or None, body bytes, headers, what happened) of one attempt."""
        import httpx

        self.requests += 1
        one = min(self.spec.timeout_s, left)
        stop = time.monotonic() + left  # a body dripped a byte at a time never trips a read timeout
        try:
            with self._http().stream("POST", url, json=body, headers=headers, timeout=httpx.Timeout(one)) as r:
                content = bytearray()
                for chunk in r.iter_bytes():
                    content += chunk
                    if len(content) > MAX_ANSWER_BYTES:
                        raise self.error(f"{shown}: the answer passed {MAX_ANSWER_BYTES // 1024 ** 2} MB and was dropped")
                    if time.monotonic() > stop:
                        return None, b"", {}, f"the answer did not finish within the deadline ({len(content)} bytes read)"
                lowered = {k.lower(): v for k, v in r.headers.items()}
                return r.status_code, bytes(content), lowered, f"{r.status_code} {bytes(content[:200]).decode('utf-8', 'replace')}"
        except httpx.TimeoutException:
            return None, b"", {}, f"no answer within {one:g} s (timeout_s)"
        except httpx.HTTPError as exc:
            return None, b"", {}, f"cannot reach {shown} ({type(exc).__name__}: {exc})"

    def _refusal(self, status: int, content: bytes, shown: str) -> str:
        if status in (401, 403):  # the body may quote part of the key: not shown
            via = f"${self.spec.auth_env}" if self.spec.auth_env else "no key (none is declared)"
            return f"{shown} refused the key ({status}); the key is read from {via}"
        text = content[:300].decode("utf-8", "replace")
        if status == 404 or "model" in text.lower():
            return f"{shown} answered {status} for model {self.spec.model!r} (does it serve that model?): {text}"
        return f"{shown} answered {status}: {text}"

    def _parsed(self, content: bytes, shown: str, status: int) -> Any:
        try:
            return json.loads(content)
        except ValueError:
            raise self.error(f"{shown} answered {status} with a body that is not whole JSON (cut short?): "
                             f"{content[:120].decode('utf-8', 'replace')!r}") from None

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class ServerEmbedder:
    """An Embedder (lab.embed.base) whose vectors come from an OpenAI-compatible server."""

    def __init__(self, spec: ServerSpec, space: str | None = None) -> None:
        self.spec = spec
        self.model_id = spec.model_id
        self.space = space or self.model_id  # a declared space (lab.embed.registry resolves the file's)
        self.symmetric = spec.query_prefix == spec.passage_prefix
        self.batch_size = spec.batch_size
        self.max_seq_length = spec.max_tokens
        # chunk sizes are counted with a local tokenizer: the file's, else the bundled MiniLM's
        self.tokenizer = HFTokenizer(Path(spec.tokenizer) if spec.tokenizer else model_dir())
        self.client = ServerClient(spec)
        self._dim = spec.dimensions
        self.served_model: str | None = None  # the model name the server answered with

    @property
    def dim(self) -> int:
        """The vectors' dimension: declared, known from a store or cache, else asked with one probe call."""
        if self._dim is None:
            self._dim = int(self._embed(["dimension probe"], "")[0].shape[0])
        return self._dim

    def assume_dim(self, dim: int) -> None:
        """The dimension a store or cache already holds for this model (no probe needed); answers are checked against it."""
        if self._dim is None:
            self._dim = int(dim)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self.spec.passage_prefix)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(texts, self.spec.query_prefix)

    def _embed(self, texts: Sequence[str], prefix: str) -> np.ndarray:
        texts = [prefix + t for t in texts]
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        batches = [texts[i:i + self.batch_size] for i in range(0, len(texts), self.batch_size)]
        if len(batches) == 1 or self.spec.concurrency == 1:
            parts = [self._batch(b) for b in batches]
        else:
            with ThreadPoolExecutor(min(self.spec.concurrency, len(batches)), thread_name_prefix="lab-embed") as pool:
                parts = list(pool.map(self._batch, batches))
        return np.vstack(parts)

    def _batch(self, texts: list[str]) -> np.ndarray:
        body: dict[str, Any] = {"model": self.spec.model, "input": texts, "encoding_format": "float"}
        if self.spec.send_dimensions:
            body["dimensions"] = self.spec.dimensions
        answer, _ = self.client.post("/embeddings", body)
        vectors = self._vectors(answer, len(texts))
        if isinstance(answer, dict) and isinstance(answer.get("model"), str):
            self.served_model = answer["model"]
        return vectors

    def _vectors(self, answer: Any, n: int) -> np.ndarray:
        shown = route_url(self.spec.shown_url, "/embeddings")
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, list):
            raise self.client.error(f"{shown}: the answer has no data list (not an OpenAI embeddings answer)")
        if len(data) != n:
            raise self.client.error(f"{shown}: the answer holds {len(data)} vectors for {n} texts (cut short?)")
        order = [item.get("index", i) if isinstance(item, dict) else None for i, item in enumerate(data)]
        if sorted(o for o in order if isinstance(o, int)) != list(range(n)):
            raise self.client.error(f"{shown}: the answer's indexes are not 0..{n - 1}")
        rows: list[Any] = [None] * n
        for at, item in zip(order, data):
            rows[at] = item.get("embedding")
        dims = {len(r) if isinstance(r, list) else -1 for r in rows}
        if len(dims) != 1 or -1 in dims:
            raise self.client.error(f"{shown}: the answer's vectors are not lists of one length ({sorted(dims)})")
        dim = dims.pop()
        expected = self._dim
        if expected is not None and dim != expected:
            raise self.client.error(f"{shown}: model {self.spec.model!r} answered {dim}-dimensional vectors, "
                                    f"expected {expected}")
        try:
            vectors = np.asarray(rows, dtype=np.float64)
        except (TypeError, ValueError):
            raise self.client.error(f"{shown}: the answer's vectors hold values that are not numbers") from None
        bad = ~np.isfinite(vectors).all(axis=1)
        if bad.any():
            raise self.client.error(f"{shown}: the vector of text {int(np.flatnonzero(bad)[0])} holds NaN or "
                                    "infinite values")
        norms = np.linalg.norm(vectors, axis=1)
        if (norms == 0).any():
            raise self.client.error(f"{shown}: the vector of text {int(np.flatnonzero(norms == 0)[0])} is all zeros")
        if not self.spec.normalize and np.abs(norms - 1).max() > 1e-3:
            raise self.client.error(f"{shown}: vectors of length {float(norms.min()):.4g} to {float(norms.max()):.4g}, "
                                    "but the model file says they come normalised (normalize: false)")
        if self._dim is None:  # the first answer fixes the dimension every later one is checked against
            self._dim = dim
        return normalize_rows(vectors).astype(np.float32)

    def close(self) -> None:
        self.client.close()
