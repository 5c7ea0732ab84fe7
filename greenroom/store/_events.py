"""``EventStore``: where the event log is kept, behind the one log actor.

The log actor (``greenroom.log.LogActor``) applies the visibility policy, batches the
appends waiting in its mailbox and answers each once it is durable; its ``EventStore``
numbers and writes a batch. The embedded store appends lines to ``events.jsonl`` with
one ``fsync``; the PostgreSQL store inserts rows numbered by a sequence in one commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..messages import Event

if TYPE_CHECKING:
    from ..actors import ActorRef

Origin = tuple[int, int]
"""Where an event comes from in a durable journal: (batch seq, position in the batch)."""


@runtime_checkable
class EventStore(Protocol):
    """The event log's storage, written by one actor, one batch at a time."""

    async def open(self, log: ActorRef | None = None) -> None:
        """Take the log (lock, recover a torn end). ``log``: the actor writing through this
        store — a backend whose other parts send their events through the log (the files'
        task graph) learns here where to send them, and may complete the log from their
        journal now. Raises ``DataError`` for a damaged or busy log, leaving it as found."""
        ...

    async def write(
        self, events: Sequence[Event], encoded: Sequence[bytes] | None = None
    ) -> list[Event | ValueError]:
        """Store ``events`` (their ``seq`` is 0; the store numbers them, in order) durably,
        in one go. Returns each one stored, with its ``seq`` — or the ``ValueError`` that
        kept it out (a payload the store cannot hold), which takes no number.

        ``encoded``, when given, is each event's ``payload`` already encoded as JSON (the
        log actor encodes each payload once, as it admits it): the store writes those
        bytes instead of encoding the payload again.

        An event with an ``origin`` comes from a durable journal: one whose origin the store
        holds already is not stored again and comes back as it was (``seq`` 0).

        Raises ``StorageError`` when the batch could not be written: nothing of it is
        acknowledged (``StoreUnavailable``: the store was out of reach, try again later).
        Cancelled, the write still finishes or fails on its own; its result is dropped."""
        ...

    async def close(self) -> None:
        """Release the log. Idempotent."""
        ...
