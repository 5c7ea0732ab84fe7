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

from .._errors import InvalidInput
from ..harness import MCPServerConfig, MCPToolFailed, Tool
from ..messages import ModelToolCall, ToolOutcome, ToolSpec

_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class LoadTool(Protocol):
    """What a session needs of a tool (a :class:`~greenroom.harness.Tool` is one)."""

    name: str

    def spec(self) -> ToolSpec: ...

    def validate(self, arguments: dict[str, Any]) -> Any: ...

    async def call(self, validated: Any) -> Any: ...


McpServer = MCPServerConfig
"""A workload's MCP server (``greenroom.harness.MCPServerConfig``)."""


@asynccontextmanager
async def mcp_tools(servers: Sequence[McpServer]) -> AsyncIterator[list[Tool]]:
    """The tools of ``servers`` — each the agents' own (``MCPClient.harness_tools``: the
    server checks the arguments and answers its structured content, else its text; a
    failure raises ``MCPToolFailed``) — each server's client open until the block ends (a
    stdio server's process then stops). ``ValueError`` naming a tool asked for that a
    server does not have. Cancelled while connecting, what was opened is closed."""
    tools: list[Tool] = []
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
            tools.extend(client.harness_tools(list(wanted)))
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


async def call_tool(tool: LoadTool, call: ModelToolCall) -> ToolOutcome:
    """Run ``tool`` on the model's call (its arguments checked first): what came of it —
    a failure too (the model is told; the load goes on). Cancellation propagates."""
    if call.arguments_error is not None:
        return ToolOutcome.failed(call.name, call.arguments, call.arguments_error, id=call.id)
    try:
        result = await tool.call(tool.validate(call.arguments))
    except anyio.get_cancelled_exc_class():
        raise
    except MCPToolFailed as failure:  # the server said so: its text is what the model is told
        return ToolOutcome.failed(call.name, call.arguments, str(failure), id=call.id)
    except Exception as failure:  # the user's tool failed: the model is told, the load goes on
        error = f"{type(failure).__name__}: {failure}"
        return ToolOutcome.failed(call.name, call.arguments, error, id=call.id)
    return ToolOutcome(name=call.name, arguments=call.arguments, ok=True, result=result, id=call.id)
