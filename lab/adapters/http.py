"""A memory system behind an HTTP API, declared in a YAML file (no code): where it is, how to
authenticate, and for each call a request template and where the answer's ids and scores are.

    kind: http
    name: lab-http
    reads_env: [LAB_HTTP_URL, LAB_API_KEY]                                  # every variable it reads
    base_url: ${LAB_HTTP_URL:-http://127.0.0.1:8080}
    auth: {header: Authorization, env: LAB_API_KEY, prefix: "Bearer "}     # optional
    timeout_s: 30
    reset:                                                                   # optional, in order
      - {method: DELETE, path: "/v1/namespaces/{namespace}", accept: [200, 404]}
    save:
      method: POST
      path: /v1/memories/batch
      batch: 200                                                             # memories per request
      body: {memories: {$each: {namespace: "{namespace}", content: "{content}", id: "{id}"}}}
      ids: memories[*].id                                                    # one per memory, in order
    search:
      method: POST
      path: /v1/search
      body: {namespace: "{namespace}", query: "{query}", k: "{k}"}
      hits: results[*]
      id: memory_id
      score: score

Save templates see the memory's fields (id, content, created_at, title, tags, type, metadata) and
``namespace``; search templates ``namespace``, ``query`` and ``k``. ``${VAR:-default}`` in the base
URL reads the environment (handed down by the command line). The auth header's secret comes from an
environment variable only. A file reads only the variables it lists under ``reads_env`` (the auth
variable too); errors and the HTTP client's log lines show ``${NAME}`` in place of a value read, and
``***`` for a URL's userinfo and query values.

An adapter file is trusted like code: it sends the variables it declares to the host it names.
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

from lab.adapters.base import AdapterError, Memory, MemorySystem, batch_ids, hits_or_error
from lab.adapters.templates import FileEnv, check_path, pick, ranked, render
from lab.errors import ValidationError

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def known_fields(data: Mapping[str, Any], allowed: Sequence[str], where: str, required: Sequence[str] = ()) -> None:
    """Refuse unknown and missing fields of a mapping, naming them and the known ones."""
    if not isinstance(data, Mapping):
        raise ValidationError(f"{where}: expected a mapping with {list(allowed)}, got {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ValidationError(f"{where}: unknown field(s) {unknown}; known: {list(allowed)}")
    missing = [f for f in required if f not in data]
    if missing:
        raise ValidationError(f"{where}: missing field(s) {missing}")


def _request(raw: Any, where: str, extra: Sequence[str] = ()) -> dict[str, Any]:
    known_fields(raw, ("method", "path", "body", "params", "accept", *extra), where, ("path",))
    method = str(raw.get("method", "POST")).upper()
    if method not in METHODS:
        raise ValidationError(f"{where}.method: {raw.get('method')!r} is not one of {list(METHODS)}")
    accept = raw.get("accept", [])
    if not isinstance(accept, list) or not all(isinstance(s, int) for s in accept):
        raise ValidationError(f"{where}.accept: a list of HTTP statuses, got {accept!r}")
    return {**raw, "method": method, "accept": accept}


class HttpSystem(MemorySystem):
    FIELDS = ("kind", "name", "reads_env", "approximates", "settings", "base_url", "auth", "timeout_s", "reset",
              "save", "search")

    def __init__(self, spec: Mapping[str, Any], where: str, env: Mapping[str, str] | None = None) -> None:
        import httpx

        known_fields(spec, self.FIELDS, where, ("name", "base_url", "save", "search"))
        self.name = str(spec["name"])
        self.approximates = str(spec.get("approximates") or "")
        self.settings = dict(spec.get("settings") or {})
        self.env = FileEnv(spec.get("reads_env"), env, where)
        self.base_url = self.env.expand(str(spec["base_url"]), "base_url").rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValidationError(f"{where}: base_url {self.env.redact(self.base_url)!r} is not an http:// or "
                                  "https:// URL")
        self.timeout = float(spec.get("timeout_s", 30))
        headers = {}
        if spec.get("auth"):
            auth = spec["auth"]
            known_fields(auth, ("header", "env", "prefix"), f"{where}: auth", ("header", "env"))
            secret = self.env.read(str(auth["env"]), "auth.env")
            if not secret:
                raise ValidationError(f"{where}: auth reads ${auth['env']}, which is not set")
            headers[auth["header"]] = f"{auth.get('prefix', '')}{secret}"
        resets = spec.get("reset") or []
        self.resets = [_request(r, f"{where}: reset[{i}]") for i, r in enumerate(resets if isinstance(resets, list) else [resets])]
        self.save_req = _request(spec["save"], f"{where}: save", ("batch", "ids"))
        self.save_req["batch"] = int(self.save_req.get("batch", 1))
        if "ids" not in self.save_req:
            raise ValidationError(f"{where}: save needs 'ids' (where the response lists the saved memories' ids)")
        check_path(self.save_req["ids"], f"{where}: save.ids")
        self.search_req = _request(spec["search"], f"{where}: search", ("hits", "id", "score"))
        for key in ("hits", "id"):
            if key not in self.search_req:
                raise ValidationError(f"{where}: search needs '{key}'")
            check_path(self.search_req[key], f"{where}: search.{key}")
        if "score" in self.search_req:
            check_path(self.search_req["score"], f"{where}: search.score")
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)
        self.log_filter = self.env.guard_logs()

    def _error(self, call: str, problem: str) -> AdapterError:
        """An error for ``call`` that shows no value read from the environment, nor a URL's secrets."""
        return AdapterError(self.name, call, self.env.redact(problem))

    def _call(self, call: str, req: Mapping[str, Any], values: Mapping[str, Any],
              items: list[Mapping[str, Any]] | None = None) -> Any:
        import httpx

        path = render(req["path"], values)
        body = render(req.get("body"), values, items) if "body" in req else None
        params = render(req.get("params"), values) if "params" in req else None
        try:
            r = self.client.request(req["method"], path, json=body, params=params)
        except httpx.TimeoutException:
            raise self._error(call, f"no answer from {self.base_url}{path} within {self.timeout:g} s") from None
        except httpx.HTTPError as exc:
            raise self._error(call, f"cannot reach {self.base_url}{path} ({type(exc).__name__}: {exc})") from None
        if r.status_code >= 300 and r.status_code not in req["accept"]:
            raise self._error(call, f"{req['method']} {path} answered {r.status_code}: {r.text[:300]}")
        try:
            return r.json() if r.content else None
        except ValueError:
            raise self._error(call, f"{req['method']} {path} answered {r.status_code} with a body that is not "
                                    f"JSON: {r.text[:200]!r}") from None

    def reset(self, namespace: str) -> None:
        for req in self.resets:
            self._call("reset", req, {"namespace": namespace})

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        out: dict[str, str] = {}
        size = max(1, self.save_req["batch"])
        for start in range(0, len(memories), size):
            batch = [{**m, "namespace": namespace} for m in memories[start:start + size]]
            got = self._call("save", self.save_req, {"namespace": namespace, **(batch[0] if size == 1 else {})}, batch)
            out.update(batch_ids(self.name, batch, pick(got, self.save_req["ids"]), self.save_req["ids"]))
        return out

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        got = self._call("search", self.search_req, {"namespace": namespace, "query": query, "k": k})
        req = self.search_req
        return hits_or_error(self.name, ranked(got, req["hits"], req["id"], req.get("score")), req["id"])

    def close(self) -> None:
        self.client.close()
        self.log_filter.remove()
