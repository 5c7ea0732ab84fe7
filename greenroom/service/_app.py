"""The HTTP API: one ASGI application (Starlette) over the daemon's parts.

Every answer is JSON (msgspec); every error has one shape::

    {"error": {"status": 400, "code": "invalid_input", "message": "...", "field": "...", "value": "..."}}

Authentication is a bearer token (:mod:`._tokens`); each endpoint names the scope it
needs (``admin`` has every scope). No token or an unknown one: 401; a token without the
scope: 403; in both cases nothing happens. A request body above ``max_body_bytes`` is
refused (413) before it is parsed. Logs name the token id, never the token or the user.

Endpoints (``/v1``)::

    GET  /health                      none      the daemon answers
    GET  /status                      tasks     agents, tasks per state, mailboxes, budgets, uptime
    POST /tasks                       tasks     submit one task, a list, or {"tasks": [...]}: all or none
    GET  /tasks                       tasks     ?status=&type=&after=ORDER&limit=N  -> {"tasks", "next"}
    GET  /tasks/{id}                  tasks
    POST /tasks/{id}/cancel           tasks     {"reason": "..."} (optional)
    GET  /events                      tasks     Server-Sent Events, resumed after ?after=SEQ or
                                              Last-Event-ID; ?follow=0 ends at the current end
    POST /chat                        chat      {"message", "conversation_id"?, "stream"?} as the token's
                                              user; an id not seen before is opened (the caller's to
                                              name); "stream": true answers text/event-stream: delta
                                              and tool events as they happen, then done (the JSON
                                              answer) or error (the error shape)
    GET  /chat/conversations/{id}     chat      that user's conversation only (another's: 404)
    GET  /chat/tasks                  chat      that user's tasks
    POST /stop                        admin     a graceful stop (202)
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from .. import _tracing
from .._errors import MISSING, GreenroomError, InvalidInput, StoreUnavailable, shown
from ..actors import ActorRef, ActorStopped
from ..messages import (
    AgentTask,
    Cancel,
    Decide,
    Dependents,
    Event,
    GetTask,
    ListTasks,
    Retry,
    Submit,
    TaskStatus,
    convert,
)
from ._page import page_routes
from ._status import DaemonStatus
from ._tokens import Principal, Scope, TokenStore

if TYPE_CHECKING:
    from ..chat import AgentRunner

logger = logging.getLogger("greenroom.service")

MAX_PAGE = 1000
MAX_SEQ = 2**62
"""The largest sequence number a reader may resume after (``?after=``, ``Last-Event-ID``)."""


@dataclass
class ServiceParts:
    """What the API serves: the daemon fills it in.

    ``status`` returns the ``/status`` document; ``stop`` starts a graceful stop;
    ``chat`` is an ``AgentRunner`` (``None``: the chat endpoints answer 404)."""

    supervisor: ActorRef
    events: Callable[[int, bool, int | None], AsyncGenerator[Event, None]]
    """Where ``/v1/events`` reads (``after``, ``follow``, ``last``): the backend's events."""
    events_dropped_through: Callable[[], Awaitable[int]]
    """The last ``seq`` retention dropped (a reader after an older one gets 410)."""
    tokens: TokenStore
    status: Callable[[], Awaitable[DaemonStatus]]
    stop: Callable[[], None]
    chat: AgentRunner | None = None
    steps: Callable[[str], Awaitable[list[Any]]] | None = None
    """A task's step journal (``Step`` records), or ``None``: ``/steps`` answers 404."""
    history: Callable[[], dict[str, Any]] | None = None
    """The figures over time the status page charts (``None``: ``/v1/history`` is 404)."""
    max_body_bytes: int = 4 << 20
    started: float = field(default_factory=time.time)
    clock: Callable[[], float] = time.time
    """The graph's clock: ``updated_within`` counts back from it."""


class ApiError(GreenroomError):
    """An answer of the API other than 200: its HTTP ``status``, a ``code`` and the
    ``field`` / ``value`` it is about (what ``error_response`` sends as ``{"error": ...}``)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str = "",
        value: Any = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field
        self.value = value
        self.extra = extra or {}


_encoder = msgspec.json.Encoder()


def _json(value: Any, status: int = 200) -> Response:
    return Response(_encoder.encode(value), status_code=status, media_type="application/json")


def _error_body(error: ApiError) -> dict[str, Any]:
    """The one error shape: ``{"error": {"status", "code", "message", "field"?, "value"?}}``."""
    body: dict[str, Any] = {"status": error.status, "code": error.code, "message": str(error)}
    if error.field:
        body["field"] = error.field
    if error.value is not None:
        body["value"] = shown(error.value)
    body.update(error.extra)
    return {"error": body}


def error_response(error: ApiError) -> Response:
    headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else None
    return Response(
        _encoder.encode(_error_body(error)),
        status_code=error.status,
        media_type="application/json",
        headers=headers,
    )


def _chat_answer(conversation: str, result: Any) -> dict[str, Any]:
    """``POST /v1/chat``'s answer (the last event of a streamed one)."""
    return {
        "conversation_id": conversation,
        "success": result.success,
        "response": result.response,
        "error": result.error,
        "tool_calls": [
            {"tool": call.tool_name, "parameters": call.parameters, "result": call.result}
            for call in result.tool_calls
        ],
    }


def _chat_event(event: Any) -> bytes:
    """One event of a streamed chat answer as Server-Sent Events: ``delta`` (a piece of
    the reply: ``{"text"}``, or ``{"text", "replace": true}``: the whole of it) or
    ``tool`` (``{"tool", "state": "started"}``, or ``"finished"`` with ``success`` and
    ``duration_ms``)."""
    from ..chat import ReplyDelta, ToolStarted

    if type(event) is ReplyDelta:
        return b"event: delta\ndata: %s\n\n" % _encoder.encode(event)
    if type(event) is ToolStarted:
        return b"event: tool\ndata: %s\n\n" % _encoder.encode({"tool": event.tool, "state": "started"})
    document = {
        "tool": event.tool,
        "state": "finished",
        "success": event.success,
        "duration_ms": event.duration_ms,
    }
    return b"event: tool\ndata: %s\n\n" % _encoder.encode(document)


class EventStream(Response):
    """``200 text/event-stream`` whose events ``produce`` writes as they happen, sent at
    once (no buffering). The client hanging up cancels ``produce``; every task it started
    ends with it."""

    def __init__(self, produce: Callable[[Callable[[bytes], Awaitable[None]]], Awaitable[None]]) -> None:
        self.produce = produce
        self.status_code = 200
        self.background = None
        self.raw_headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-store"),
            (b"x-accel-buffering", b"no"),
        ]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})

        async def write(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        async with anyio.create_task_group() as tg:

            async def watch() -> None:  # the client hangs up: stop producing
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(watch)
            await self.produce(write)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            tg.cancel_scope.cancel()


def _as_api_error(error: Exception) -> ApiError:
    from ..chat import ConversationNotFound
    from ..store import DuplicateTask, EventsGone, InvalidTransition, UnknownTask

    if isinstance(error, ApiError):
        return error
    if isinstance(error, EventsGone):
        return ApiError(
            410, "gone", str(error), field="after", value=error.after, extra={"oldest": error.oldest}
        )
    if isinstance(error, UnknownTask | ConversationNotFound):
        return ApiError(404, "not_found", str(error), field=error.field, value=error.value)
    if isinstance(error, InvalidTransition | DuplicateTask):
        return ApiError(409, "conflict", str(error), field=error.field, value=error.value)
    if isinstance(error, InvalidInput):
        value = None if error.value is MISSING else error.value
        return ApiError(400, "invalid_input", str(error), field=error.field, value=value)
    if isinstance(error, TimeoutError):
        return ApiError(504, "timeout", str(error) or "the request took too long and was stopped")
    if isinstance(error, ActorStopped):
        return ApiError(503, "stopping", "the daemon is stopping; try again once it is back")
    if isinstance(error, StoreUnavailable):
        return ApiError(503, "unavailable", f"the store is out of reach; try again ({error})")
    return ApiError(500, "internal", "greenroom failed to answer (a bug: see the daemon's log)")


Handler = Callable[[Request, Principal | None], Awaitable[Response]]


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if header is None:
        return None
    kind, _, token = header.partition(" ")
    return token.strip() if kind.lower() == "bearer" and token.strip() else ""


def _endpoint(
    parts: ServiceParts, scope: Scope | None, handler: Handler, name: str
) -> Callable[[Request], Any]:
    """Wrap ``handler``: authenticate (``scope`` ``None``: no token needed), then map
    every error to the one JSON shape. Cancellation (the client went away, the daemon
    stops) passes through untouched."""

    async def endpoint(request: Request) -> Response:
        if not _tracing.enabled:
            return await answer(request)
        attributes = {"http.route": name}
        with _tracing.span(
            name, kind="SERVER", parent_headers=request.headers, attributes=attributes
        ) as span:
            response = await answer(request)
            span.set_attribute("http.response.status_code", response.status_code)
            return response

    async def answer(request: Request) -> Response:
        principal: Principal | None = None
        try:
            if scope is not None:
                token = _bearer(request)
                if token is None:
                    raise ApiError(
                        401, "unauthenticated", "this endpoint needs 'Authorization: Bearer TOKEN'"
                    )
                principal = parts.tokens.authenticate(token)
                if principal is None:
                    raise ApiError(401, "unauthenticated", "the token is not valid (unknown or revoked)")
                if not principal.allows(scope):
                    raise ApiError(
                        403,
                        "forbidden",
                        f"a {principal.scope!r} token may not use this endpoint (needs {scope!r})",
                    )
            response = await handler(request, principal)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:
            response = _failed(request, principal, error)
        return await _read_rest(request, response, parts.max_body_bytes)

    def _failed(request: Request, principal: Principal | None, error: Exception) -> Response:
        api_error = _as_api_error(error)
        if api_error.status >= 500:
            logger.error(
                "api: %s %s failed (token %s): %s",
                request.method,
                request.url.path,
                principal.token_id if principal else "-",
                type(error).__name__,
                exc_info=error if api_error.status == 500 else None,
            )
        return error_response(api_error)

    return endpoint


DRAIN_SECONDS = 10.0
"""How long an answer waits for the rest of a body it did not need (see ``_read_rest``)."""


async def _read_rest(request: Request, response: Response, limit: int) -> Response:
    """Read and drop what is left of the request's body (``limit`` bytes at most, for
    ``DRAIN_SECONDS`` at most) before sending an answer that did not need it (a 401, a
    403, a 404): a server that closes a connection with unread bytes in it sends a TCP
    reset, which can destroy the answer before the client reads it — the client sees a
    broken connection instead of the error. Read to its end, the body also leaves the
    connection reusable. Past either bound the answer says ``Connection: close``."""
    headers = request.headers
    length = headers.get("content-length")
    if "transfer-encoding" not in headers and (length is None or length == "0"):
        return response  # no body
    if length is not None and length.isdigit() and int(length) > limit:
        response.headers["connection"] = "close"  # not read: the client is told why (413)
        return response
    size = 0
    with anyio.move_on_after(DRAIN_SECONDS):
        try:
            async with aclosing(request.stream()) as chunks:
                async for chunk in chunks:
                    size += len(chunk)
                    if size > limit:
                        break
                else:
                    return response
        except RuntimeError:  # the handler read it to its end
            return response
        except ClientDisconnect:
            return response
    response.headers["connection"] = "close"
    return response


_NO_BODY: Any = object()
"""What ``_body(required=False)`` answers for a request without a body (``null`` is a body)."""


async def _body(request: Request, parts: ServiceParts, *, required: bool = True) -> Any:
    """The JSON body, read at most ``max_body_bytes`` (413 beyond, before parsing);
    ``_NO_BODY`` for an empty one that is not ``required``."""
    limit = parts.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(413, "too_large", f"the body is {declared} bytes; at most {limit} are accepted")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "too_large", f"the body is larger than {limit} bytes")
        chunks.append(chunk)
    data = b"".join(chunks)
    if not data.strip():
        if required:
            raise ApiError(400, "invalid_input", "the request needs a JSON body", field="body")
        return _NO_BODY
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise ApiError(400, "invalid_input", f"the body is not valid JSON: {error}", field="body") from None
    except UnicodeDecodeError as error:  # bytes inside a JSON string that are not UTF-8
        raise ApiError(
            400, "invalid_input", f"the body is not valid UTF-8 (byte {error.start})", field="body"
        ) from None
    except RecursionError:
        raise ApiError(400, "invalid_input", "the body is nested too deeply", field="body") from None


def _query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if not low <= value <= high:
        raise ApiError(
            400,
            "invalid_input",
            f"{name} must be a whole number from {low} to {high}",
            field=name,
            value=text,
        )
    return value


def _query_flag(query: Any, name: str) -> bool:
    text = query.get(name, "0")
    if text not in ("0", "1", "true", "false"):
        raise ApiError(400, "invalid_input", f"{name} must be 0 or 1", field=name, value=text)
    return bool(text in ("1", "true"))


def _updated_since(query: Any, now: float) -> float | None:
    """``updated_since`` (seconds since the epoch) or ``updated_within`` (seconds before
    now, by the daemon's clock: a browser's clock may be off), not both."""
    since, within = query.get("updated_since"), query.get("updated_within")
    if since is not None and within is not None:
        raise ApiError(400, "invalid_input", "give updated_since or updated_within, not both",
                       field="updated_within", value=within)  # fmt: skip
    name, text = ("updated_since", since) if since is not None else ("updated_within", within)
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (0 <= value < 1e12) or value != value:
        raise ApiError(
            400, "invalid_input", f"{name} must be a number of seconds, 0 or more", field=name, value=text
        )
    return value if name == "updated_since" else now - value


def _status_filter(text: str | None) -> TaskStatus | None:
    if text is None:
        return None
    try:
        return TaskStatus(text.upper())
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise ApiError(
            400, "invalid_input", f"status must be one of {names}", field="status", value=text
        ) from None


async def _reason(request: Request, parts: ServiceParts) -> str:
    """The ``{"reason": "..."}`` an action may carry (no body: ``""``); 400 naming the field
    for anything else."""
    raw = await _body(request, parts, required=False)
    if raw is _NO_BODY:
        return ""
    if not isinstance(raw, dict):
        raise ApiError(400, "invalid_input", 'the body must be {"reason": "..."}', field="body", value=raw)
    reason = raw.get("reason", "")
    if not isinstance(reason, str):
        raise ApiError(400, "invalid_input", 'the body must be {"reason": "..."}', field="reason")
    return reason


def create_app(parts: ServiceParts) -> Starlette:
    """The API over ``parts``. Serve it with :func:`greenroom.service.serve` (Hypercorn,
    on asyncio or trio) or any ASGI server."""
    tasks, chat = _TaskEndpoints(parts), _ChatEndpoints(parts)

    def route(path: str, scope: Scope | None, handler: Handler, method: str = "GET") -> Route:
        return Route(path, _endpoint(parts, scope, handler, f"{method} {path}"), methods=[method])

    async def no_route(request: Request, error: Exception) -> Response:
        return await _no_route(parts, request, error)

    return Starlette(
        exception_handlers={HTTPException: no_route},
        routes=[
            route("/v1/health", None, tasks.health),
            route("/v1/status", "tasks", tasks.status),
            route("/v1/tasks", "tasks", tasks.submit, "POST"),
            route("/v1/tasks", "tasks", tasks.list_tasks),
            route("/v1/tasks/decide", "tasks", tasks.decide_many, "POST"),
            route("/v1/tasks/{task_id}", "tasks", tasks.show_task),
            route("/v1/tasks/{task_id}/steps", "tasks", tasks.task_steps),
            route("/v1/tasks/{task_id}/dependents", "tasks", tasks.task_dependents),
            route("/v1/tasks/{task_id}/cancel", "tasks", tasks.cancel_task, "POST"),
            route("/v1/tasks/{task_id}/retry", "tasks", tasks.retry_task, "POST"),
            route("/v1/tasks/{task_id}/approve", "tasks", tasks.decide_task, "POST"),
            route("/v1/tasks/{task_id}/deny", "tasks", tasks.decide_task, "POST"),
            route("/v1/events", "tasks", tasks.events),
            route("/v1/chat", "chat", chat.chat, "POST"),
            route("/v1/chat/conversations/{conversation_id:path}", "chat", chat.conversation),
            route("/v1/chat/tasks", "chat", chat.chat_tasks),
            route("/v1/stop", "admin", tasks.stop, "POST"),
            route("/metrics", "metrics", tasks.metrics),
            route("/v1/history", "tasks", tasks.history),
            *page_routes(),
        ],
    )


async def _no_route(parts: ServiceParts, request: Request, error: Exception) -> Response:
    """A path no route has (404), or a method it does not take (405): the one shape."""
    assert isinstance(error, HTTPException)
    status = error.status_code
    if status == 405:
        message = f"{request.method} is not allowed on {request.url.path}"
        response = error_response(ApiError(405, "method_not_allowed", message))
    elif status == 404:
        response = error_response(ApiError(404, "not_found", f"no endpoint {request.url.path}"))
    else:
        response = error_response(ApiError(status, "http_error", str(error.detail)))
    for name, value in (error.headers or {}).items():
        response.headers[name] = value  # Allow: the methods a path takes
    return await _read_rest(request, response, parts.max_body_bytes)


class _TaskEndpoints:
    """The task graph's endpoints (and health, status, stop): each a message to the
    supervisor actor, answered once the change is durable."""

    def __init__(self, parts: ServiceParts) -> None:
        self.parts = parts
        self.supervisor = parts.supervisor

    async def health(self, request: Request, principal: Principal | None) -> Response:
        return _json({"status": "ok", "uptime": round(time.time() - self.parts.started, 3)})

    async def status(self, request: Request, principal: Principal | None) -> Response:
        return _json(await self.parts.status())

    async def history(self, request: Request, principal: Principal | None) -> Response:
        """The samples the status page charts (``service._history``), oldest first."""
        if self.parts.history is None:
            raise ApiError(404, "not_found", "this daemon keeps no history")
        return _json(self.parts.history())

    async def metrics(self, request: Request, principal: Principal | None) -> Response:
        """Prometheus's text format, from the same snapshot ``/v1/status`` answers."""
        from ._metrics import CONTENT_TYPE, exposition

        return Response(exposition(await self.parts.status()), media_type=CONTENT_TYPE)

    async def stop(self, request: Request, principal: Principal | None) -> Response:
        assert principal is not None
        logger.warning("api: stop requested (token %s)", principal.token_id)
        self.parts.stop()
        return _json({"stopping": True}, 202)

    async def submit(self, request: Request, principal: Principal | None) -> Response:
        raw = await _body(request, self.parts)
        if isinstance(raw, dict) and "tasks" in raw:
            raw = raw["tasks"]
        single = isinstance(raw, dict)
        tasks = convert([raw] if single else raw, list[AgentTask], "task list")
        if not tasks:
            raise ApiError(400, "invalid_input", "the task list is empty", field="tasks")
        stored = await self.supervisor.ask(Submit(tasks), timeout=None)
        return _json({"tasks": stored}, 201)

    async def list_tasks(self, request: Request, principal: Principal | None) -> Response:
        """A page of tasks: filtered (``status``, ``type``, ``owner``, ``q`` — text in the
        id or the input —, ``updated_within`` seconds or ``updated_since`` a time), in
        submission order or ``order=newest`` first; ``next`` is the ``after`` (or, newest
        first, the ``before``) of the page that follows, ``null`` after the last."""
        query = request.query_params
        wanted = _status_filter(query.get("status"))
        limit = _query_int(request, "limit", 100, 1, MAX_PAGE)
        archived = _query_flag(query, "archived")
        order = query.get("order", "oldest")
        if order not in ("oldest", "newest"):
            raise ApiError(400, "invalid_input", "order must be oldest or newest", field="order", value=order)
        newest = order == "newest"
        after = _query_int(request, "after", 0, 0, 2**62)
        before = _query_int(request, "before", 2**62, 1, 2**62) if "before" in query else None
        text = query.get("q") or None
        if text is not None and len(text) > 200:
            raise ApiError(
                400, "invalid_input", "q must be at most 200 characters", field="q", value=text[:40]
            )
        listing = ListTasks(
            wanted, query.get("type") or None, after, limit + 1,  # one more: whether a next page exists
            archived=archived, owner=query.get("owner") or None, text=text,
            updated_since=_updated_since(query, self.parts.clock()), newest_first=newest, before=before,
        )  # fmt: skip
        found = await self.supervisor.ask(listing, timeout=None)
        page = found[:limit]
        more = len(found) > limit
        return _json({"tasks": page, "next": page[-1].order if more else None})

    async def show_task(self, request: Request, principal: Principal | None) -> Response:
        """The task, and ``actions``: what a person may do to it now (``retry``, ``cancel``,
        ``approve``, ``deny``: each ``{"allowed", "why"}``), by the rule the store applies
        when asked — a page offers only those, or says why not."""
        task = await self.supervisor.ask(GetTask(request.path_params["task_id"]), timeout=None)
        shown = msgspec.to_builtins(task)
        shown["actions"] = await self._actions(task)
        return _json(shown)

    async def _actions(self, task: AgentTask) -> dict[str, dict[str, Any]]:
        from ..store import ACTIONS, TaskGraphError, refusal

        actions: dict[str, dict[str, Any]] = {}
        for action in ACTIONS:
            refused: TaskGraphError | None = refusal(task, action)
            if refused is None and action == "retry" and task.status is TaskStatus.DEPENDENCY_FAILED:
                try:  # its causes upstream decide: the store's own checks, nothing changed
                    await self.supervisor.ask(Retry(task.id, "api", dry_run=True), timeout=None)
                except TaskGraphError as error:
                    refused = error
            actions[action] = {"allowed": refused is None, "why": None if refused is None else str(refused)}
        return actions

    async def task_dependents(self, request: Request, principal: Principal | None) -> Response:
        """The live tasks that depend on this one directly (the other way of ``depends_on``)."""
        task_id = request.path_params["task_id"]
        dependents = await self.supervisor.ask(Dependents(task_id), timeout=None)
        return _json({"task_id": task_id, "dependents": dependents})

    async def task_steps(self, request: Request, principal: Principal | None) -> Response:
        """A task's step journal, in the order recorded (its model replies and tool calls)."""
        task = await self.supervisor.ask(GetTask(request.path_params["task_id"]), timeout=None)
        if self.parts.steps is None:
            raise ApiError(404, "not_found", "this daemon keeps no step journal")
        steps = await self.parts.steps(task.id)
        shown_steps = [
            {"key": s.key, "kind": s.kind, "attempt": s.attempt, "at": s.at, "body": s.body} for s in steps
        ]
        return _json({"task_id": task.id, "steps": shown_steps})

    async def cancel_task(self, request: Request, principal: Principal | None) -> Response:
        reason = await _reason(request, self.parts) or "cancelled through the API"
        task = await self.supervisor.ask(Cancel(request.path_params["task_id"], reason), timeout=None)
        return _json(task)

    async def retry_task(self, request: Request, principal: Principal | None) -> Response:
        """Run a FAILED (or DEPENDENCY_FAILED) task again: a fresh attempt budget, its
        dependents waiting for it again; who retried is the token's user."""
        reason = await _reason(request, self.parts)
        by = principal.user if principal is not None else "api"
        task = await self.supervisor.ask(Retry(request.path_params["task_id"], by, reason), timeout=None)
        return _json(task)

    async def decide_task(self, request: Request, principal: Principal | None) -> Response:
        """``/approve`` or ``/deny`` a WAITING task's call: who decided is the token's user."""
        raw = await _body(request, self.parts, required=False)
        reason, step, as_done = "", None, False
        approved = request.url.path.endswith("/approve")
        if raw is not _NO_BODY:  # a body, null included, must be an object
            if not isinstance(raw, dict):
                shape = '{"reason": "...", "step": "...", "as_done": false}'
                raise ApiError(400, "invalid_input", f"the body must be {shape}", field="body", value=raw)
            for field in ("reason", "step"):
                if not isinstance(raw.get(field, ""), str):
                    raise ApiError(400, "invalid_input", f"{field} must be a string", field=field)
            as_done = raw.get("as_done", False)
            if not isinstance(as_done, bool) or (as_done and not approved):
                wanted = "as_done must be true or false, and only on /approve"
                raise ApiError(400, "invalid_input", wanted, field="as_done", value=as_done)
            reason, step = raw.get("reason", ""), raw.get("step")
        by = principal.user if principal is not None else "api"
        message = Decide(request.path_params["task_id"], approved, by, reason, step, as_done)
        return _json(await self.supervisor.ask(message, timeout=None))

    async def decide_many(self, request: Request, principal: Principal | None) -> Response:
        """``POST /v1/tasks/decide``: many waiting calls at once, chosen by a filter — a dry
        run unless ``"dry_run": false`` (see ``greenroom.supervisor.decide_waiting``)."""
        from ..supervisor import decide_waiting

        raw = await _body(request, self.parts)
        where = _waiting_filter(raw)
        by = principal.user if principal is not None else "api"
        decision = await decide_waiting(
            self.supervisor, where, approved=raw["approve"], by=by, reason=raw.get("reason", ""),
            as_done=raw.get("as_done", False), dry_run=raw.get("dry_run", True),
        )  # fmt: skip
        return _json(decision)

    async def events(self, request: Request, principal: Principal | None) -> Response:
        last_id = request.headers.get("last-event-id")
        after = _query_int(request, "after", 0, 0, MAX_SEQ)
        if last_id is not None:
            if not (last_id.isascii() and last_id.isdigit()) or int(last_id) > MAX_SEQ:
                wanted = f"Last-Event-ID must be a sequence number from 0 to {MAX_SEQ}"
                raise ApiError(400, "invalid_input", wanted, field="Last-Event-ID", value=last_id)
            after = max(after, int(last_id))
        follow = request.query_params.get("follow", "1") not in ("0", "false", "no")
        last = _query_int(request, "last", -1, 0, 10_000_000) if "last" in request.query_params else None
        if last is None:
            from ..store import EventsGone

            dropped = await self.parts.events_dropped_through()
            if after < dropped:
                raise EventsGone(after, dropped + 1)
        task = request.query_params.get("task")
        if task is not None and not (0 < len(task) <= 200 and task.isprintable()):
            raise ApiError(400, "invalid_input", "task must be a task id", field="task", value=task[:80])
        events = self.parts.events

        async def produce(write: Callable[[bytes], Awaitable[None]]) -> None:
            await _write_events(events(after, follow, last), write, task=task)

        return EventStream(produce)


def _waiting_filter(raw: Any) -> Any:
    """A bulk decision's body checked field by field; its ``WaitingFilter``."""
    from ..supervisor import WaitingFilter

    shape = '{"approve": true, "filter": {"type", "tool", "may_have_run"}, "reason", "as_done", "dry_run"}'
    if not isinstance(raw, dict):
        raise ApiError(400, "invalid_input", f"the body must be {shape}", field="body", value=raw)
    unknown = sorted(set(raw) - {"approve", "filter", "reason", "as_done", "dry_run"})
    if unknown:
        raise ApiError(400, "invalid_input", f"unknown field {unknown[0]!r}: {shape}", field=unknown[0])
    for name, kind, default in (("approve", bool, None), ("as_done", bool, False),
                                ("dry_run", bool, True), ("reason", str, "")):  # fmt: skip
        value = raw.get(name, default)
        if not isinstance(value, kind):
            wanted = "true or false" if kind is bool else "a string"
            raise ApiError(400, "invalid_input", f"{name} must be {wanted}", field=name, value=value)
    try:
        return msgspec.convert(raw.get("filter", {}), WaitingFilter)
    except msgspec.ValidationError as error:
        raise ApiError(400, "invalid_input", f"filter: {error}", field="filter") from None


class _ChatEndpoints:
    """The chat assistant's endpoints, as the token's user, through the runner's own
    calls (404 when the daemon runs no assistant)."""

    def __init__(self, parts: ServiceParts) -> None:
        self.parts = parts

    def _runner(self) -> AgentRunner:
        if self.parts.chat is None:
            raise ApiError(404, "not_found", "this daemon runs no chat assistant")
        return self.parts.chat

    async def chat(self, request: Request, principal: Principal | None) -> Response:
        from ..chat import AgentContext

        assert principal is not None
        runner = self._runner()
        message, conversation, streamed = _chat_request(await _body(request, self.parts))
        if conversation is None:
            conversation = await runner.new_conversation(principal.user)
        context = AgentContext.from_request(principal.user, conversation, [])
        if not streamed:
            return _json(_chat_answer(conversation, await runner.run(context, message)))
        await runner.admit(context, message)  # bad input is refused with its status, before the stream

        async def produce(write: Callable[[bytes], Awaitable[None]]) -> None:
            try:
                async with runner.stream(context, message) as events:
                    async for event in events:
                        await write(_chat_event(event))
                    result = events.result
            except anyio.get_cancelled_exc_class():
                raise
            except Exception as error:
                api_error = _as_api_error(error)
                if api_error.status >= 500 and api_error.code == "internal":
                    logger.error("api: a streamed chat request failed", exc_info=error)
                await write(b"event: error\ndata: %s\n\n" % _encoder.encode(_error_body(api_error)))
                return
            await write(b"event: done\ndata: %s\n\n" % _encoder.encode(_chat_answer(conversation, result)))

        return EventStream(produce)

    async def conversation(self, request: Request, principal: Principal | None) -> Response:
        assert principal is not None
        conversation_id = request.path_params["conversation_id"]
        history = await self._runner().history(principal.user, conversation_id, MAX_PAGE)
        messages = [{"role": m.role, "content": m.content, "created_at": m.at} for m in history]
        return _json({"conversation_id": conversation_id, "messages": messages})

    async def chat_tasks(self, request: Request, principal: Principal | None) -> Response:
        assert principal is not None
        rows = await self._runner().user_tasks(principal.user)
        return _json(
            {
                "tasks": [  # numbered as the user sees them; the store's keys stay inside
                    {"number": n, "title": r.title, "description": r.description, "completed": r.completed}
                    for n, r in enumerate(rows, 1)
                ]
            }
        )


def _chat_request(raw: Any) -> tuple[str, str | None, bool]:
    """A ``POST /v1/chat`` body checked field by field: ``(message, conversation_id or
    None, stream)``."""
    if not isinstance(raw, dict):
        wanted = 'the body must be {"message": "...", "conversation_id": ...}'
        raise ApiError(400, "invalid_input", wanted, field="body")
    unknown = set(raw) - {"message", "conversation_id", "stream"}
    if unknown:
        name = sorted(unknown)[0]
        raise ApiError(400, "invalid_input", f"unknown field {name!r}", field=name)
    message = raw.get("message")
    if not isinstance(message, str):
        raise ApiError(400, "invalid_input", "message must be text", field="message", value=message)
    streamed = raw.get("stream", False)
    if not isinstance(streamed, bool):
        raise ApiError(400, "invalid_input", "stream must be true or false", field="stream", value=streamed)
    conversation = raw.get("conversation_id")
    if conversation is not None and not isinstance(conversation, str):
        raise ApiError(400, "invalid_input", "conversation_id must be text", field="conversation_id",
                       value=conversation)  # fmt: skip
    return message, conversation, streamed


async def _write_events(
    events: AsyncGenerator[Event, None], write: Callable[[bytes], Awaitable[None]], task: str | None = None
) -> None:
    """Write ``events`` as Server-Sent Events (with ``task``: only that task's). The reader
    is closed however this ends — the client hanging up cancels it here, and the reader
    (an async generator) is closed in this task, never left to the garbage collector. A
    reader that fell behind retention gets a last ``gone`` event (``{"after": ...,
    "oldest": ...}``) and the stream ends."""
    from ..store import EventsGone

    async with aclosing(events) as stream:
        await write(b": greenroom events\n\n")
        try:
            async for event in stream:
                if task is None or event.task_id == task:
                    await write(b"id: %d\ndata: %s\n\n" % (event.seq, _encoder.encode(event)))
        except EventsGone as gone:
            document = {"after": gone.after, "oldest": gone.oldest, "message": str(gone)}
            await write(b"event: gone\ndata: %s\n\n" % _encoder.encode(document))
