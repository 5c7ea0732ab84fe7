"""``BoundedLoop``: the one model-and-tool loop every model call of greenroom goes through.

A harness phase and a chat decision are both this loop: ``await loop.call(request)``
once per iteration, the tools of each reply through ``loop.tool`` (a :class:`Tool`) or
``loop.guard`` (any other tool, such as an MCP server's), until the caller has its answer
or ``call`` returns ``None``. Before each model call, in this order:

1. the iteration bound (``max_iterations``: ``None`` past it, ``stop_reason``
   ``"max_iterations"``);
2. the :class:`StopSignal` (``"stop_requested"``);
3. the :class:`TokenBudget`: a call waits for room and is refused once the budget is
   spent (``"budget_exhausted"``).

Each call's usage is spent against the budget (tokens, and money by the model's
:class:`~greenroom.llm.Price`) and counted in a :class:`Spend`. Each tool call passes the
:class:`Sandbox` (risk level, rate limits, timeout). So one set of guarantees holds for
every caller: a shared budget bounds a team and the chat assistant alike, and a stop
reaches both.

Model calls stream (``on_delta`` sees each piece as it arrives); a reply carries its time
to first token and tokens per second, counted in :class:`CallTimings`.

Cancellation: a model call cancelled in flight closes its stream (the server stops
generating), frees its budget reservation and spends nothing; the cancellation
propagates. A wait for budget room is cancelled the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import msgspec

from ..llm import ChatModel, Price, StreamBroken, open_stream
from ..llm._price import price_of
from ..llm._stream import streams
from ..messages import CallTiming, ChatDelta, ChatReply, ChatRequest, Usage
from ._budget import TokenBudget
from ._phase import StopReason
from ._sandbox import Sandbox
from ._stop import StopSignal
from ._timings import CallTimings
from ._tools import RiskLevel, Tool

T = TypeVar("T")

logger = logging.getLogger("greenroom.harness")


class Spend:
    """What model calls used: ``calls``, ``prompt_tokens``, ``completion_tokens`` and
    ``cost`` (in the prices' currency; 0 while the model has no price). ``into``: another
    ``Spend`` that counts the same calls too (a decision's into its engine's total)."""

    __slots__ = ("calls", "completion_tokens", "cost", "into", "prompt_tokens")

    def __init__(self, into: Spend | None = None) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost = 0.0
        self.into = into

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, usage: Usage, cost: float) -> None:
        spend: Spend | None = self
        while spend is not None:
            spend.calls += 1
            spend.prompt_tokens += usage.prompt_tokens
            spend.completion_tokens += usage.completion_tokens
            spend.cost += cost
            spend = spend.into

    def as_dict(self) -> dict[str, Any]:
        """The figures as run summaries, events and the status page show them."""
        return {
            "llm_calls": self.calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cost": round(self.cost, 6),
        }


class BoundedLoop:
    """One bounded run of model calls and tool calls (see the module docstring).

    ``price``: what the model's tokens cost (default: the model's own ``price``).
    ``spend``: where the calls are counted (a new ``Spend`` by default); ``timings``:
    where streamed calls' times to first token and rates are counted. ``call_timeout``:
    seconds per model call (``None``: the model's default). ``max_iterations``: model
    calls at most (``None``: no bound but the budget and the stop signal).
    """

    __slots__ = (
        "budget",
        "call_timeout",
        "iterations",
        "max_iterations",
        "model",
        "price",
        "sandbox",
        "spend",
        "stop",
        "stop_reason",
        "timings",
    )

    def __init__(
        self,
        model: ChatModel,
        *,
        budget: TokenBudget,
        stop: StopSignal,
        sandbox: Sandbox,
        max_iterations: int | None,
        call_timeout: float | None = None,
        price: Price | None = None,
        spend: Spend | None = None,
        timings: CallTimings | None = None,
    ) -> None:
        self.model = model
        self.timings = timings
        self.budget = budget
        self.stop = stop
        self.sandbox = sandbox
        self.max_iterations = max_iterations
        self.call_timeout = call_timeout
        self.price = price if price is not None else price_of(model)
        self.spend = spend if spend is not None else Spend()
        self.iterations = 0
        self.stop_reason: StopReason | None = None
        """Why ``call`` returned ``None`` (``None`` while it has not)."""

    def _must_end(self) -> bool:
        """The iterations are spent or a stop was requested (``stop_reason`` says which)."""
        if self.max_iterations is not None and self.iterations >= self.max_iterations:
            self.stop_reason = "max_iterations"
            return True
        if self.stop.requested:
            self.stop_reason = "stop_requested"
            return True
        return False

    async def call(
        self,
        request: ChatRequest,
        send: Callable[[ChatRequest], Awaitable[ChatReply]] | None = None,
        *,
        on_delta: Callable[[ChatDelta], Awaitable[None]] | None = None,
    ) -> ChatReply | None:
        """The model's reply to ``request``, or ``None`` when the loop must end (see
        ``stop_reason``). The call is streamed (:func:`~greenroom.llm.open_stream`, with
        ``call_timeout``): ``on_delta`` is awaited with each piece as it arrives, and the
        reply carries its :class:`~greenroom.messages.CallTiming` (counted in
        ``timings``). ``send``: how the request reaches the model instead, for a caller
        that sends again on an error (a context overflow) under the same admission. Waits
        while the budget has no room now; model errors propagate, spending nothing.
        Cancelled, the stream is closed at once (the server stops generating)."""
        if self._must_end():
            return None
        budget = self.budget
        admission = budget.try_admit()  # no await when it admits at once
        if admission is False:
            admission = await budget.admit()
        if admission is None:
            self.stop_reason = "budget_exhausted"
            return None
        assert admission is not True
        self.iterations += 1
        try:
            if send is None:
                reply = await self.stream(request, on_delta)
            else:
                reply = await send(request)
        except BaseException:
            admission.release()
            raise
        if reply.timing is not None and self.timings is not None:
            self.timings.add(reply.timing)
        usage = reply.usage
        cost = 0.0 if self.price is None else self.price.cost(usage)
        admission.spend(usage.prompt_tokens + usage.completion_tokens, cost)
        self.spend.add(usage, cost)
        return reply

    async def stream(
        self, request: ChatRequest, on_delta: Callable[[ChatDelta], Awaitable[None]] | None = None
    ) -> ChatReply:
        """One streamed model call, outside the loop's bounds (``call`` is the bounded
        one): each piece to ``on_delta``, then the whole reply. Without ``on_delta`` nobody
        saw the pieces, so a stream that breaks (``StreamBroken``) is asked again whole,
        once; with one, it propagates."""
        if on_delta is None and not streams(self.model):
            started = anyio.current_time()  # a model that cannot stream: its reply, whole
            reply = await self.model.chat(request, timeout=self.call_timeout)
            took = anyio.current_time() - started
            return msgspec.structs.replace(reply, timing=CallTiming(took, took))
        if on_delta is None:
            try:
                async with open_stream(self.model, request, timeout=self.call_timeout) as stream:
                    return await stream.read()
            except StreamBroken as broken:  # nobody saw its pieces: asked again, whole, once
                logger.info("a model stream broke (%s); the call is made again, whole", broken)
                started = anyio.current_time()
                reply = await self.model.chat(request, timeout=self.call_timeout)
                took = anyio.current_time() - started
                return msgspec.structs.replace(reply, timing=CallTiming(took, took))
        async with open_stream(self.model, request, timeout=self.call_timeout) as stream:
            async for delta in stream:
                await on_delta(delta)
        return stream.reply

    def replayed(self, reply: ChatReply) -> ChatReply | None:
        """Count a reply answered from a step journal as a call, under the same bounds as
        :meth:`call` (``None`` when the loop must end). Nothing is spent again: what the
        reply cost when it was recorded is restored into the budget (so its limit holds
        across a crash), not into this loop's ``spend``."""
        if self._must_end():
            return None
        self.iterations += 1
        usage = reply.usage
        cost = 0.0 if self.price is None else self.price.cost(usage)
        self.budget.restore(usage.prompt_tokens + usage.completion_tokens, cost)
        return reply

    async def tool(self, tool: Tool, arguments: dict[str, Any]) -> Any:
        """One call of ``tool`` through the sandbox (``Sandbox.run``: its errors)."""
        return await self.sandbox.run(tool, arguments)

    async def guard(self, name: str, risk: RiskLevel, call: Callable[[], Awaitable[T]]) -> T:
        """One call of a tool that is not a :class:`Tool`, through the sandbox
        (``Sandbox.guard``: its errors)."""
        return await self.sandbox.guard(name, risk, call)
