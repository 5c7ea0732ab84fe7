"""``Sandbox``: the runtime checks every tool call passes before it runs."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from .._checks import check_int, check_seconds
from .._errors import GreenroomError, InvalidInput
from ._tools import RiskLevel, Tool

T = TypeVar("T")


class ToolRefused(GreenroomError):
    """The sandbox refused a tool call; the harness records it as an error result."""


class ToolTimedOut(GreenroomError):
    """An async tool call ran past the sandbox's ``tool_timeout`` and was cancelled."""


class Sandbox:
    """Risk-level and rate-limit checks, the same for model-driven and direct calls.

    ``max_risk``: the riskiest tool allowed to run. ``rate_limit``: at most ``calls``
    tool calls per ``per_seconds`` (sliding window) across all tools of this sandbox;
    ``tool_rate_limits`` maps a tool name to its own ``(calls, per_seconds)``.
    ``tool_timeout``: seconds one async tool call may run before it is cancelled and
    recorded as an error (``None``: no limit; a plain function tool runs to its end).
    ``approve_from``: tools of this risk or above need a person's approval before they
    run (as do tools made with ``requires_approval=True``); a durable harness parks the
    task until then (``None``: only those tools).
    A refused or failed call never raises out of the harness: it becomes an error
    result the model (or caller) sees.

    Share one sandbox between harnesses to share its rate limits.
    """

    def __init__(
        self,
        *,
        max_risk: RiskLevel = RiskLevel.WRITES,
        rate_limit: tuple[int, float] | None = None,
        tool_rate_limits: Mapping[str, tuple[int, float]] | None = None,
        tool_timeout: float | None = 60.0,
        clock: Callable[[], float] | None = None,
        approve_from: RiskLevel | None = None,
    ) -> None:
        if not isinstance(max_risk, RiskLevel):
            raise InvalidInput(f"Sandbox max_risk must be a RiskLevel, got {max_risk!r}", field="max_risk")
        self.max_risk = max_risk
        if approve_from is not None and not isinstance(approve_from, RiskLevel):
            raise InvalidInput(
                f"Sandbox approve_from must be a RiskLevel or None, got {approve_from!r}",
                field="approve_from",
            )
        self.approve_from = approve_from
        self.rate_limit = None if rate_limit is None else self._check_limit("rate_limit", rate_limit)
        self.tool_rate_limits = {
            name: self._check_limit(f"tool_rate_limits[{name!r}]", limit)
            for name, limit in (tool_rate_limits or {}).items()
        }
        self.tool_timeout = (
            None if tool_timeout is None else check_seconds("Sandbox", "tool_timeout", tool_timeout)
        )
        self._clock = clock if clock is not None else anyio.current_time
        self._recent: deque[float] = deque()
        self._recent_by_tool: dict[str, deque[float]] = {}

    @staticmethod
    def _check_limit(field: str, limit: object) -> tuple[int, float]:
        if not isinstance(limit, tuple) or len(limit) != 2:
            raise InvalidInput(
                f"Sandbox {field} must be a (calls, per_seconds) tuple, got {limit!r}", field=field
            )
        return check_int("Sandbox", f"{field} calls", limit[0]), check_seconds(
            "Sandbox", f"{field} seconds", limit[1]
        )

    def needs_approval(self, tool: Tool) -> bool:
        """A person must approve each call of ``tool`` before it runs."""
        return tool.requires_approval or (self.approve_from is not None and tool.risk >= self.approve_from)

    def check(self, tool: Tool) -> None:
        """Admit one call of ``tool`` now (counting it) or raise ``ToolRefused``."""
        self.admit(tool.name, tool.risk)

    def admit(self, name: str, risk: RiskLevel) -> None:
        """Admit one call of the tool ``name`` of level ``risk`` now (counting it against
        the rate limits) or raise ``ToolRefused``: for tools that are not :class:`Tool`
        objects, such as an MCP server's."""
        if risk > self.max_risk:
            raise ToolRefused(
                f"tool {name!r} has risk level {risk.name}, above the sandbox's {self.max_risk.name}"
            )
        if self.rate_limit is None and not self.tool_rate_limits:
            return  # nothing to count
        now = self._clock()
        windows: list[tuple[deque[float], tuple[int, float], str]] = []
        if self.rate_limit is not None:
            windows.append((self._recent, self.rate_limit, "the sandbox"))
        own = self.tool_rate_limits.get(name)
        if own is not None:
            windows.append((self._recent_by_tool.setdefault(name, deque()), own, f"tool {name!r}"))
        for recent, (calls, per), who in windows:
            while recent and recent[0] <= now - per:
                recent.popleft()
            if len(recent) >= calls:
                raise ToolRefused(f"rate limit: {who} allows {calls} calls per {per:g}s")
        for recent, _, _ in windows:
            recent.append(now)

    async def run(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        """One tool call through every check, then the call itself — the one path the
        harness and the pipeline's tool stages share.

        Raises ``RecordError`` (arguments that do not convert; it names the field),
        :class:`ToolRefused` (risk level, rate limit), :class:`ToolTimedOut` (an async tool
        past ``tool_timeout``: async, or a plain function in its worker thread — the thread
        is then abandoned, running on), or whatever the tool raised. A plain ``inline``
        function runs on the loop and cannot be interrupted. Cancellation propagates."""
        validated = tool.validate(arguments)
        if not tool.is_async and tool.inline:
            self.check(tool)
            return tool.fn(**validated) if tool.args is None else tool.fn(validated)
        return await self.guard(tool.name, tool.risk, lambda: tool.call(validated))

    async def guard(self, name: str, risk: RiskLevel, call: Callable[[], Awaitable[T]]) -> T:
        """Run ``call()`` as one call of the tool ``name`` (level ``risk``): admitted by
        :meth:`admit`, cancelled past ``tool_timeout`` (then :class:`ToolTimedOut`). The
        path for tools that are not :class:`Tool` objects (the chat engine's MCP tools).
        Cancellation propagates."""
        self.admit(name, risk)
        if self.tool_timeout is None:
            return await call()
        with self.timeout_scope() as deadline:
            result = await call()
        if deadline.cancelled_caught:
            raise ToolTimedOut(f"tool {name!r} timed out after {self.tool_timeout:g}s")
        return result

    def timeout_scope(self) -> anyio.CancelScope:
        """The scope one tool call runs in (its deadline is ``tool_timeout``)."""
        return anyio.move_on_after(math.inf if self.tool_timeout is None else self.tool_timeout)
