"""The task tools over MCP: the server that serves them, and the executor that calls them.

``task_server(store)`` is an MCP server (the official SDK's ``MCPServer``) with six
tools: ``add_task``, ``list_tasks``, ``update_task``, ``complete_task``, ``delete_task``
and ``delete_completed_tasks`` (a bulk operation, in one transaction).
None of them takes a ``user_id`` argument: the caller's user id travels in the MCP
request's metadata (``_meta["dev.greenroom/user_id"]``), set by the executor from the
authenticated request, never by the model. A model that writes ``user_id`` into its
arguments changes nothing (unknown arguments are dropped before the call). The request's
hold on its conversation travels the same way (``_meta["dev.greenroom/hold"]``, the
conversation's id and the hold's token, from :func:`holding`): every write is made under
it, and refused — a ``SYSTEM_ERROR`` result, nothing changed — once another request took
the conversation (this one paused past its hold).

Each tool carries MCP annotations (read-only, destructive, closed-world), from which the
executor's ``tool_risk`` gives the :class:`~greenroom.harness.RiskLevel` a sandbox allows it
by (see :func:`risk_of`).

``MCPToolExecutor`` is the spec's ``ToolExecutor`` on an MCP client: in-process (the
SDK's in-memory transport) for an ``MCPServer``, streamable HTTP for a URL, or stdio for
a command. Each call returns a :class:`ToolResult`; a tool that raises, or answers
something that is not a tool result, is a ``SYSTEM_ERROR`` result, never an exception.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Literal, Protocol, get_args, runtime_checkable

import anyio
import msgspec
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from ..harness import MCPAnswer, MCPClient, RiskLevel
from ..messages import ToolOutcome, ToolSpec
from ..store import Fenced
from ._kept import ChatStore, ConversationHold, TaskRow

USER_META = "dev.greenroom/user_id"
"""The ``_meta`` key that carries the authenticated user id to the tool server."""
HOLD_META = "dev.greenroom/hold"
"""The ``_meta`` key that carries the request's hold (``[conversation id, token]``)."""

_HOLD: ContextVar[ConversationHold | None] = ContextVar("greenroom_chat_hold", default=None)


@contextmanager
def holding(hold: ConversationHold | None) -> Iterator[None]:
    """Tool calls made inside (by this task and the tasks it starts) write under ``hold``:
    :meth:`MCPToolExecutor.execute` sends it with each call."""
    reset = _HOLD.set(hold)
    try:
        yield
    finally:
        _HOLD.reset(reset)


TASK_TOOLS = (
    "add_task",
    "list_tasks",
    "update_task",
    "complete_task",
    "delete_task",
    "delete_completed_tasks",
)
MAX_BULK = 10_000
"""The most tasks one bulk call names."""

ErrorCode = Literal["NOT_FOUND", "AMBIGUOUS", "INVALID_INPUT", "UNAUTHORIZED", "SYSTEM_ERROR"]


class ToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one tool call returned: ``data`` on success, else ``error`` and ``error_code``
    — spec 002's view of a :class:`~greenroom.messages.ToolOutcome` (:meth:`of`,
    :meth:`outcome`)."""

    success: bool
    data: Any = None
    error: str | None = None
    error_code: ErrorCode | None = None

    @classmethod
    def of(cls, outcome: ToolOutcome) -> ToolResult:
        code = outcome.error_code
        if code is not None and code not in _CODES:  # a code spec 002 does not have
            code = "SYSTEM_ERROR"
        return cls(success=outcome.ok, data=outcome.result, error=outcome.error, error_code=code)  # type: ignore[arg-type]

    def outcome(
        self, tool_name: str, parameters: dict[str, Any], duration_ms: int | None = None
    ) -> ToolOutcome:
        """This result as the call's outcome (what the engine keeps and the store holds)."""
        return ToolOutcome(
            name=tool_name,
            arguments=parameters,
            ok=self.success,
            result=self.data,
            error=self.error,
            error_code=self.error_code,
            duration_ms=duration_ms,
        )


_CODES = frozenset(get_args(ErrorCode))


@runtime_checkable
class ToolExecutor(Protocol):
    """Spec 002's tool executor: runs a tool for a user; ``parameters`` never hold the user."""

    async def execute(self, tool_name: str, parameters: dict[str, Any], user_id: str) -> ToolResult: ...

    def get_available_tools(self) -> list[str]: ...


_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
_REMOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)


# -- the server ------------------------------------------------------------------------------


def _task_view(task: TaskRow) -> dict[str, Any]:
    return {"id": task.id, "title": task.title, "description": task.description, "completed": task.completed}


def _fail(code: ErrorCode, error: str, **data: Any) -> dict[str, Any]:
    return {"success": False, "error": error, "error_code": code, "data": data or None}


def _ok(data: Any) -> dict[str, Any]:
    return {"success": True, "data": data, "error": None, "error_code": None}


def _text(field: str, value: Any, limit: int, *, required: bool) -> str | dict[str, Any]:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value.strip()) or len(value) > limit:
        return _fail("INVALID_INPUT", f"{field} must be text of 1-{limit} characters", field=field)
    if "\x00" in value:  # no store can keep it as text (PostgreSQL refuses it outright)
        return _fail("INVALID_INPUT", f"{field} must not contain a NUL character", field=field)
    return value.strip()


def match_task(tasks: Sequence[Any], task_id: int | None, title: str | None) -> Any:
    r"""The one task meant, among ``tasks`` (``TaskRow``\ s or their dict views): by id,
    or by title (exact, else a unique part of one). Returns the task, or a failed tool
    response (``NOT_FOUND``, ``AMBIGUOUS``, ``INVALID_INPUT``) as a dict."""

    def field(task: Any, name: str) -> Any:
        return task.get(name) if isinstance(task, dict) else getattr(task, name)

    if task_id is not None:
        for task in tasks:
            if field(task, "id") == task_id:
                return task
        return _fail("NOT_FOUND", "no such task", query="that task")
    if not isinstance(title, str) or not title.strip():
        return _fail("INVALID_INPUT", "give the task's title", field="title")
    query = title.strip().lower()
    exact = [t for t in tasks if str(field(t, "title")).lower() == query]
    found = exact or [t for t in tasks if query in str(field(t, "title")).lower()]
    if not found:
        return _fail("NOT_FOUND", "no such task", query=title.strip())
    if len(found) > 1:
        options = [field(t, "title") for t in found[:5]]
        return _fail("AMBIGUOUS", "several tasks match", query=title.strip(), options=options)
    return found[0]


async def _find(
    store: ChatStore, user: str, task_id: int | None, title: str | None
) -> TaskRow | dict[str, Any]:
    found: TaskRow | dict[str, Any] = match_task(await store.list_tasks(user), task_id, title)
    return found


def task_server(store: ChatStore, *, name: str = "greenroom-tasks") -> MCPServer:
    """An MCP server (``mcp.server.mcpserver.MCPServer``) with the task tools on ``store``.

    The SDK's server calls ``logging.basicConfig`` when it is made; greenroom is embedded
    in other people's apps, so the root logger is left exactly as it was."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        server = MCPServer(name, log_level="WARNING")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)

    def user_of(ctx: Context) -> str | None:
        meta = ctx.request_context.meta
        user = meta.get(USER_META) if meta else None
        return user if isinstance(user, str) and user else None

    def hold_of(ctx: Context) -> ConversationHold | dict[str, Any] | None:
        """The request's hold, ``None`` (a caller that holds nothing), or a failure."""
        meta = ctx.request_context.meta
        sent = meta.get(HOLD_META) if meta else None
        if sent is None:
            return None
        match sent:
            case [str(conversation), int(token)] if conversation and token > 0:
                return ConversationHold(conversation, token)
        return _fail("INVALID_INPUT", f"{HOLD_META} must be [conversation id, token], not {sent!r:.80}")

    def caller(ctx: Context) -> tuple[str, ConversationHold | None] | dict[str, Any]:
        """Who calls (the user, and the hold its request writes under), or a failure."""
        user = user_of(ctx)
        if user is None:
            return _fail("UNAUTHORIZED", "no user")
        hold = hold_of(ctx)
        return hold if isinstance(hold, dict) else (user, hold)

    def written(tool: Callable[..., Awaitable[dict[str, Any]]]) -> Callable[..., Awaitable[dict[str, Any]]]:
        """A write tool: refused whole, as a result, when its request no longer holds the
        conversation (another request took it)."""

        @functools.wraps(tool)
        async def under_hold(*args: Any, **kwargs: Any) -> dict[str, Any]:
            try:
                return await tool(*args, **kwargs)
            except Fenced as fenced:
                return _fail("SYSTEM_ERROR", f"nothing changed: {fenced}")

        return under_hold

    @server.tool(annotations=_WRITES)
    @written
    async def add_task(title: str, ctx: Context, description: str = "") -> dict[str, Any]:
        """Create a new task for the user."""
        who = caller(ctx)
        if isinstance(who, dict):
            return who
        user, hold = who
        clean = _text("title", title, 200, required=True)
        detail = _text("description", description, 2000, required=False)
        if isinstance(clean, dict):
            return clean
        if isinstance(detail, dict):
            return detail
        return _ok(_task_view(await store.add_task(user, clean, detail, hold=hold)))

    @server.tool(annotations=_READS)
    async def list_tasks(ctx: Context, status: str = "all") -> dict[str, Any]:
        """List the user's tasks: status is all, pending or completed."""
        user = user_of(ctx)
        if user is None:
            return _fail("UNAUTHORIZED", "no user")
        if status not in ("all", "pending", "completed"):
            return _fail("INVALID_INPUT", "status must be all, pending or completed", field="status")
        return _ok([_task_view(t) for t in await store.list_tasks(user, status)])

    @server.tool(annotations=_WRITES)
    @written
    async def update_task(
        ctx: Context,
        task_id: int | None = None,
        title: str | None = None,
        new_title: str | None = None,
        description: str | None = None,
    ) -> dict[str, Any]:
        """Change a task's title or description; name the task by id or by its title."""
        who = caller(ctx)
        if isinstance(who, dict):
            return who
        user, hold = who
        found = await _find(store, user, task_id, title)
        if isinstance(found, dict):
            return found
        changes: dict[str, str] = {}
        if new_title is not None:
            clean = _text("new_title", new_title, 200, required=True)
            if isinstance(clean, dict):
                return clean
            changes["title"] = clean
        if description is not None:
            detail = _text("description", description, 2000, required=False)
            if isinstance(detail, dict):
                return detail
            changes["description"] = detail
        if not changes:
            return _fail("INVALID_INPUT", "nothing to change", field="new_title")
        updated = await store.update_task(user, found.id, **changes, hold=hold)
        if updated is None:
            return _fail("NOT_FOUND", "no such task", query=found.title)
        return _ok({**_task_view(updated), "changed": sorted(changes), "old_title": found.title})

    async def on_found(
        ctx: Context,
        task_id: int | None,
        title: str | None,
        act: Callable[..., Awaitable[TaskRow | None]],
    ) -> dict[str, Any]:
        """Find the task meant for this request's user, then ``act`` on it by id (under
        the request's hold)."""
        who = caller(ctx)
        if isinstance(who, dict):
            return who
        user, hold = who
        found = await _find(store, user, task_id, title)
        if isinstance(found, dict):
            return found
        changed = await act(user, found.id, hold=hold)
        if changed is None:  # gone between the lookup and the change
            return _fail("NOT_FOUND", "no such task", query=found.title)
        return _ok(_task_view(changed))

    @server.tool(annotations=_WRITES)
    @written
    async def complete_task(
        ctx: Context, task_id: int | None = None, title: str | None = None
    ) -> dict[str, Any]:
        """Mark a task as done; name it by id or by its title."""
        return await on_found(ctx, task_id, title, store.complete_task)

    @server.tool(annotations=_REMOVES)
    @written
    async def delete_task(
        ctx: Context, task_id: int | None = None, title: str | None = None
    ) -> dict[str, Any]:
        """Remove a task (the assistant asks the user to confirm first); by id or title."""
        return await on_found(ctx, task_id, title, store.delete_task)

    @server.tool(annotations=_REMOVES)
    @written
    async def delete_completed_tasks(ctx: Context, task_ids: list[int] | None = None) -> dict[str, Any]:
        """Remove all of the user's completed tasks, in one go (the assistant asks the user
        to confirm first); ``task_ids`` limits it to those of them."""
        who = caller(ctx)
        if isinstance(who, dict):
            return who
        user, hold = who
        if task_ids is None:
            task_ids = [t.id for t in await store.list_tasks(user, "completed")]
        elif len(task_ids) > MAX_BULK:
            return _fail("INVALID_INPUT", f"at most {MAX_BULK} tasks at once", field="task_ids")
        gone = await store.delete_tasks(user, task_ids, only_completed=True, hold=hold)
        return _ok({"deleted": [_task_view(t) for t in gone], "count": len(gone)})

    return server


# -- the executor ----------------------------------------------------------------------------


class MCPToolExecutor:
    """A ``ToolExecutor`` on one MCP client connection (:class:`~greenroom.harness.MCPClient`),
    held open while in use.

    ``server``: an ``MCPServer`` (in-process, the default: ``task_server(store)``), a URL
    (streamable HTTP) or ``mcp.StdioServerParameters`` (a command). ``call_timeout``:
    seconds per call. Use it as ``async with MCPToolExecutor(...) as tools:``; leaving
    the block closes the connection. Cancelling a call abandons it (the in-process
    server cancels its handler).
    """

    def __init__(self, server: Any, *, call_timeout: float = 10.0) -> None:
        self.server = server
        self.call_timeout = call_timeout
        self._client: MCPClient | None = None
        self._specs: dict[str, ToolSpec] = {}
        self._accepted: dict[str, frozenset[str]] = {}

    async def __aenter__(self) -> MCPToolExecutor:
        client = MCPClient(self.server, call_timeout=self.call_timeout)
        await client.__aenter__()
        self._client = client
        for tool in client.tools.values():
            schema = dict(tool.schema)
            properties = {k: v for k, v in (schema.get("properties") or {}).items() if k != "user_id"}
            schema["properties"] = properties
            if "required" in schema:
                schema["required"] = [r for r in schema["required"] if r != "user_id"]
            self._specs[tool.name] = ToolSpec(tool.name, tool.description, schema)
            self._accepted[tool.name] = frozenset(properties)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.__aexit__(None, None, None)  # in the task that opened it

    def get_available_tools(self) -> list[str]:
        return sorted(self._specs)

    def tool_risk(self, tool_name: str) -> RiskLevel:
        """How much harm ``tool_name`` can do, from the server's annotations (see
        :func:`~greenroom.harness.risk_of`): what a :class:`~greenroom.harness.Sandbox`
        allows it by. ``WRITES`` for a tool the server does not list."""
        found = None if self._client is None else self._client.tools.get(tool_name)
        return RiskLevel.WRITES if found is None else found.risk

    def tool_specs(self, names: Sequence[str] | None = None) -> tuple[ToolSpec, ...]:
        """The tools as offered to a model: their JSON Schemas, with no ``user_id``."""
        wanted = self.get_available_tools() if names is None else [n for n in names if n in self._specs]
        return tuple(self._specs[name] for name in wanted)

    async def execute(self, tool_name: str, parameters: dict[str, Any], user_id: str) -> ToolResult:
        client = self._client
        if client is None:
            raise RuntimeError("MCPToolExecutor is not open: use 'async with MCPToolExecutor(...)'")
        accepted = self._accepted.get(tool_name)
        if accepted is None:
            return ToolResult(success=False, error=f"unknown tool {tool_name!r}", error_code="INVALID_INPUT")
        arguments = {k: v for k, v in parameters.items() if k in accepted}  # user_id never passes
        try:
            meta: dict[str, Any] = {USER_META: user_id}
            hold = _HOLD.get()
            if hold is not None:
                meta[HOLD_META] = [hold.conversation_id, hold.token]
            answer = await client.call(tool_name, arguments, meta=meta)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:  # the server, the transport or the SDK failed: a result, not a crash
            return ToolResult(success=False, error=f"{type(error).__name__}", error_code="SYSTEM_ERROR")
        return _decode_result(answer)


def _decode_result(answer: MCPAnswer) -> ToolResult:
    if answer.failed:
        return ToolResult(success=False, error="the tool failed", error_code="SYSTEM_ERROR")
    payload = answer.structured
    if payload is None:
        if len(answer.texts) != 1:
            return ToolResult(
                success=False, error="the tool answered nothing usable", error_code="SYSTEM_ERROR"
            )
        try:
            payload = msgspec.json.decode(answer.texts[0])
        except msgspec.DecodeError:
            return ToolResult(
                success=False, error="the tool answered nothing usable", error_code="SYSTEM_ERROR"
            )
    if isinstance(payload, dict) and "result" in payload and "success" not in payload:
        payload = payload["result"]
    try:
        return msgspec.convert(payload, ToolResult)
    except msgspec.ValidationError:
        return ToolResult(success=False, error="the tool answered nothing usable", error_code="SYSTEM_ERROR")


def now_ms() -> float:
    return time.perf_counter() * 1000
