"""A chat request's answer as it is made: :class:`ReplyDelta` s of the assistant's reply,
:class:`ToolStarted` / :class:`ToolFinished` as its tools run, then the
:class:`~greenroom.chat.AgentResult` (``AgentRunner.stream``; ``POST /v1/chat`` with
``"stream": true`` sends them as Server-Sent Events).

The text a client builds from the deltas — each appended, except one marked ``replace``,
which replaces what was shown — is the result's ``response`` (up to leading and trailing
spaces). The model's own words arrive as the model makes them; an answer the engine made
(what the tools did, a confirmation to give, an error) arrives whole, in one ``replace``
delta: a confirmation is never half-sent. A tool event names the tool, never the user.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream

from ._types import AgentResult


class ReplyDelta(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True):
    """A piece of the assistant's reply; ``replace``: the whole reply, instead of what
    was shown so far."""

    text: str
    replace: bool = False


class ToolStarted(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool call of the request began (``tool``: its name)."""

    tool: str


class ToolFinished(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool call of the request ended: whether it succeeded, and how long it took."""

    tool: str
    success: bool
    duration_ms: int


ChatEvent = ReplyDelta | ToolStarted | ToolFinished


class ReplyStreamer:
    """Where a request's events go (an async ``send``), and what the client was shown so
    far: :meth:`settle` sends the final answer whole when it is not what was shown."""

    __slots__ = ("_send", "_shown")

    def __init__(self, send: Callable[[ChatEvent], Awaitable[None]]) -> None:
        self._send = send
        self._shown: list[str] = []

    async def text(self, piece: str) -> None:
        if piece:
            self._shown.append(piece)
            await self._send(ReplyDelta(piece))

    async def event(self, event: ToolStarted | ToolFinished) -> None:
        await self._send(event)

    async def settle(self, answer: str) -> None:
        """Make sure the client shows ``answer``: a ``replace`` delta unless the pieces
        sent already say it."""
        if "".join(self._shown).strip() != answer.strip():
            self._shown = [answer]
            await self._send(ReplyDelta(answer, replace=True))


class _Ended:
    __slots__ = ("error", "result")

    def __init__(self, result: AgentResult | None, error: BaseException | None) -> None:
        self.result = result
        self.error = error


class ChatEvents:
    """The events of one streamed request, in order (``async for``); ``result`` once they
    ended. Iterating raises what the request raised (``TimeoutError`` past its deadline,
    ``InvalidInput`` for a bad message)."""

    def __init__(self, receive: MemoryObjectReceiveStream[Any]) -> None:
        self._receive = receive
        self._result: AgentResult | None = None

    def __aiter__(self) -> ChatEvents:
        return self

    async def __anext__(self) -> ChatEvent:
        if self._result is not None:
            raise StopAsyncIteration
        try:
            item = await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if isinstance(item, _Ended):
            if item.error is not None:
                raise item.error
            self._result = item.result
            raise StopAsyncIteration
        event: ChatEvent = item
        return event

    @property
    def result(self) -> AgentResult:
        """The request's result. Raises ``RuntimeError`` before the events ended."""
        if self._result is None:
            raise RuntimeError("ChatEvents.result before its events ended (read them to the end first)")
        return self._result
