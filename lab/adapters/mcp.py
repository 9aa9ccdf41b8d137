"""A memory system reached as an MCP server, through the official SDK's client, declared in YAML:

    kind: mcp
    name: lab-mcp
    reads_env: [PYTHON, LAB_BUNDLE, LAB_MCP_STORE]          # every variable it reads (${...} below)
    command: ["${PYTHON:-python}", "-m", "lab", "mcp", "--bundle", "${LAB_BUNDLE}", "--store", "${LAB_MCP_STORE}"]
    # or: url: http://127.0.0.1:8080/mcp   with   headers: {Authorization: "Bearer ${LAB_API_KEY}"}
    timeout_s: 60
    reset: {tool: ..., arguments: {...}}                    # optional
    save:
      tool: memory_save
      arguments: {content: "{content}", namespace: "{namespace}", id: "{id}"}
      id: id                                                # in the tool's structured result
    search:
      tool: memory_search
      arguments: {query: "{query}", namespace: "{namespace}", k: "{k}"}
      hits: results[*]
      id: memory_id
      score: score

One session stays open for the whole evaluation (a background event loop holds it); each save is
one tool call per memory. A tool error comes back as an error naming the system, the call and the
tool's own message.

``${VAR}`` in ``command``, ``cwd``, ``env``, ``url`` and ``headers`` reads only the variables listed under
``reads_env``; errors and the client's log lines show ``${NAME}`` in place of a value read. An adapter
file is trusted like code: it runs the command it names, with the variables it declares.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import json
import threading
from typing import Any, Mapping, Sequence

from lab.adapters.base import AdapterError, Memory, MemorySystem, batch_ids, check_setting_names, ranked_hits
from lab.adapters.http import known_fields, positive
from lab.adapters.templates import check_path, pick, render
from lab.config.file_env import FileEnv
from lab.errors import ValidationError


def _tool(raw: Any, where: str, paths: Sequence[str], extra: Sequence[str] = ()) -> dict[str, Any]:
    known_fields(raw, ("tool", "arguments", *paths, *extra), where, ("tool",))
    for p in paths:
        if p in raw:
            check_path(raw[p], f"{where}.{p}")
    if "batch" in raw and (not isinstance(raw["batch"], int) or raw["batch"] < 1):
        raise ValidationError(f"{where}.batch: memories per call, a whole number >= 1, got {raw['batch']!r}")
    return dict(raw)


def _reason(exc: BaseException) -> str:
    """``Type: message`` of the error itself, not of the SDK's task-group wrapper around it."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


class McpSystem(MemorySystem):
    FIELDS = ("kind", "name", "reads_env", "approximates", "settings", "command", "url", "headers", "cwd", "env",
              "timeout_s", "reset", "save", "search")

    def __init__(self, spec: Mapping[str, Any], where: str, env: Mapping[str, str] | None = None) -> None:
        known_fields(spec, self.FIELDS, where, ("name", "save", "search"))
        self.env = FileEnv(spec.get("reads_env"), env, where)
        self.server_env: dict[str, str] = {}
        if ("command" in spec) == ("url" in spec):
            raise ValidationError(f"{where}: give exactly one of 'command' (stdio) or 'url' (streamable HTTP)")
        self.name = str(spec["name"])
        self.approximates = str(spec.get("approximates") or "")
        self.settings = check_setting_names(spec.get("settings") or {}, where)
        self.timeout = positive(spec, "timeout_s", 60, where)
        self.reset_call = _tool(spec["reset"], f"{where}: reset", ()) if spec.get("reset") else None
        self.save_call = _tool(spec["save"], f"{where}: save", ("id", "ids"), ("batch",))
        self.batch = int(self.save_call.get("batch", 0))
        if ("ids" if self.batch else "id") not in self.save_call:
            raise ValidationError(f"{where}: save needs " + ("'ids' (where the tool's result lists the saved ids, in order)"
                                  if self.batch else "'id' (where the tool's result gives the saved memory's id)"))
        self.search_call = _tool(spec["search"], f"{where}: search", ("hits", "id", "score"))
        for key in ("hits", "id"):
            if key not in self.search_call:
                raise ValidationError(f"{where}: search needs '{key}'")
        if "command" in spec:
            command = spec["command"]
            if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
                raise ValidationError(f"{where}: command must be a non-empty list of strings")
            extra = spec.get("env") or {}
            if not isinstance(extra, Mapping):
                raise ValidationError(f"{where}: env must be a mapping of variable names to values")
            command = [self.env.expand(c, "command") for c in command]
            cwd = self.env.expand(str(spec["cwd"]), "cwd") if spec.get("cwd") else None
            # the server's environment: the SDK's safe default (PATH, HOME, ...) with these on top
            self.server_env = {str(k): self.env.expand(str(v), f"env.{k}") for k, v in extra.items()}
            self.target = ("stdio", command, cwd)
        else:
            headers = spec.get("headers") or {}
            if not isinstance(headers, Mapping):
                raise ValidationError(f"{where}: headers must be a mapping of header names to values")
            headers = {str(k): self.env.expand(str(v), f"headers.{k}") for k, v in headers.items()}
            self.target = ("http", self.env.expand(str(spec["url"]), "url"), headers)
        self.log_filter = self.env.guard_logs()
        # one task owns the session from open to close (the SDK's task groups must be entered and
        # left in one task); calls from this thread reach it through a queue
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"mcp-{self.name}", daemon=True)
        self.thread.start()
        self.client: Any = None
        self.queue: asyncio.Queue = asyncio.run_coroutine_threadsafe(self._make_queue(), self.loop).result()
        ready: concurrent.futures.Future = concurrent.futures.Future()
        self.session = asyncio.run_coroutine_threadsafe(self._serve(ready), self.loop)
        try:
            ready.result(self.timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise self._error("connect", f"no session within {self.timeout:g} s") from None
        except Exception as exc:
            self.close()
            raise self._error("connect", _reason(exc)) from None

    def _error(self, call: str, problem: str) -> AdapterError:
        """An error for ``call`` that shows no value read from the environment, nor a URL's secrets."""
        return AdapterError(self.name, call, self.env.redact(problem))

    async def _make_queue(self) -> asyncio.Queue:
        return asyncio.Queue()

    def _server(self) -> Any:
        from mcp.client.stdio import StdioServerParameters

        if self.target[0] == "stdio":
            from mcp.client.stdio import get_default_environment

            _, command, cwd = self.target
            server_env = {**get_default_environment(), **self.server_env} if self.server_env else None
            return StdioServerParameters(command=command[0], args=command[1:], cwd=cwd, env=server_env)
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        _, url, headers = self.target
        return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=self.timeout))

    async def _serve(self, ready: concurrent.futures.Future) -> None:
        from mcp import Client

        try:
            async with Client(self._server(), read_timeout_seconds=self.timeout) as client:
                self.client = client
                ready.set_result(None)
                while True:
                    job = await self.queue.get()
                    if job is None:
                        return
                    make, done = job
                    try:
                        done.set_result(await make())
                    except Exception as exc:  # handed to the caller's thread
                        done.set_exception(exc)
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)

    def _run(self, make: Any, call: str) -> Any:
        done: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(self.queue.put_nowait, (make, done))
        try:
            return done.result(self.timeout)
        except concurrent.futures.TimeoutError:
            raise self._error(call, f"no answer within {self.timeout:g} s") from None
        except AdapterError:
            raise
        except Exception as exc:  # the SDK's and the transport's own errors, named
            raise self._error(call, _reason(exc)) from None

    async def _tool_call(self, call: str, spec: Mapping[str, Any], values: Mapping[str, Any]) -> Any:
        return await self._call_tool(call, spec["tool"], render(spec.get("arguments") or {}, values))

    async def _call_tool(self, call: str, tool: str, arguments: Any) -> Any:
        result = await self.client.call_tool(tool, arguments)
        if result.is_error:
            text = result.content[0].text if result.content else "(no message)"
            raise self._error(call, f"tool {tool} failed: {text}")
        if result.structured_content is not None:
            return result.structured_content
        try:
            return json.loads(result.content[0].text)
        except (ValueError, IndexError, AttributeError):
            raise AdapterError(self.name, call, f"tool {tool} returned no structured result or JSON text") from None

    def reset(self, namespace: str) -> None:
        if self.reset_call:
            self._run(lambda: self._tool_call("reset", self.reset_call, {"namespace": namespace}), "reset")

    def save(self, namespace: str, memories: Sequence[Memory]) -> dict[str, str]:
        async def all_of() -> dict[str, str]:
            out: dict[str, str] = {}
            if self.batch:  # one call per batch, its arguments' $each expanded over the memories
                for start in range(0, len(memories), self.batch):
                    batch = [{**m, "namespace": namespace} for m in memories[start:start + self.batch]]
                    args = render(self.save_call.get("arguments") or {}, {"namespace": namespace}, batch)
                    got = await self._call_tool("save", self.save_call["tool"], args)
                    out.update(batch_ids(self.name, batch, pick(got, self.save_call["ids"]), self.save_call["ids"]))
                return out
            for m in memories:
                got = await self._tool_call("save", self.save_call, {**m, "namespace": namespace})
                ids = pick(got, self.save_call["id"])
                if not ids:
                    raise self._error("save", f"no id at '{self.save_call['id']}' in {str(got)[:200]}")
                out[str(m["id"])] = str(ids[0])
            return out

        return self._run(all_of, "save")

    def search(self, namespace: str, query: str, k: int) -> list[tuple[str, float]]:
        got = self._run(lambda: self._tool_call("search", self.search_call,
                                                {"namespace": namespace, "query": query, "k": k}), "search")
        call = self.search_call
        return ranked_hits(self.name, got, call["hits"], call["id"], call.get("score"))

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.queue.put_nowait, None)
            try:
                self.session.result(30)
            except Exception:  # a session whose server already went away
                pass
            self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.log_filter.remove()
