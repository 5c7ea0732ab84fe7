"""Real tools for a load's sessions beyond the synthetic ones: the tools of MCP servers
(:class:`McpServer`, reached through the official ``mcp`` client) and your own Python
functions named ``module:function`` in a workload file.

Every tool here looks the same to a session (:class:`LoadTool`): a name, the schema the
model is offered, a check of the model's arguments, a call that answers text. A tool's
failure is told to the model as its result; the load goes on.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, Protocol

import anyio
import msgspec

from .._errors import InvalidInput
from ..harness import MCPClient, MCPServerConfig, MCPToolInfo, Tool
from ..messages import ToolSpec

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_encode = msgspec.json.Encoder().encode


class ToolFailed(Exception):
    """A tool answered with an error (an MCP server's ``isError`` result): its text is what
    the model is told."""


class LoadTool(Protocol):
    """What a session needs of a tool (a :class:`~greenroom.harness.Tool` is one)."""

    name: str

    def spec(self) -> ToolSpec: ...

    def validate(self, arguments: dict[str, Any]) -> Any: ...

    async def call(self, validated: Any) -> Any: ...


McpServer = MCPServerConfig
"""A workload's MCP server (``greenroom.harness.MCPServerConfig``)."""


class McpTool:
    """One tool of an open :class:`~greenroom.harness.MCPClient`: the server checks the
    arguments; its answer (the structured content as JSON, else its text) is the result."""

    def __init__(self, client: MCPClient, info: MCPToolInfo) -> None:
        self.name = info.name
        self._client = client
        self._spec = ToolSpec(info.name, info.description or f"The {info.name} tool.", info.schema)

    def spec(self) -> ToolSpec:
        return self._spec

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        return arguments

    async def call(self, validated: dict[str, Any]) -> str:
        answer = await self._client.call(self.name, validated)
        text = _encode(answer.structured).decode() if answer.structured is not None else answer.text
        if answer.failed:
            raise ToolFailed(text or "the tool failed")
        return text


@asynccontextmanager
async def mcp_tools(servers: Sequence[McpServer]) -> AsyncIterator[list[McpTool]]:
    """The tools of ``servers``, each server's client open until the block ends (a stdio
    server's process then stops). ``ValueError`` naming a tool asked for that a server
    does not have. Cancelled while connecting, what was opened is closed."""
    tools: list[McpTool] = []
    if not servers:  # the mcp package is not even imported
        yield tools
        return
    async with AsyncExitStack() as stack:
        for number, server in enumerate(servers):
            client = await stack.enter_async_context(server.client())
            try:
                wanted = server.wanted(client, f"workload.mcp[{number}].tools")
            except InvalidInput:
                await stack.aclose()  # the clients closed first: the refusal is not an exception group
                raise
            tools.extend(McpTool(client, client.tools[name]) for name in wanted)
        yield tools


def python_tool(spec: str, field: str = "python_tools") -> Tool:
    """``"package.module:name"``: a :class:`~greenroom.harness.Tool` there, or a function
    (sync or async) made one (its name, its docstring, its parameters as the schema).
    ``ValueError`` naming ``field`` if it cannot be imported or is neither."""
    if not isinstance(spec, str) or not _SPEC.match(spec):
        raise ValueError(f"{field} must be 'package.module:function', got {spec!r}")
    module_name, _, attribute = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{field}: cannot import {module_name!r} ({error})") from None
    found = getattr(module, attribute, None)
    if isinstance(found, Tool):
        return found
    if not callable(found):
        raise ValueError(f"{field}: {spec!r} is not a function or a greenroom Tool")
    return Tool(attribute, found, description=(found.__doc__ or "").strip())


async def call_tool(tool: LoadTool, arguments: dict[str, Any], error: str | None) -> str:
    """Run ``tool`` on the model's ``arguments`` (``error``: why they could not be read);
    its answer as the text the model is shown, or what went wrong."""
    if error is not None:
        return f"error: {error}"
    try:
        result = await tool.call(tool.validate(arguments))
    except anyio.get_cancelled_exc_class():
        raise
    except ToolFailed as failure:
        return f"error: {failure}"
    except Exception as failure:  # the user's tool failed: the model is told, the load goes on
        return f"error: {type(failure).__name__}: {failure}"
    return result if isinstance(result, str) else _encode(result).decode()
