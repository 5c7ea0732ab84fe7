"""``HarnessToolExecutor``: a stage's tools are the harness's ``Tool`` objects, run
through the harness's ``Sandbox`` — one tool layer for the whole runtime.

Each call goes through ``Sandbox.run``, the path a harness phase uses too: its
arguments convert to its ``args`` Struct (an error names the field), the sandbox admits
it (risk level, rate limits), and an async tool runs under the sandbox's
``tool_timeout``. The answer is a :class:`StandardToolResult`: a refusal or a failure is
an error result with its type (``not_found``, ``invalid_arguments``, ``refused``,
``timeout``, or the exception's name), never an exception. A tool's
:class:`IdempotencyClass` comes from its risk level; the stage runs a non-idempotent one
at most once per envelope.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio

from .._errors import InvalidInput
from ..harness import Sandbox, Tool, ToolRefused, ToolTimedOut
from ..messages import RecordError
from ._contracts import IdempotencyClass, StandardToolResult, ToolErrorDetails


class HarnessToolExecutor:
    def __init__(self, tools: Iterable[Tool], sandbox: Sandbox | None = None) -> None:
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(f"HarnessToolExecutor tools must be Tool objects, got {tool!r}")
            if tool.name in self.tools:
                raise InvalidInput(f"HarnessToolExecutor: two tools are named {tool.name!r}", field="tools")
            self.tools[tool.name] = tool
        self.sandbox = sandbox if sandbox is not None else Sandbox()

    def idempotency(self, tool_name: str) -> IdempotencyClass:
        tool = self.tools.get(tool_name)
        return (
            IdempotencyClass.NON_IDEMPOTENT if tool is None else IdempotencyClass.from_risk_level(tool.risk)
        )

    async def execute(self, tool_name: str, params: dict[str, Any]) -> StandardToolResult:
        tool = self.tools.get(tool_name)
        if tool is None:
            return StandardToolResult.failure(ToolErrorDetails.not_found("tool", tool_name))
        try:
            result = await self.sandbox.run(tool, params)
        except RecordError as bad:
            return StandardToolResult.failure(
                ToolErrorDetails("invalid_arguments", str(bad), {"field": bad.field}, recoverable=True)
            )
        except ToolRefused as refused:
            return StandardToolResult.failure(ToolErrorDetails("refused", str(refused)))
        except ToolTimedOut as late:
            return StandardToolResult.failure(ToolErrorDetails("timeout", str(late), recoverable=True))
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:
            return StandardToolResult.failure(ToolErrorDetails.from_exception(error, recoverable=True))
        return StandardToolResult.success(result if isinstance(result, dict) else {"result": result})
