"""``ChatModel``: the one interface every chat model adapter implements."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from ..messages import ChatReply, ChatRequest


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: one call in, one reply out.

    ``chat`` raises only :class:`ModelError` subclasses for provider trouble. On
    cancellation it stops at once (the request in flight is abandoned) and re-raises;
    ``timeout`` (seconds, ``None``: the adapter's default) bounds one attempt.
    ``aclose`` releases connections; call it (or use ``async with``) when done.
    """

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply: ...

    async def aclose(self) -> None: ...


class ClosingModel:
    """Mixin: ``async with model:`` closes it with ``aclose()`` on the way out."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
