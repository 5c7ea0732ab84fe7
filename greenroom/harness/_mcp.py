"""``MCPClient``: one open connection to an MCP server through the official ``mcp`` SDK's
client — the one greenroom's tool users share: the chat assistant's executor
(``chat.MCPToolExecutor``), ``greenroom load``'s workload tools, and a harness's tools
(:meth:`MCPClient.harness_tools`).

The ``mcp`` package is imported when a client opens, never before: a process that uses
no MCP server does not pay for it.
"""

from __future__ import annotations

import re
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import msgspec

from .._errors import GreenroomError, InvalidInput
from ._tools import RiskLevel, Tool, current_call

KEY_META = "dev.greenroom/idempotency_key"
"""The ``_meta`` key a harness's MCP call carries its idempotency key in (the same in
every attempt of the call): a server that keeps the keys it applied runs a retry once."""
TOKEN_META = "dev.greenroom/fencing_token"
"""The ``_meta`` key of the call's attempt's fencing token (it only grows): a server that
keeps the greatest it has seen per task refuses a stale attempt's call."""
TASK_META = "dev.greenroom/task_id"


class MCPToolInfo(msgspec.Struct, frozen=True):
    """One tool a server lists: its name, description, JSON Schema of its arguments (the
    schema's ``title`` left out) and how much harm it can do (:func:`risk_of`)."""

    name: str
    description: str
    schema: dict[str, Any]
    risk: RiskLevel


class MCPToolFailed(GreenroomError):
    """An MCP server said its tool failed (its text, if it sent one)."""


class MCPAnswer(msgspec.Struct, frozen=True):
    """What a call answered: ``failed`` (the server said the tool failed), its
    structured content (``None`` if it sent none) and its text contents."""

    failed: bool
    structured: Any = None
    texts: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


def risk_of(annotations: Any) -> RiskLevel:
    """A tool's :class:`RiskLevel` from its MCP annotations (``mcp.types.ToolAnnotations``):
    ``read_only_hint`` true is ``READ_ONLY``; ``open_world_hint`` true (it reaches outside
    the server's own data) is ``NETWORK``; anything else, unannotated tools included, is
    ``WRITES`` (the MCP default assumes a tool may change things)."""
    if annotations is None:
        return RiskLevel.WRITES
    if getattr(annotations, "open_world_hint", None) is True:
        return RiskLevel.NETWORK
    if getattr(annotations, "read_only_hint", None) is True:
        return RiskLevel.READ_ONLY
    return RiskLevel.WRITES


class MCPServerConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How to reach an MCP server, as a config file says it: a ``command`` run with
    ``args`` (stdio; ``env``: variables it gets beyond the few safe ones the ``mcp``
    client passes on) or a ``url`` (streamable HTTP); ``tools``: only these of the ones it
    lists (default: every one); ``timeout_s``: seconds per call. The daemon's
    ``[mcp.<name>]`` tables and a load workload's ``mcp`` entries are these."""

    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] | None = None
    url: str | None = None
    tools: tuple[str, ...] | None = None
    timeout_s: float = 30.0

    def check(self, field: str) -> MCPServerConfig:
        """This server, or ``ValueError`` naming ``field`` and what is wrong."""
        if (self.command is None) == (self.url is None):
            raise ValueError(f"{field} needs one of command (stdio) and url (streamable HTTP)")
        if self.url is not None and not re.match(r"^https?://\S+$", self.url):
            raise ValueError(f"{field}.url must be an http(s) URL, got {self.url!r}")
        if self.command is not None and not self.command.strip():
            raise ValueError(f"{field}.command must be a program, got {self.command!r}")
        if not 0 < self.timeout_s <= 3600:
            raise ValueError(f"{field}.timeout_s must be seconds in (0, 3600], got {self.timeout_s!r}")
        return self

    def client(self) -> MCPClient:
        """A client of this server (not opened yet: ``async with``)."""
        target: Any = self.url
        if target is None:
            from mcp import StdioServerParameters

            target = StdioServerParameters(command=self.command or "", args=list(self.args), env=self.env)
        return MCPClient(target, call_timeout=self.timeout_s)

    def wanted(self, client: MCPClient, field: str) -> list[str]:
        """The tools of the open ``client`` this config asks for; ``InvalidInput`` naming
        ``field`` for one the server does not have."""
        wanted = list(client.tools) if self.tools is None else list(self.tools)
        missing = [name for name in wanted if name not in client.tools]
        if missing:
            raise InvalidInput(
                f"{field}: the server has no tool {missing[0]!r} "
                f"(it has {', '.join(sorted(client.tools)) or 'none'})",
                field=field,
                value=missing[0],
            )
        return wanted


class MCPClient:
    """A connection to ``server``: an ``mcp`` ``MCPServer`` (in-process, the SDK's
    in-memory transport), a URL (streamable HTTP) or ``mcp.StdioServerParameters`` (a
    command, started for the connection and stopped with it). ``call_timeout``: seconds
    a call may take. ``async with MCPClient(...) as client:`` opens it and lists the
    server's tools (:attr:`tools`); leaving the block closes it (in the task that opened
    it: the SDK's task group lives there). Cancelled while opening, what was opened is
    closed."""

    def __init__(self, server: Any, *, call_timeout: float = 10.0) -> None:
        self.server = server
        self.call_timeout = call_timeout
        self.tools: dict[str, MCPToolInfo] = {}
        """The server's tools by name, as it listed them when the client opened."""
        self._client: Any = None
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> MCPClient:
        from mcp.client.client import Client

        stack = AsyncExitStack()
        try:
            self._client = await stack.enter_async_context(Client(self.server, cache=None))
            listing = await self._client.list_tools()
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        for tool in listing.tools:
            schema = dict(tool.input_schema or {"type": "object", "properties": {}})
            schema.pop("title", None)
            self.tools[tool.name] = MCPToolInfo(
                tool.name, tool.description or "", schema, risk_of(tool.annotations)
            )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        self._client = None
        if stack is not None:
            await stack.aclose()

    async def call(
        self, name: str, arguments: dict[str, Any], *, meta: dict[str, Any] | None = None
    ) -> MCPAnswer:
        """Call the tool ``name``; ``meta``: the request's ``_meta`` (what the caller is,
        never the model's to set). Raises what the SDK raises when the call cannot be
        made (the transport, a timeout after ``call_timeout``); a tool that failed is an
        answer with ``failed``. Cancelled, the call is abandoned (the server is told)."""
        client = self._client
        if client is None:
            raise RuntimeError("MCPClient is not open: use 'async with MCPClient(...)'")
        result = await client.call_tool(name, arguments, read_timeout_seconds=self.call_timeout, meta=meta)
        texts = tuple(
            c.text for c in getattr(result, "content", ()) or () if getattr(c, "type", "") == "text"
        )
        return MCPAnswer(
            failed=bool(getattr(result, "is_error", False)),
            structured=getattr(result, "structured_content", None),
            texts=texts,
        )

    def harness_tools(self, names: list[str] | None = None) -> list[Tool]:
        """The server's tools (``names``: only these) as harness :class:`Tool` s: each
        offered with the server's schema and its risk, its call answered with the
        structured content (else the text), a failure raised as :class:`MCPToolFailed`
        (the model is told, as of any tool that raises). In a durable harness each call's
        ``_meta`` carries its idempotency key, fencing token and task (:data:`KEY_META`,
        :data:`TOKEN_META`, :data:`TASK_META`), as :func:`current_call` gives a Python
        tool. They call through this client: keep it open while a harness may use them.
        ``KeyError`` naming a tool the server does not have."""
        wanted = list(self.tools) if names is None else names
        tools = []
        for name in wanted:
            info = self.tools[name]
            tools.append(
                Tool(
                    name,
                    self._runner(name),
                    description=info.description,
                    risk=info.risk,
                    parameters=info.schema,
                )
            )
        return tools

    def _runner(self, name: str) -> Any:
        async def run(**arguments: Any) -> Any:
            call = current_call()  # a durable harness's call: the server may fence with them
            meta = None
            if call is not None and call.fencing_token is not None:
                meta = {
                    KEY_META: call.idempotency_key,
                    TOKEN_META: call.fencing_token,
                    TASK_META: call.task_id,
                }
            answer = await self.call(name, arguments, meta=meta)
            if answer.failed:
                raise MCPToolFailed(answer.text or f"the tool {name!r} failed")
            return answer.structured if answer.structured is not None else answer.text

        return run
