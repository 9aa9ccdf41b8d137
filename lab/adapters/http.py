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
``namespace``; search templates ``namespace``, ``query`` and ``k``. For a server that answers
otherwise (ChromaDB's own server is described by ``goldens/systems/chroma-server.yaml``):

- ``capture: {collection: id}`` on any request keeps a value of its answer (a path) for the
  namespace it was made for: later templates of that namespace use it as ``{collection}``;
- ``embed: {model: NAME, text: "{content}"}`` (top level) embeds on the client, through lab's model
  registry, for a server that does not: save templates then see ``{embedding}`` per memory (also
  inside ``$each``), search templates the query's ``{embedding}``; the model is recorded in the run;
- ``ids: $request`` takes the saved memories' ids from the request (the ids sent) when the answer
  has none (``{}``), and ``then:`` lists requests made after each save batch (an index build);
- without ``hits``, ``id`` and ``score`` (or ``distance``: the score is ``1 - distance``) are
  columnar paths from the answer's root, zipped together (``ids[0][*]`` beside ``distances[0][*]``). ``${VAR:-default}`` in the base
URL reads the environment (handed down by the command line). The auth header's secret comes from an
environment variable only. A file reads only the variables it lists under ``reads_env`` (the auth
variable too); errors and the HTTP client's log lines show ``${NAME}`` in place of a value read, and
``***`` for a URL's userinfo and query values.

What a server answers is not trusted: a placeholder in a ``path`` takes its value as one path
segment (percent-encoded: a captured ``../admin`` or ``?x=1`` stays inside its segment); a path
whose values would make it an absolute URL or move it to another host is refused, naming the
placeholder and its value; a capture must be a string, number or boolean (at most
``MAX_CAPTURE_CHARS``); every call ends within ``deadline_s`` (default: four times ``timeout_s``,
which bounds each connect, send and read) and reads at most ``max_answer_mb`` (default 64) of
answer; a score or distance must be a finite number. Each refusal names the setting or field.

An adapter file is trusted like code: it sends the variables it declares to the host it names.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from lab.adapters.base import AdapterError, Memory, MemorySystem, batch_ids, check_setting_names, ranked_hits
from lab.adapters.http_call import Bounds, send
from lab.adapters.templates import check_path, pick, render, zipped
from lab.config.file_env import FileEnv
from lab.config import EmbedConfig
from lab.errors import ValidationError

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
MAX_CAPTURE_CHARS = 1024  # a captured value goes into URLs: an id, not a document


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


REQUEST_IDS = "$request"  # save.ids: the ids the request sent (an answer that lists none)


def _request(raw: Any, where: str, extra: Sequence[str] = ()) -> dict[str, Any]:
    known_fields(raw, ("method", "path", "body", "params", "accept", "capture", *extra), where, ("path",))
    capture = raw.get("capture", {})
    if not isinstance(capture, Mapping) or not all(isinstance(k, str) and k.isidentifier() for k in capture):
        raise ValidationError(f"{where}.capture: a mapping of names to answer paths (like {{collection: id}}), "
                              f"got {capture!r}")
    for name, path in capture.items():
        check_path(path, f"{where}.capture.{name}")
    method = str(raw.get("method", "POST")).upper()
    if method not in METHODS:
        raise ValidationError(f"{where}.method: {raw.get('method')!r} is not one of {list(METHODS)}")
    accept = raw.get("accept", [])
    if not isinstance(accept, list) or not all(isinstance(s, int) for s in accept):
        raise ValidationError(f"{where}.accept: a list of HTTP statuses, got {accept!r}")
    return {**raw, "method": method, "accept": accept}


def positive(spec: Mapping[str, Any], key: str, default: float, where: str) -> float:
    """A setting that is a finite number > 0 (seconds, megabytes), or a ValidationError naming it."""
    value = spec.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValidationError(f"{where}: {key} is a number > 0, got {value!r}")
    return float(value)


class HttpSystem(MemorySystem):
    FIELDS = ("kind", "name", "reads_env", "approximates", "settings", "base_url", "auth", "timeout_s", "deadline_s",
              "max_answer_mb", "embed", "reset", "save", "search")

    def __init__(self, spec: Mapping[str, Any], where: str, env: Mapping[str, str] | None = None) -> None:
        import httpx

        known_fields(spec, self.FIELDS, where, ("name", "base_url", "save", "search"))
        self.name = str(spec["name"])
        self.approximates = str(spec.get("approximates") or "")
        self.settings = check_setting_names(spec.get("settings") or {}, where)
        self.env = FileEnv(spec.get("reads_env"), env, where)
        self.base_url = self.env.expand(str(spec["base_url"]), "base_url").rstrip("/")
        if not self.base_url.startswith(("http://", "https://")):
            raise ValidationError(f"{where}: base_url {self.env.redact(self.base_url)!r} is not an http:// or "
                                  "https:// URL")
        self.timeout = positive(spec, "timeout_s", 30, where)
        self.bounds = Bounds(self.timeout, positive(spec, "deadline_s", 4 * self.timeout, where),
                             int(positive(spec, "max_answer_mb", 64, where) * 1024 * 1024))
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
        self.save_req = _request(spec["save"], f"{where}: save", ("batch", "ids", "then"))
        self.save_req["batch"] = self.save_req.get("batch", 1)
        if isinstance(self.save_req["batch"], bool) or not isinstance(self.save_req["batch"], int) or \
                self.save_req["batch"] < 1:
            raise ValidationError(f"{where}: save.batch: memories per request, a whole number >= 1, got "
                                  f"{self.save_req['batch']!r}")
        if "ids" not in self.save_req:
            raise ValidationError(f"{where}: save needs 'ids' (where the response lists the saved memories' ids, "
                                  f"or {REQUEST_IDS} for the ids sent)")
        if self.save_req["ids"] != REQUEST_IDS:
            check_path(self.save_req["ids"], f"{where}: save.ids")
        then = self.save_req.get("then") or []
        self.save_then = [_request(r, f"{where}: save.then[{i}]") for i, r in enumerate(then if isinstance(then, list)
                                                                                       else [then])]
        self.search_req = _request(spec["search"], f"{where}: search", ("hits", "id", "score", "distance"))
        if "id" not in self.search_req:
            raise ValidationError(f"{where}: search needs 'id' (a path in each hit, or a column without 'hits')")
        if "score" in self.search_req and "distance" in self.search_req:
            raise ValidationError(f"{where}: search takes 'score' or 'distance', not both")
        for key in ("hits", "id", "score", "distance"):
            if key in self.search_req:
                check_path(self.search_req[key], f"{where}: search.{key}")
        if "distance" in self.search_req and "hits" in self.search_req:
            raise ValidationError(f"{where}: search.distance is for columnar answers (without 'hits'); "
                                  "give 'score' for a list of hits")
        self.embedder, self.embed_text = self._embedder(spec.get("embed"), where)
        self.captured: dict[str, dict[str, Any]] = {}  # namespace -> name -> value kept from an answer
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.timeout)
        self.log_filter = self.env.guard_logs()

    def _embedder(self, raw: Any, where: str) -> tuple[Any, str]:
        """The client-side embedder of ``embed:`` (None: the server embeds)."""
        if raw is None:
            return None, ""
        known_fields(raw, ("model", "text"), f"{where}: embed", ("model",))
        from lab.embed.registry import make_embedder  # heavy: a model, only for a file that asks

        embedder = make_embedder(EmbedConfig(model=str(raw["model"])))
        self.settings = {**self.settings, "client_embedding_model": embedder.model_id}
        return embedder, str(raw.get("text", "{content}"))

    def _error(self, call: str, problem: str) -> AdapterError:
        """An error for ``call`` that shows no value read from the environment, nor a URL's secrets."""
        return AdapterError(self.name, call, self.env.redact(problem))

    def _call(self, call: str, req: Mapping[str, Any], values: Mapping[str, Any],
              items: list[Mapping[str, Any]] | None = None) -> Any:
        body = render(req.get("body"), values, items) if "body" in req else None
        params = render(req.get("params"), values) if "params" in req else None
        answer, status = send(self.client, call, req, values, body, params, self.bounds,
                              self.captured.get(str(values.get("namespace")), {}), self._error)
        if status < 300:
            self._capture(call, req, answer, values)
        return answer

    def _capture(self, call: str, req: Mapping[str, Any], answer: Any, values: Mapping[str, Any]) -> None:
        for name, path in req.get("capture", {}).items():
            got = pick(answer, path)
            if not got or got[0] is None:
                raise self._error(call, f"{req['method']} {req['path']}: no value at '{path}' in the answer to "
                                        f"capture as {{{name}}}: {str(answer)[:200]}")
            value = got[0]
            if not isinstance(value, (str, int, float, bool)):  # a list or object has no one way into a URL
                raise self._error(call, f"{req['method']} {req['path']}: the value at '{path}' to capture as "
                                        f"{{{name}}} is a {type(value).__name__}, not a string, number or boolean: "
                                        f"{str(value)[:100]}")
            if isinstance(value, str) and len(value) > MAX_CAPTURE_CHARS:
                raise self._error(call, f"{req['method']} {req['path']}: the value at '{path}' to capture as "
                                        f"{{{name}}} has {len(value)} characters, more than {MAX_CAPTURE_CHARS}: "
                                        f"{value[:60]!r}...")
            self.captured.setdefault(str(values.get("namespace")), {})[name] = value

    def _values(self, namespace: str, more: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What a template of ``namespace`` sees: its captured values, then the call's own."""
        return {**self.captured.get(namespace, {}), **(more or {}), "namespace": namespace}

    def _vectors(self, texts: list[str], queries: bool = False) -> list[list[float]]:
        vectors = self.embedder.embed_queries(texts) if queries else self.embedder.embed(texts)
        return [[float(x) for x in v] for v in vectors]

    def reset(self, namespace: str) -> None:
        self.captured.pop(namespace, None)
        for req in self.resets:
            self._call("reset", req, self._values(namespace))

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        out: dict[str, str] = {}
        size = max(1, self.save_req["batch"])
        for start in range(0, len(memories), size):
            batch = [{**self.captured.get(namespace, {}), **m, "namespace": namespace}
                     for m in memories[start:start + size]]
            if self.embedder is not None:
                texts = [str(render(self.embed_text, m) or "") for m in batch]
                for m, vector in zip(batch, self._vectors(texts)):
                    m["embedding"] = vector
            got = self._call("save", self.save_req, self._values(namespace, batch[0] if size == 1 else None), batch)
            ids_at = self.save_req["ids"]
            ids = [m["id"] for m in batch] if ids_at == REQUEST_IDS else pick(got, ids_at)
            out.update(batch_ids(self.name, batch, ids, ids_at))
            for req in self.save_then:
                self._call("save", req, self._values(namespace))
        return out

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        more: dict[str, Any] = {"query": query, "k": k}
        if self.embedder is not None:
            more["embedding"] = self._vectors([query], queries=True)[0]
        got = self._call("search", self.search_req, self._values(namespace, more))
        req = self.search_req
        if "hits" in req:
            return ranked_hits(self.name, got, req["hits"], req["id"], req.get("score"))
        try:
            return zipped(got, req["id"], req.get("score") or req.get("distance"), "distance" in req)
        except (ValueError, TypeError) as exc:
            raise self._error("search", str(exc)) from None

    def close(self) -> None:
        self.client.close()
        self.log_filter.remove()
