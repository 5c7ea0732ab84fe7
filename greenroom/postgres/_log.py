"""``PostgresLogActor``: the event log in PostgreSQL (``gr_events``), the log actor's
protocol for agents: ``Append`` (replies with the stored ``Event`` once committed),
``Subscribe`` / ``Unsubscribe``.

The visibility policy is the file log's (only the narrator may show text to users; agent
events are internal); a refused event raises :class:`PolicyError` in its asker and nothing
is stored. Appends waiting in the mailbox are committed together, one transaction per
batch, numbered by the same sequence as the task graph's own events, so a reader following
``seq`` with an :class:`EventCursor` (``greenroom events tail --follow``, from any host)
sees every event of every daemon once, in order. Messages sent before ``stop()`` are
written and answered; messages sent after are refused by the kernel. If PostgreSQL is
unreachable the batch's asks fail with :class:`DatabaseError` and nothing of it is stored;
an event PostgreSQL cannot store (:class:`DataRefused`) fails its own ask only, the rest
of its batch being written one by one.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from functools import partial
from typing import Any

import anyio

from ..actors import Actor, ActorRef, ActorStopped, MailboxFull, PendingReply
from ..log import NarratorCapability, admit
from ..messages import Append, Event, Subscribe, Unsubscribe, Visibility
from ._db import Database, DatabaseError, DataRefused
from ._graph import EventCursor, PostgresGraph

logger = logging.getLogger("greenroom.postgres")

_Waiting = tuple[PendingReply | None, tuple[str, str | None, str | None, Visibility, dict[str, Any]]]
"""An admitted append waiting for its commit: its reply, and the event to write."""


class PostgresLogActor(Actor):
    def __init__(
        self, db: Database, *, narrator: NarratorCapability | None = None, max_batch: int = 1024
    ) -> None:
        self.db = db
        self.narrator = narrator
        self.max_batch = max_batch
        self.graph = PostgresGraph()
        self._batch: list[_Waiting] = []
        self._subscribers: list[ActorRef] = []

    async def receive(self, message: Any) -> Any:
        context = self.context
        if isinstance(message, Append):
            pending = context.reply_later()
            visibility = admit(message, self.narrator, pending)
            if visibility is not None:
                self._batch.append(
                    (pending, (message.type, message.task_id, message.agent_id, visibility, message.payload))
                )
        elif isinstance(message, Subscribe):
            self._subscribers.append(message.ref)
        elif isinstance(message, Unsubscribe):
            self._subscribers = [ref for ref in self._subscribers if ref != message.ref]
        else:
            raise TypeError(f"the log actor does not handle {type(message).__name__} messages")
        if self._batch and (context.queued == 0 or len(self._batch) >= self.max_batch):
            await self._flush()
        return None

    async def _flush(self) -> None:
        batch, self._batch = self._batch, []
        await self._write(batch)

    async def _write(
        self,
        batch: list[
            tuple[PendingReply | None, tuple[str, str | None, str | None, Visibility, dict[str, Any]]]
        ],
    ) -> None:
        items = [item for _, item in batch]
        try:
            events: list[Event] = await self.db.run(lambda c: self.graph.append(c, items))
        except DataRefused as error:
            if len(batch) > 1:
                for one in batch:
                    await self._write([one])
                return
            pending = batch[0][0]
            if pending is not None:
                pending.fail(error)
            logger.warning("log: an event was not stored: %s", error)
            return
        except DatabaseError as error:
            for pending, _ in batch:
                if pending is not None:
                    pending.fail(error)
            logger.error("log: %d event(s) not stored: %s", len(batch), error)
            return
        for (pending, _), event in zip(batch, events, strict=True):
            if pending is not None:
                pending.succeed(event)
        for ref in self._subscribers:
            for event in events:
                try:
                    ref.tell(event)
                except (ActorStopped, MailboxFull):
                    break


async def tail_events(
    db: Database, *, after: int = 0, follow: bool = True, last: int | None = None, poll_interval: float = 0.1
) -> AsyncGenerator[Event, None]:
    """The events with ``seq > after`` in order (``last``: only the newest ``last`` of
    those stored now, then new ones); with ``follow``, keep polling until cancelled. An
    :class:`EventCursor` reads them, so nothing is skipped or repeated. Works from any host."""
    if last is not None:
        newest = await db.run(
            lambda c: c.execute(
                "SELECT coalesce(max(seq), 0) FROM gr_events WHERE seq > %s", (after,)
            ).fetchone()[0]
        )
        after = max(after, int(newest) - last)
    cursor = EventCursor(after)
    while True:
        events = await db.run(partial(cursor.read, limit=1000))
        for event in events:
            yield event
        if events:
            continue
        if not follow:
            return
        await anyio.sleep(poll_interval)
