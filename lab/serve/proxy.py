"""The OpenAI-compatible proxy: a Chat Completions request, with memory injected, forwarded to
the caller's own upstream (`lab serve --proxy-upstream URL`, route ``/v1/chat/completions``).

For the last user message it searches and assembles a context (``ops.context``: the served
configuration, the caller's namespace scope) and injects it at one of MAIA's three positions:

- ``system``: into the system message (a new one first when there is none);
- ``first_user``: before the text of the first user message;
- ``before_last_user``: as a system message just before the last user message.

Options come from an extra body field ``lab`` (``{"namespace", "position", "budget", "save"}``),
removed before forwarding, or from headers (``X-Lab-Namespace``, ``X-Lab-Position``,
``X-Lab-Budget``, ``X-Lab-Save``); a key scoped to one namespace names it by itself.

Credentials: the upstream gets the caller's own ``Authorization`` header. When lab's auth is on,
lab's key travels as ``X-API-Key`` (then ``Authorization`` goes upstream, unless it carries one
of lab's keys in any scheme: ``lab.serve.upstream``); a caller that sends lab's key as
``Authorization: Bearer`` sends its upstream credentials as ``X-Upstream-Authorization``.

Other ``/v1/*`` paths that are not lab's own (``GET /v1/models``, which many clients call first,
``/v1/embeddings``) pass through to the same upstream within the limits of ``lab.serve.passthrough``.

The upstream's answer comes back unchanged (status, body, and a stream event by event), with
headers saying what was injected: ``X-Lab-Memories`` (ids, comma-separated), ``X-Lab-Context-Tokens``,
``X-Lab-Namespace`` and ``X-Lab-Position``; when the search abstains (nothing relevant stored,
``abstain.threshold`` of the served configuration), nothing is injected and ``X-Lab-Abstain``
gives the evidence (``score=0.2134; threshold=0.35``). An upstream that does not answer in time is 504, one
that cannot be reached 502. With ``save`` (or the server's ``proxy_save``), the user message and
the answer are saved as episodic memories after the answer is complete.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator

import httpx
from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from pydantic import ValidationError

from lab.serve import contract as C
from lab.serve import ops
from lab.serve.caller import Caller, authenticate, secret_of
from lab.serve.errors import validation_error
from lab.serve.state import ApiError, AppState
from lab.serve.upstream import send_upstream, shown_url, upstream_headers, upstream_url

log = logging.getLogger("lab.serve.proxy")

OPTIONS = ("namespace", "position", "budget", "save")
MEMORY_HEADER = "Relevant memories (cite them by their [id]):"


@dataclass(frozen=True)
class Options:
    namespace: str
    position: str
    budget: int | None
    save: bool


def _options(values: dict[str, Any], where: str) -> C.ProxyOptions:
    try:
        return C.ProxyOptions.model_validate(values)
    except ValidationError as exc:
        error = validation_error(exc, C.ProxyOptions, prefix=where)
        raise ApiError(422, error.message, field=error.field) from None


def options(body: dict[str, Any], headers: Any, who: Caller, state: AppState) -> Options:
    """The proxy's options for one request (the ``lab`` field is taken out of ``body``): the body
    field first, then the X-Lab-* headers, then the key's one namespace and the server's settings."""
    extra = body.pop("lab", None)
    if extra is None:
        extra = {}
    if not isinstance(extra, dict):
        raise ApiError(422, f"body.lab: expected an object with {list(OPTIONS)}, got {type(extra).__name__}",
                       field="body.lab")
    given = _options(extra, "body.lab")
    from_headers = _options({k: headers.get(f"x-lab-{k}") for k in OPTIONS
                             if headers.get(f"x-lab-{k}") not in (None, "")}, "header x-lab")
    namespace = given.namespace or from_headers.namespace or who.only_namespace()
    if not namespace:
        raise ApiError(422, "no namespace: send the X-Lab-Namespace header or the body field lab.namespace",
                       field="body.lab.namespace")
    position = given.position or from_headers.position or state.settings.proxy_position
    budget = given.budget if given.budget is not None else from_headers.budget
    save = next((v for v in (given.save, from_headers.save) if v is not None), state.settings.proxy_save == "on")
    who.require(namespace, write=save)
    return Options(namespace, position, budget, save)


def text_of(content: Any) -> str:
    """A message's text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def last_user(messages: list[dict[str, Any]]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    raise ApiError(422, "body.messages: no user message to find memories for", field="body.messages")


def _prefixed(content: Any, text: str) -> Any:
    if isinstance(content, list):
        return [{"type": "text", "text": text}, *content]
    return f"{text}\n\n{content}" if content else text


def abstain_header(abstention: C.AbstentionOut) -> str:
    """``X-Lab-Abstain``'s value: the evidence of a search that found nothing relevant."""
    if abstention.score is None:
        return f"no candidate; threshold={abstention.threshold}"
    return f"score={abstention.score}; threshold={abstention.threshold}"


def inject(messages: list[dict[str, Any]], text: str, position: str) -> list[dict[str, Any]]:
    """``messages`` with ``text`` injected at ``position`` (a new list; the input is not changed)."""
    out = [dict(m) for m in messages]
    if position == "system":
        if out and out[0].get("role") in ("system", "developer"):
            out[0]["content"] = f"{text_of(out[0].get('content'))}\n\n{text}".strip()
        else:
            out.insert(0, {"role": "system", "content": text})
    elif position == "first_user":
        first = next(i for i, m in enumerate(out) if m.get("role") == "user")
        out[first]["content"] = _prefixed(out[first].get("content"), text)
    else:
        out.insert(last_user(out), {"role": "system", "content": text})
    return out


def read_body(raw: bytes) -> Any:
    """A request body as JSON, refused (422) when it is not JSON a client could mean: NaN and
    the infinities are not JSON (Python's parser takes them), nor nesting past the parser's depth."""
    def constant(name: str) -> Any:
        raise ApiError(422, f"body: {name} is not a JSON value (use a number or null)", field="body")

    try:
        return json.loads(raw, parse_constant=constant)
    except RecursionError:
        raise ApiError(422, "body: nested too deeply to read", field="body") from None
    except ValueError:
        raise ApiError(422, "body: not JSON", field="body") from None


def answer_text(body: bytes) -> str:
    try:
        data = json.loads(body)
        return text_of(data["choices"][0]["message"].get("content"))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return ""


class StreamText:
    """Collects the assistant's text from a chat completion's SSE events as they pass."""

    def __init__(self) -> None:
        self.buffer, self.parts = b"", []
        self.finished = False  # the stream said it is done ([DONE], or a finish_reason)

    def feed(self, chunk: bytes) -> None:
        self.buffer += chunk
        while b"\n" in self.buffer:
            line, self.buffer = self.buffer.split(b"\n", 1)
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            if line[5:].strip() == b"[DONE]":
                self.finished = True
                continue
            try:
                choice = json.loads(line[5:])["choices"][0]
                delta = choice.get("delta") or {}
            except (ValueError, KeyError, IndexError, TypeError, AttributeError):
                continue
            if choice.get("finish_reason"):
                self.finished = True
            if isinstance(delta.get("content"), str):
                self.parts.append(delta["content"])

    @property
    def text(self) -> str:
        return "".join(self.parts)


async def save_exchange(state: AppState, who: Caller, opts: Options, question: str, answer: str) -> None:
    records = [{"content": text, "namespace": opts.namespace, "type": "episodic", "source": "chat-proxy",
                "metadata": {"role": role}} for role, text in (("user", question), ("assistant", answer)) if text.strip()]
    if not records:
        return
    try:
        await ops.save_records(state, who, records)
    except Exception:  # the answer is delivered already; a failed save is logged, not raised
        log.exception("saving the proxied exchange to %s failed", opts.namespace)


async def chat_completions(request: Request, state: AppState, who: Caller | None = None) -> Response:
    """The proxy route's work (see the module's docstring); ``who``: the caller, when the request
    was authenticated already (the chat path reached through the passthrough's route)."""
    if who is None:
        who = authenticate(state, secret_of(request.headers, api_key_first=True),
                           request.client.host if request.client else "-")
    body = read_body(await request.body())
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"] \
            or not all(isinstance(m, dict) for m in body["messages"]):
        raise ApiError(422, "body.messages: a Chat Completions request needs a non-empty list of messages",
                       field="body.messages")
    opts = options(body, request.headers, who, state)
    question = text_of(body["messages"][last_user(body["messages"])].get("content")).strip()
    if not question:
        raise ApiError(422, "body.messages: the last user message has no text", field="body.messages")
    got = await ops.context(state, who, C.ContextIn(query=question[:C.QUERY_MAX], namespace=opts.namespace,
                                                    budget=opts.budget, format="markdown"))
    ids = [c.memory_id for c in got.citations]
    if got.text:
        body["messages"] = inject(body["messages"], f"{MEMORY_HEADER}\n{got.text}", opts.position)
    audit = {"X-Lab-Memories": ",".join(ids), "X-Lab-Context-Tokens": str(got.used),
             "X-Lab-Namespace": opts.namespace, "X-Lab-Position": opts.position}
    if got.abstention.abstain:  # nothing was injected, and the caller is told why
        audit["X-Lab-Abstain"] = abstain_header(got.abstention)
    url = upstream_url(state.settings.proxy_upstream)
    shown = shown_url(url)
    reply = await send_upstream(state, state.proxy_client.build_request(
        "POST", url, json=body, headers=upstream_headers(request, state)), shown)
    kind = reply.headers.get("content-type", "application/json")
    if not kind.startswith("text/event-stream"):
        try:
            content = await reply.aread()
        except httpx.TimeoutException:
            raise ApiError(504, f"the upstream {shown} did not finish its answer within "
                                f"{state.settings.proxy_timeout_s:g} s") from None
        except httpx.HTTPError as exc:  # e.g. a body cut short of its Content-Length
            log.warning("the upstream %s broke off its answer (%s)", shown, type(exc).__name__)
            raise ApiError(502, f"the upstream {shown} broke off its answer ({type(exc).__name__})") from None
        finally:
            await reply.aclose()
        if opts.save and reply.status_code < 400:
            await save_exchange(state, who, opts, question, answer_text(content))
        return Response(content, status_code=reply.status_code, media_type=kind, headers=audit)
    collected = StreamText()
    relayed = [False]  # every chunk reached the client (not cut off by a client that went away)

    async def relay() -> AsyncIterator[bytes]:
        # aiter_bytes, not aiter_raw: a gzip-encoded upstream stream is decoded here (its
        # Content-Encoding header is not passed on, so raw bytes would reach the client unreadable)
        try:
            async for chunk in reply.aiter_bytes():
                collected.feed(chunk)
                yield chunk
            relayed[0] = True
        except httpx.HTTPError as exc:
            # the status line is out already: the stream ends with an error event saying why
            what = ("went silent for over " + f"{state.settings.proxy_timeout_s:g} s"
                    if isinstance(exc, httpx.TimeoutException) else f"broke off ({type(exc).__name__})")
            log.warning("the upstream %s %s in the middle of a stream", shown, what)
            event = {"error": {"message": f"the upstream {shown} {what} in the middle of its answer",
                               "type": "upstream_error"}}
            yield f"data: {json.dumps(event)}\n\n".encode()
        finally:
            await reply.aclose()

    async def finish() -> None:
        await reply.aclose()
        # a partial answer (the client left, or the upstream stopped before saying it was done)
        # is not saved as if it were the answer
        if opts.save and reply.status_code < 400 and relayed[0] and collected.finished:
            await save_exchange(state, who, opts, question, collected.text)

    return StreamingResponse(relay(), status_code=reply.status_code, media_type=kind,
                             headers={**audit, "Cache-Control": "no-cache"}, background=BackgroundTask(finish))
