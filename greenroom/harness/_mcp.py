"""``MCPClient``: one open connection to an MCP server through the official ``mcp`` SDK's
client — the one greenroom's tool users share: the chat assistant's executor
(``chat.MCPToolExecutor``) and ``greenroom load``'s workload tools.

The ``mcp`` package is imported when a client opens, never before: a process that uses
no MCP server does not pay for it.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import msgspec

from ._tools import RiskLevel


class MCPToolInfo(msgspec.Struct, frozen=True):
    """One tool a server lists: its name, description, JSON Schema of its arguments (the
    schema's ``title`` left out) and how much harm it can do (:func:`risk_of`)."""

    name: str
    description: str
    schema: dict[str, Any]
    risk: RiskLevel


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
