"""``narrate``: a model's reply shown to users as it is made — the one streamed text that
may reach users besides the chat reply, and only under spec 000's rule (the narrator's
capability)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import anyio

from ..actors import ActorRef
from ..messages import NARRATION, NARRATION_DELTA, Append, ChatDelta, ChatReply
from ._policy import NarratorCapability


class ReplyStream(Protocol):
    """What ``narrate`` reads: a ``greenroom.llm.ChatStream`` (its pieces, then the whole)."""

    def __aiter__(self) -> AsyncIterator[ChatDelta]: ...

    @property
    def reply(self) -> ChatReply: ...


EVERY = 0.05
"""Seconds a narration gathers pieces into one ``NARRATION_DELTA`` event, at most."""


async def narrate(
    log: ActorRef,
    narrator: NarratorCapability,
    stream: ReplyStream,
    *,
    task_id: str | None = None,
    agent_id: str | None = None,
    every: float = EVERY,
) -> ChatReply:
    """Read ``stream`` to its end, appending its text as ``visibility="user"`` events
    under ``narrator`` (the log actor refuses them without it): ``NARRATION_DELTA``
    events (``{"text", "index"}``) as the pieces arrive — gathered for at most ``every``
    seconds each, so a fast model does not write an event a token — then one
    ``NARRATION`` with the whole text (``{"text", "streamed": true}``), the event a reader
    that missed the deltas keeps. Returns the whole reply.

    Each append waits for the log (durable before the next piece is read): a slow log
    slows the narration, never drops from it. Cancelled, the stream is left (its owner
    closes it) and no ``NARRATION`` is appended: the deltas so far stay, as said.
    """
    pending: list[str] = []
    index = 0
    since = anyio.current_time()

    async def flush() -> None:
        nonlocal index, since
        if pending:
            text = "".join(pending)
            pending.clear()
            piece = _user(NARRATION_DELTA, {"text": text, "index": index}, narrator, task_id, agent_id)
            await log.ask(piece, timeout=None)
            index += 1
        since = anyio.current_time()

    async for delta in stream:
        if delta.text:
            pending.append(delta.text)
            if anyio.current_time() - since >= every or index == 0:  # the first piece at once
                await flush()
    await flush()
    reply = stream.reply
    whole = _user(NARRATION, {"text": reply.text, "streamed": True}, narrator, task_id, agent_id)
    await log.ask(whole, timeout=None)
    return reply


def _user(
    kind: str,
    payload: dict[str, Any],
    narrator: NarratorCapability,
    task_id: str | None,
    agent_id: str | None,
) -> Append:
    return Append(
        type=kind, payload=payload, task_id=task_id, agent_id=agent_id, visibility="user", capability=narrator
    )
