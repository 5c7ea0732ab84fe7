"""``ChatStream``: a model's reply as it is made — an async iterator of ``ChatDelta`` s.

A model that streams (:class:`StreamingChatModel`) opens one with ``model.stream(request)``,
an async context manager::

    async with model.stream(request) as stream:
        async for delta in stream:
            print(delta.text, end="")
    reply = stream.reply  # the whole ChatReply, with its CallTiming

:func:`open_stream` opens one on any :class:`ChatModel`: a model that cannot stream
answers whole, as one piece (its time to first token is then the whole call).

Leaving the ``async with`` block before the stream ended — a ``break``, an error, a
cancellation — closes the stream at once: a model behind HTTP closes the connection, so
a server that watches for it stops generating. The pieces a stream yields are the
model's own; a stream that breaks after its first byte raises :class:`StreamBroken`
(what arrived is in ``partial``), never a reply cut short silently.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, runtime_checkable

import anyio

from ..messages import CallTiming, ChatDelta, ChatReply, ChatRequest, ModelToolCall, Usage
from ._errors import ModelError
from ._protocol import ChatModel


class StreamBroken(ModelError):
    """A streamed reply broke after its first byte (the connection dropped, the server
    sent an error or stopped answering): not retried, since the server already acted.
    ``partial``: what arrived before the break (its text and whole tool calls)."""

    default_kind = "stream cut"

    def __init__(
        self, message: str, *, partial: ChatReply, status: int | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message, status=status, kind=kind)
        self.partial = partial


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A :class:`ChatModel` that also streams: ``stream(request)`` is an async context
    manager giving a :class:`ChatStream`. ``timeout`` (seconds, ``None``: the adapter's
    default) bounds the wait for the first byte and each silence after it — a long reply
    made steadily is never cut. Retries (when the adapter makes any) happen only before
    the first byte. Cancelled, it closes the stream at once and re-raises."""

    def stream(
        self, request: ChatRequest, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[ChatStream]: ...


Pull = Callable[[], Awaitable[Sequence[ChatDelta]]]
"""How a stream gets its next pieces (an empty sequence: it ended)."""

_PIECE = re.compile(r"\s*\S+\s*|\s+")


def pieces(text: str) -> list[str]:
    """``text`` cut as a tokenizer roughly would, for models that play a stream: one
    piece per word with its spaces (joined, they are ``text`` again)."""
    return _PIECE.findall(text)


class ChatStream:
    """The pieces of one reply, in order (``async for``), then the whole of it.

    ``reply``: the whole :class:`ChatReply` once the stream ended (its ``timing`` set;
    its usage estimated when the model reported none); ``partial``: what arrived so far.
    ``first_token_at`` / ``ended_at``: the event loop's clock when the first piece and the
    last one (its finish reason) arrived (``None`` until then); ``opened_at``: when the
    request was made.

    Made by a model adapter from ``pull``, an async callable returning the next pieces
    (an empty sequence: the stream ended; the last piece carries usage and the finish
    reason). Not for concurrent readers.
    """

    __slots__ = (
        "_calls",
        "_estimate",
        "_finish",
        "_finished_at",
        "_pull",
        "_pulled_at",
        "_queue",
        "_read",
        "_reply",
        "_text",
        "_usage",
        "ended_at",
        "first_token_at",
        "opened_at",
        "request",
        "usage_estimated",
    )

    def __init__(
        self,
        request: ChatRequest,
        pull: Pull,
        *,
        estimate: _Estimate | None = None,
        opened_at: float | None = None,
    ) -> None:
        self.request = request
        self._pull = pull
        self._estimate = estimate
        self._queue: Sequence[ChatDelta] = ()
        self._read = 0
        self._text: list[str] = []
        self._calls: list[ModelToolCall] = []
        self._usage: Usage | None = None
        self._finish: str | None = None
        self._reply: ChatReply | None = None
        self.opened_at = anyio.current_time() if opened_at is None else opened_at
        self.first_token_at: float | None = None
        self.ended_at: float | None = None
        self._pulled_at = self.opened_at
        self._finished_at: float | None = None
        self.usage_estimated = False
        """The reply's usage was estimated here: the model reported none."""

    def __aiter__(self) -> ChatStream:
        return self

    async def __anext__(self) -> ChatDelta:
        queue = self._queue
        read = self._read
        if read >= len(queue):
            if self.ended_at is not None:
                raise StopAsyncIteration
            queue = await self._pull()
            if not queue:
                self._pulled_at = anyio.current_time()
                self._end()
                raise StopAsyncIteration
            self._arrived(queue)
            self._queue = queue
            read = 0
        self._read = read + 1
        return queue[read]

    async def read(self) -> ChatReply:
        """Read the rest of the stream; the whole reply."""
        while self.ended_at is None:
            queue = await self._pull()
            self._read = len(queue)
            if queue:
                self._arrived(queue)
                self._queue = queue
            else:
                self._pulled_at = anyio.current_time()
                self._end()
        return self.reply

    def _arrived(self, queue: Sequence[ChatDelta]) -> None:
        """What one pull brought, counted as it arrives — all of it at once, however far
        a reader goes through it (its pieces arrived together)."""
        now = self._pulled_at = anyio.current_time()
        text = self._text
        for delta in queue:
            if delta.text:
                text.append(delta.text)
            if delta.tool_call is not None:
                self._calls.append(delta.tool_call)
            elif delta.usage is not None or delta.finish_reason is not None:
                if delta.usage is not None:
                    self._usage = delta.usage
                if delta.finish_reason is not None:
                    self._finish = delta.finish_reason
                    self._finished_at = now
        if self.first_token_at is None and (text or self._calls):
            self.first_token_at = now

    def _end(self) -> None:
        # the model's own end: the pieces that finished the reply (else the stream's end)
        now = self._finished_at if self._finished_at is not None else self._pulled_at
        self.ended_at = now
        first = self.first_token_at if self.first_token_at is not None else now
        partial = self.partial
        usage = self._usage
        if usage is None or usage.total_tokens == 0:
            usage = self._estimate(self.request, partial) if self._estimate is not None else Usage()
            self.usage_estimated = True
        decoding = now - first
        tokens = usage.completion_tokens
        rate = (tokens - 1) / decoding if decoding > 0 and tokens > 1 else None
        opened = self.opened_at
        timing = CallTiming(first_token=first - opened, duration=now - opened, tokens_per_second=rate)
        self._reply = ChatReply(partial.text, partial.tool_calls, usage, self._finish or "stop", timing)

    @property
    def partial(self) -> ChatReply:
        """What arrived so far: the text and the whole tool calls (no usage)."""
        return ChatReply("".join(self._text), tuple(self._calls), finish_reason=self._finish or "stop")

    @property
    def reply(self) -> ChatReply:
        """The whole reply. Raises ``RuntimeError`` while the stream has not ended."""
        if self._reply is None:
            raise RuntimeError("ChatStream.reply before the stream ended (read it to its end first)")
        return self._reply


class _Estimate(Protocol):
    def __call__(self, request: ChatRequest, reply: ChatReply) -> Usage: ...


def reply_deltas(reply: ChatReply, *, split: bool = False) -> list[ChatDelta]:
    """A whole reply as the pieces of a stream: its text (one piece — it arrived at once
    — or, ``split``, a piece a word), its tool calls, and a last piece with its usage and
    finish reason."""
    text = reply.text
    deltas = (
        [ChatDelta(text=piece) for piece in pieces(text)] if split else [ChatDelta(text=text)] if text else []
    )
    deltas.extend(ChatDelta(tool_call=call) for call in reply.tool_calls)
    deltas.append(ChatDelta(usage=reply.usage, finish_reason=reply.finish_reason))
    return deltas


def open_stream(
    model: ChatModel, request: ChatRequest, *, timeout: float | None = None
) -> AbstractAsyncContextManager[ChatStream]:
    """``model.stream(request)`` when the model streams; otherwise a stream of its whole
    reply, in one pull (its time to first token is the whole call). Cancellation and
    timeouts: the model's own."""
    if streams(model):
        return model.stream(request, timeout=timeout)  # type: ignore[attr-defined,no-any-return]
    return _whole(model, request, timeout)


def streams(model: object) -> bool:
    """Whether ``model`` has a ``stream`` (a :class:`StreamingChatModel`) — without the
    protocol's ``isinstance``, which costs microseconds a call."""
    return callable(getattr(model, "stream", None))


@asynccontextmanager
async def _whole(model: ChatModel, request: ChatRequest, timeout: float | None) -> AsyncIterator[ChatStream]:
    async def whole() -> Sequence[ChatDelta]:
        return reply_deltas(await model.chat(request, timeout=timeout))

    yield ChatStream(request, once(whole))


def once(fetch: Pull) -> Pull:
    """A pull that gives what ``fetch`` gives, once, then the end (a reply had whole)."""
    fetched = False

    async def pull() -> Sequence[ChatDelta]:
        nonlocal fetched
        if fetched:
            return ()
        fetched = True
        return await fetch()

    return pull


class PlayedModel:
    """What a model that plays its replies shares (``ScriptedModel``, ``RuleBasedModel``):
    ``stream`` plays the reply ``_answer`` gives, ``latency`` to its first piece and
    ``token_latency`` between pieces, on the event loop's clock; ``_whole_time`` is how
    long a whole reply takes (as long as its stream)."""

    latency: float
    token_latency: float

    def _answer(self, request: ChatRequest) -> ChatReply:
        raise NotImplementedError

    def stream(
        self, request: ChatRequest, *, timeout: float | None = None
    ) -> AbstractAsyncContextManager[ChatStream]:
        """The reply played as a stream: ``latency`` to its first piece, then a piece (a
        word, a tool call) every ``token_latency`` seconds. Cancelled before its first
        piece, nothing of the model's is consumed."""
        return played(request, lambda: self._answer(request), self.latency, self.token_latency)

    async def _play_rest(self, reply: ChatReply) -> None:
        """A whole reply's wait after its first piece: as long as its stream's."""
        if self.token_latency:
            await anyio.sleep(play_time(reply, 0.0, self.token_latency))


def play_time(reply: ChatReply, latency: float, token_latency: float) -> float:
    """Seconds a model that plays ``reply`` takes in all: ``latency`` to its first piece,
    ``token_latency`` for each piece after it."""
    count = len(pieces(reply.text)) + len(reply.tool_calls)
    return latency + token_latency * max(0, count - 1)


@asynccontextmanager
async def played(
    request: ChatRequest, answer: Callable[[], ChatReply], latency: float, token_latency: float
) -> AsyncIterator[ChatStream]:
    """A stream that plays a reply as a model would make it: ``latency`` seconds, then
    ``answer()`` (so a stream cancelled before its first piece consumed nothing), its
    first piece, and each later piece (a word, a tool call) ``token_latency`` seconds
    after the one before — on the event loop's clock, so virtual time skips the waits.
    With no ``token_latency`` the reply comes at once: its text in one piece."""
    deltas: list[ChatDelta] | None = None
    sent = 0

    async def pull() -> Sequence[ChatDelta]:
        nonlocal deltas, sent
        if deltas is None:
            if latency:
                await anyio.sleep(latency)
            else:
                await anyio.lowlevel.checkpoint()
            deltas = reply_deltas(answer(), split=bool(token_latency))
        elif sent >= len(deltas):
            return ()
        elif token_latency:
            await anyio.sleep(token_latency)
        if not token_latency:
            sent = len(deltas)
            return deltas
        last = len(deltas) - 1
        end = sent + 1 if sent + 1 < last else last + 1  # the usage piece comes with the last
        batch = deltas[sent:end]
        sent = end
        return batch

    yield ChatStream(request, pull)
