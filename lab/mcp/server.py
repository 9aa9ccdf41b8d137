"""The MCP face: memory tools and resources for agents, over the served champion.

The tools are generated from the table of operations (``lab.serve.operations``), the operations
REST uses: the same input models (so the same limits, closed sets and descriptions), the same
permission checks, the same single committer (a save is committed, indexed and searchable when
the tool returns), the same errors (``lab.serve.errors.public_error``). An unknown argument is
refused naming the known ones, and a bad value is named in lab's words.

Who is calling: on the HTTP transport, the key the request carried (``lab.mcp.http.KeyGate``
put it in the request's scope); on stdio, the local user, limited by a ``LocalPolicy``.
"""
from __future__ import annotations

import inspect
import json
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Optional

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import ToolAnnotations
from pydantic import ValidationError
from pydantic.fields import FieldInfo

from lab.errors import LabError
from lab.serve import ops
from lab.serve.auth import ApiKey
from lab.serve.caller import Caller
from lab.serve.contract import NamespaceRef
from lab.serve.errors import public_error, store_roots, validation_error
from lab.serve.operations import OPERATIONS, Operation
from lab.serve.state import ApiError, AppState
from lab.version import __version__

SCOPE_KEY = "lab.caller"  # where KeyGate leaves the authenticated caller in an HTTP request's scope
NAMESPACE_DEFAULT = " (default: this server's or your key's one namespace)"

INSTRUCTIONS = """Long-term memory. Before answering from memory, call memory_search (ranked memories) or
memory_context (an assembled, cited context within a token budget). Before saving a fact, call memory_check: it
shows what is stored already and what may contradict the new text, so you can memory_update instead of saving a
duplicate. Link related memories with memory_link; forget wrong ones with memory_forget."""


@dataclass(frozen=True)
class LocalPolicy:
    """What a stdio session (the local user) may do: a default namespace, an allow-list of
    namespace patterns ('*', 'team-a/*', 'project-x') and whether it may write."""
    namespace: str | None = None
    allow: tuple[str, ...] = ("*",)
    read_only: bool = False

    def caller(self) -> Caller:
        if self.allow == ("*",) and not self.read_only:
            return Caller(None)
        return Caller(ApiKey("local", "-", "read" if self.read_only else "write", self.allow))


class LabMCPServer(MCPServer):
    """The SDK's server, holding each tool call to its operation's input: an unknown argument is
    refused naming the known ones (the SDK would drop it silently), and a value the model refuses
    is named in lab's words (the SDK's text ends with a pydantic documentation link)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lab_tools: dict[str, Operation] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        op = self.lab_tools.get(name)
        if op is not None:
            unknown = sorted(set(arguments) - set(op.input.model_fields))
            if unknown:
                raise ToolError(f"unknown argument(s) {unknown}; {name} takes {sorted(op.input.model_fields)}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            # the SDK words its errors "Error executing tool NAME: ..."; an agent gets lab's own
            # text, the same as REST's for the same problem
            if op is not None and isinstance(exc.__cause__, ValidationError):
                raise ToolError(validation_error(exc.__cause__, op.input).message) from None
            if isinstance(exc.__cause__, ToolError):
                raise ToolError(str(exc.__cause__)) from None
            raise


def parameters(op: Operation) -> list[inspect.Parameter]:
    """The tool's parameters: the operation's input fields with their limits and descriptions (a
    namespace may be left out: the session's or the key's default), then the request context."""
    spec = op.mcp
    params = []
    for name, info in op.input.model_fields.items():
        default = spec.defaults.get(name, info.default)
        annotation = info.annotation
        if name == "namespace":
            annotation, default = Optional[str], None
            info = FieldInfo.merge_field_infos(info, description=(info.description or "") + NAMESPACE_DEFAULT)
        info = FieldInfo.merge_field_infos(info, default=default)
        param_default = inspect.Parameter.empty if info.is_required() else default
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=param_default,
                                        annotation=Annotated[annotation, info]))
    params.append(inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    return params


def build_server(state: AppState, local: LocalPolicy | None = None) -> MCPServer:
    """The MCP server over ``state``'s service. ``local``: the stdio policy (None: HTTP, where
    every request carries its caller)."""
    server = LabMCPServer("lab-memory", title="lab memory", version=__version__, instructions=INSTRUCTIONS,
                          log_level="WARNING")
    root = store_roots(state.service.store)

    def who(ctx: Context) -> Caller:
        request = ctx.request_context.request
        if request is None:  # stdio: the local user
            return (local or LocalPolicy()).caller()
        caller = request.scope.get(SCOPE_KEY)
        if caller is None:  # an HTTP app without its gate: refuse rather than run unauthenticated
            raise ToolError("this MCP endpoint was mounted without lab's key check; no call is allowed")
        return caller

    def namespace_of(caller: Caller, given: str | None) -> str:
        chosen = given or (local.namespace if local else None) or caller.only_namespace()
        if not chosen:
            raise ToolError("namespace: give the namespace to use (this server has no default namespace)")
        return chosen

    def add(op: Operation) -> None:
        spec = op.mcp
        run_sync = not inspect.iscoroutinefunction(op.function)

        async def tool(ctx: Context, **arguments: Any) -> dict[str, Any]:
            try:
                caller = who(ctx)
                given = {k: v for k, v in arguments.items() if v is not None}
                if "namespace" in op.input.model_fields:
                    given["namespace"] = namespace_of(caller, given.get("namespace"))
                try:
                    body = op.input.model_validate(given)
                except ValidationError as exc:
                    raise ToolError(validation_error(exc, op.input).message) from None
                if run_sync:
                    out = await anyio.to_thread.run_sync(lambda: op.function(state, caller, body, **spec.options))
                else:
                    out = await op.function(state, caller, body, **spec.options)
                return spec.shape(body, out) if spec.shape else out.model_dump(mode="json")
            except ToolError:
                raise
            except (ApiError, LabError) as exc:
                raise ToolError(public_error(exc, root, where=f"MCP {spec.tool}").message) from None

        tool.__signature__ = inspect.Signature(parameters(op), return_annotation=dict[str, Any])  # type: ignore[attr-defined]
        tool.__name__ = spec.tool
        server.add_tool(tool, name=spec.tool, description=spec.description, structured_output=True,
                        annotations=ToolAnnotations(**spec.hints) if spec.hints else None)
        server.lab_tools[spec.tool] = op

    for op in OPERATIONS:
        if op.mcp is not None:
            add(op)

    add_resources(server, state, who, local, root)
    return server


def add_resources(server: MCPServer, state: AppState, who: Callable[[Context], Caller],
                  local: LocalPolicy | None, root: tuple[str, ...]) -> None:
    """The server's resources: a namespace's statistics (for a caller that may read it), the
    status, and on stdio the namespaces the local user may read; ``root``: what names the store
    in a message, hidden from clients."""
    @server.resource("lab://namespaces/{namespace}/stats", name="namespace stats", mime_type="application/json",
                     description="memories, chunks, edges and index state of one namespace")
    async def namespace_stats(namespace: str, ctx: Context) -> str:
        try:
            caller = who(ctx)
            body = NamespaceRef(namespace=namespace)
            return (await anyio.to_thread.run_sync(lambda: ops.stats(state, caller, body))).model_dump_json()
        except ValidationError as exc:
            raise ResourceError(validation_error(exc, NamespaceRef).message) from None
        except (ApiError, LabError, ToolError) as exc:
            # a ResourceError reaches the client with its message, and is not logged with a
            # traceback as an unexpected failure (one refused read, one short log line at most)
            message = str(exc) if isinstance(exc, ToolError) else public_error(exc, root, where="MCP stats").message
            raise ResourceError(message) from None

    @server.resource("lab://status", name="status", mime_type="application/json",
                     description="whether every namespace's index is loaded (searches answer at full speed)")
    async def status() -> str:
        service = state.service
        out: dict[str, Any] = {"ready": service.ready.is_set()}
        if service.startup_error:
            out["error"] = "indexes failed to load"
        if local is not None:  # the local user may see what is served; an HTTP caller asks /ready with its key
            out["served"] = {**service.served.describe(), "embedding": service.embedding_models()}
        return json.dumps(out)

    if local is not None:  # a static resource has no caller to check: offered where the caller is the local user
        @server.resource("lab://namespaces", name="namespaces", mime_type="application/json",
                         description="the namespaces this session may read")
        async def namespace_list() -> str:
            return json.dumps(await anyio.to_thread.run_sync(lambda: ops.namespaces(state, local.caller())))
