"""``Tool``: a function a harness may call for a model, with validated arguments."""

from __future__ import annotations

import contextvars
import enum
import functools
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from .._checks import check_seconds
from .._errors import InvalidInput
from ..messages import ToolSpec, convert

_TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class RiskLevel(enum.IntEnum):
    """How much harm a tool can do; a sandbox allows tools up to its ``max_risk``."""

    READ_ONLY = 0
    """Reads data; changes nothing."""
    WRITES = 1
    """Writes inside the agent's own workspace."""
    NETWORK = 2
    """Talks to other machines."""
    EXECUTES = 3
    """Runs programs or changes things outside the workspace."""


class Tool:
    """``fn`` called with the validated arguments.

    ``args``: a ``msgspec.Struct`` type the model's arguments are converted to (an
    error names the field and the value; the tool is not called) and whose JSON Schema
    is offered to the model; ``fn`` then receives one instance. Without ``args``, ``fn``
    receives the arguments as keyword arguments, checked against its signature the same
    way: its parameters, their annotations and defaults are the schema the model is
    offered (a model shown an empty schema guesses, and every call fails). Only a
    function taking ``**kwargs`` (or whose annotations msgspec cannot describe) is
    offered an open object. ``fn`` may be async; a plain function runs in a worker thread
    (``anyio.to_thread``), so a blocking one — an HTTP client that is not async, a
    database driver — never stops the event loop, and with it every lease's heartbeat;
    ``inline=True`` runs a quick one on the loop instead (no thread hop: for a function
    that only computes, or that touches the loop's own objects). A thread cannot be
    interrupted: cancelled or past the sandbox's ``tool_timeout``, the call is abandoned
    (its answer dropped) and runs on to its end. Its return value must encode as JSON.

    ``parameters``: the JSON Schema offered to the model, for an ``fn`` taking
    ``**arguments`` that something else checks (an MCP server's tool,
    :meth:`MCPClient.harness_tools`): ``fn`` receives the arguments as the model sent them.

    A tool that changes things and takes a keyword parameter ``idempotency_key`` (not
    offered to the model) is given one by a durable harness: the same for every attempt
    of the same call, so it can tell a retry after a crash from a new call. Without one,
    a durable harness does not run again a call that may have run. Any tool can read its
    call's key and its attempt's fencing token from :func:`current_call`.
    """

    def __init__(
        self,
        name: str,
        fn: Callable[..., Any] | Callable[..., Awaitable[Any]],
        *,
        description: str = "",
        args: type[msgspec.Struct] | None = None,
        risk: RiskLevel = RiskLevel.READ_ONLY,
        requires_approval: bool = False,
        approval_expires_in: float | None = None,
        inline: bool = False,
        parameters: dict[str, Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not _TOOL_NAME.fullmatch(name):
            raise InvalidInput(f"Tool name must be 1-64 letters, digits, _ or -, got {name!r}", field="name")
        if not callable(fn):
            raise TypeError(f"Tool {name!r} fn must be callable, got {fn!r}")
        if args is not None and not (isinstance(args, type) and issubclass(args, msgspec.Struct)):
            raise TypeError(f"Tool {name!r} args must be a msgspec.Struct type, got {args!r}")
        if not isinstance(risk, RiskLevel):
            raise InvalidInput(f"Tool {name!r} risk must be a RiskLevel, got {risk!r}", field="risk")
        self.name = name
        self.fn = fn
        self.description = description
        self.args = args
        self.risk = risk
        self.requires_approval = bool(requires_approval)
        """Each call waits for a person's approval (a durable harness parks the task)."""
        self.approval_expires_in = (
            None if approval_expires_in is None else check_seconds(f"Tool {name!r}", "approval_expires_in",
                                                                  approval_expires_in)
        )  # fmt: skip
        """Seconds a call may wait for a decision; then it is denied (``None``: no limit)."""
        self.is_async = inspect.iscoroutinefunction(fn)
        if not isinstance(inline, bool):
            raise InvalidInput(f"Tool {name!r} inline must be true or false, got {inline!r}", field="inline")
        self.inline = inline
        """A plain function that runs on the event loop (``False``: in a worker thread)."""
        self.takes_idempotency_key = args is None and _has_keyword(fn, IDEMPOTENCY_KEY)
        """``fn`` takes ``idempotency_key``: a durable harness passes the call's own."""
        if parameters is not None and (not isinstance(parameters, dict) or args is not None):
            raise TypeError(f"Tool {name!r} parameters must be a JSON Schema (a dict), and not with args")
        self._keywords = _signature_struct(name, fn) if args is None and parameters is None else None
        self._spec = ToolSpec(self.name, self.description, parameters or self._parameters())

    def _parameters(self) -> dict[str, Any]:
        shape = self.args if self.args is not None else self._keywords
        if shape is None:
            return {"type": "object", "properties": {}}
        schema = msgspec.json.schema(shape)
        parameters = schema["$defs"][schema["$ref"].rsplit("/", 1)[1]] if "$ref" in schema else schema
        parameters = {k: v for k, v in parameters.items() if k != "title"}
        parameters.setdefault("properties", {})
        return parameters

    def spec(self) -> ToolSpec:
        """The tool as offered to a model."""
        return self._spec

    def validate(self, arguments: dict[str, Any]) -> Any:
        """The arguments as ``fn`` takes them; ``RecordError`` naming the field if bad."""
        where = f"tool {self.name!r} arguments"
        if self.takes_idempotency_key and self._keywords is not None:
            key = arguments.get(IDEMPOTENCY_KEY)
            arguments = {k: v for k, v in arguments.items() if k != IDEMPOTENCY_KEY}
            checked = convert(arguments, self._keywords, where)
            return {
                **{field: getattr(checked, field) for field in checked.__struct_fields__},
                IDEMPOTENCY_KEY: key,
            }
        if self.args is not None:
            return convert(arguments, self.args, where)
        if self._keywords is None:
            return arguments
        checked = convert(arguments, self._keywords, where)
        return {field: getattr(checked, field) for field in checked.__struct_fields__}

    async def call(self, validated: Any) -> Any:
        """Call ``fn`` with ``validated``: awaited if async, inline if ``inline``, else in
        a worker thread (abandoned, still running, if this is cancelled)."""
        fn = self.fn
        if self.is_async:
            return await (fn(**validated) if self.args is None else fn(validated))
        if self.inline:
            return fn(**validated) if self.args is None else fn(validated)
        call = functools.partial(fn, **validated) if self.args is None else functools.partial(fn, validated)
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


IDEMPOTENCY_KEY = "idempotency_key"


class ToolCall(msgspec.Struct, frozen=True):
    """What a running tool knows of its call (:func:`current_call`).

    ``idempotency_key``: the same for every attempt of this call of a durable task
    (``<task id>/<step>``), the call's own id otherwise — pass it to the system the tool
    changes, so it can tell a retry after a crash from a new call. ``fencing_token``: the
    token of the task attempt the call runs under (it only ever grows: a later attempt
    has a greater one; ``None`` outside a durable task) — pass it along too, and a system
    that keeps the greatest token it has seen per task can refuse a write from an attempt
    that paused past its lease and woke after another attempt wrote (the store refuses
    such an attempt's own writes; only the tool can fence the outside world)."""

    idempotency_key: str
    fencing_token: int | None = None
    task_id: str | None = None
    step: str | None = None


_current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "greenroom_tool_call", default=None
)


def current_call() -> ToolCall | None:
    """The call the calling tool runs for (in an async tool, or a plain function's worker
    thread: the context goes with it); ``None`` outside a tool call."""
    return _current_call.get()


def calling(call: ToolCall) -> contextvars.Token[ToolCall | None]:
    """Make ``call`` the current one (:func:`current_call`) until the token is reset."""
    return _current_call.set(call)


def called(token: contextvars.Token[ToolCall | None]) -> None:
    _current_call.reset(token)


def _has_keyword(fn: Callable[..., Any], name: str) -> bool:
    try:
        parameter = inspect.signature(fn).parameters.get(name)
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.kind in (
        parameter.POSITIONAL_OR_KEYWORD,
        parameter.KEYWORD_ONLY,
    )


def _signature_struct(name: str, fn: Callable[..., Any]) -> type[msgspec.Struct] | None:
    """A struct of ``fn``'s keyword parameters (annotation, default), or ``None`` when
    its signature cannot be one (``*args``/``**kwargs``, positional-only parameters, an
    annotation msgspec cannot describe as JSON)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an unresolvable annotation: the parameters are then untyped
        hints = {}
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for parameter in signature.parameters.values():
        if parameter.name == IDEMPOTENCY_KEY:
            continue  # given by the harness, never by the model
        if parameter.kind not in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY):
            return None
        kind = hints.get(parameter.name, Any)
        if parameter.default is parameter.empty:
            fields.append((parameter.name, kind))
        else:
            fields.append((parameter.name, kind, parameter.default))
    fields.sort(key=len)  # msgspec wants the required fields first
    try:
        shape = msgspec.defstruct(f"{name}_arguments", fields, forbid_unknown_fields=True)
        msgspec.json.schema(shape)
    except (TypeError, ValueError):
        return None
    return shape
