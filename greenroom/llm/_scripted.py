"""``ScriptedModel``: a deterministic chat model for offline runs, examples and tests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import AbstractAsyncContextManager

import anyio

from .._checks import check_seconds
from .._errors import GreenroomError
from ..messages import ChatReply, ChatRequest, Usage
from ._price import Price
from ._protocol import ClosingModel
from ._stream import ChatStream, PlayedModel

Script = Iterable[ChatReply | str] | Callable[[ChatRequest], ChatReply | str]


class ScriptExhausted(GreenroomError):
    """A scripted model was called more times than its script has replies."""


def estimate_usage(request: ChatRequest, reply: ChatReply) -> Usage:
    """A deterministic token count: about four characters a token, plus a little per
    message and per tool call (what a real tokenizer roughly does)."""
    prompt = sum(4 + len(m.content or "") // 4 + 8 * len(m.tool_calls) for m in request.messages)
    completion = math.ceil(len(reply.text) / 4) + 12 * len(reply.tool_calls)
    return Usage(prompt_tokens=prompt, completion_tokens=max(1, completion))


class ScriptedModel(PlayedModel, ClosingModel):
    """Answers from a script instead of a provider.

    ``script``: replies handed out in order (a ``str`` is a text-only reply), or a
    function of the request returning the reply. A reply whose usage is all zero gets
    :func:`estimate_usage`. ``latency``: seconds each call sleeps before answering
    (cancellable, like a real call); ``token_latency``: seconds between the pieces of a
    streamed reply (a whole reply takes as long as its stream). Every request is kept in
    ``requests``, in order. It streams (``stream``), on the event loop's clock.

    Raises :class:`ScriptExhausted` when a listed script has no reply left. On
    cancellation (during the simulated latency) nothing is consumed from the script.
    """

    def __init__(
        self,
        script: Script,
        *,
        latency: float = 0.0,
        token_latency: float = 0.0,
        price: Price | None = None,
    ) -> None:
        self.latency = check_seconds("ScriptedModel", "latency", latency, zero_ok=True)
        self.token_latency = check_seconds("ScriptedModel", "token_latency", token_latency, zero_ok=True)
        self.price = price
        """A price to count its (estimated) usage at, as a real model's would be."""
        if callable(script):
            self._respond: Callable[[ChatRequest], ChatReply | str] | None = script
            self._replies: list[ChatReply] = []
        else:
            self._respond = None
            self._replies = [self._reply(item, i) for i, item in enumerate(script)]
        self._next = 0
        self.requests: list[ChatRequest] = []
        self.closed = False

    @staticmethod
    def _reply(item: object, index: int) -> ChatReply:
        if isinstance(item, str):
            return ChatReply(text=item)
        if isinstance(item, ChatReply):
            return item
        raise TypeError(f"ScriptedModel script[{index}] must be a ChatReply or a str, got {item!r}")

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        if self.closed:
            raise RuntimeError("ScriptedModel.chat() after aclose()")
        if self.latency:
            await anyio.sleep(self.latency)
        reply = self._answer(request)
        await self._play_rest(reply)
        return reply

    def stream(
        self, request: ChatRequest, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[ChatStream]:
        """The next reply played as a stream (``PlayedModel.stream``). Cancelled before its
        first piece, nothing is consumed from the script."""
        if self.closed:
            raise RuntimeError("ScriptedModel.stream() after aclose()")
        return super().stream(request, timeout=timeout)

    def _answer(self, request: ChatRequest) -> ChatReply:
        self.requests.append(request)
        if self._respond is not None:
            reply = self._reply(self._respond(request), len(self.requests) - 1)
        else:
            if self._next >= len(self._replies):
                raise ScriptExhausted(
                    f"ScriptedModel has {len(self._replies)} replies; call {self._next + 1} found none left"
                )
            reply = self._replies[self._next]
            self._next += 1
        if reply.usage.total_tokens == 0:
            reply = ChatReply(
                text=reply.text,
                tool_calls=reply.tool_calls,
                usage=estimate_usage(request, reply),
                finish_reason=reply.finish_reason,
            )
        return reply

    @property
    def remaining(self) -> int:
        """Replies left in a listed script (``0`` for a function script)."""
        return len(self._replies) - self._next

    async def aclose(self) -> None:
        self.closed = True
