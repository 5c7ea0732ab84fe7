"""``Outbox``: the embedded task graph's events on their way from its journal to the log.

The journal is the source of truth: each committed batch carries the events its
transitions caused. Once a batch is durable its events are sent to the log actor as
one ``AppendBatch`` (each event's ``origin`` is ``(batch seq, position)``), and kept
here until the log confirms them (``OutboxDelivered``). The snapshot keeps what is
still unconfirmed when the journal is compacted, so nothing in flight is folded away.

The batches form a chain: each names the origin of the last event sent before it
(``after``). The log appends a batch only if it follows what the log has, skips events
it already has (a resend), and answers a gap — a batch lost in a failed write of the
log's — with ``OutboxLost(position)``: the outbox then sends everything after that
position again, in order. On start the supervisor asks the log's position and sends
what the journal has beyond it. Hence, after any crash, every committed transition has
exactly one event.
"""

from __future__ import annotations

from collections import deque

from ..messages._events import OutboxEvent
from ..messages._protocol import AppendBatch

Origin = tuple[int, int]


class OutboxBatch:
    """Events of journal batch ``seq`` from position ``first`` on, not yet confirmed."""

    __slots__ = ("events", "first", "seq")

    def __init__(self, seq: int, first: int, events: list[OutboxEvent]) -> None:
        self.seq = seq
        self.first = first
        self.events = events

    @property
    def last(self) -> Origin:
        return (self.seq, self.first + len(self.events) - 1)


def _beyond(origin: Origin, position: Origin | None) -> bool:
    return position is None or origin > position


class Outbox:
    """The unconfirmed batches, in order, and the chain's last origin sent.

    ``ack`` is the ref the log tells ``OutboxDelivered`` / ``OutboxLost`` to."""

    def __init__(self, ack: object) -> None:
        self._ack = ack
        self._unconfirmed: deque[OutboxBatch] = deque()
        self._sent: Origin | None = None
        self._resending_from: Origin | None = None

    def __len__(self) -> int:
        return len(self._unconfirmed)

    def unconfirmed(self) -> list[OutboxBatch]:
        """What a snapshot must keep: sent (or to send) but not yet confirmed."""
        return list(self._unconfirmed)

    def restore(self, position: Origin | None, batches: list[OutboxBatch]) -> list[AppendBatch]:
        """On start: the log has every event up to ``position``; ``batches`` are what the
        snapshot and the journal hold. Returns what to send, in order."""
        self._unconfirmed.clear()
        for batch in batches:
            self._unconfirmed.append(batch)
        self._trim(position)
        return self._send_all(position)

    def send(self, seq: int, events: list[OutboxEvent]) -> AppendBatch:
        """A batch just made durable: the message that takes its events to the log."""
        batch = OutboxBatch(seq, 0, events)
        self._unconfirmed.append(batch)
        return self._message(batch)

    def confirmed(self, origin: Origin) -> None:
        """The log holds every event up to ``origin`` durably."""
        self._trim(origin)
        if self._resending_from is not None and self._resending_from <= origin:
            self._resending_from = None

    def lost(self, position: Origin | None) -> list[AppendBatch]:
        """The log has nothing after ``position``: send what follows it again, once per
        gap (every batch dropped behind the gap reports the same position)."""
        floor = position if position is not None else (0, -1)
        if self._resending_from is not None and floor <= self._resending_from:
            return []
        self._resending_from = floor
        self._trim(position)
        return self._send_all(position)

    def _trim(self, position: Origin | None) -> None:
        """Drop what the log has (up to ``position``), keeping the rest of a batch."""
        if position is None:
            return
        unconfirmed = self._unconfirmed
        while unconfirmed and not _beyond(unconfirmed[0].last, position):
            unconfirmed.popleft()
        if unconfirmed and unconfirmed[0].seq == position[0] and unconfirmed[0].first <= position[1]:
            head = unconfirmed[0]
            unconfirmed[0] = OutboxBatch(
                head.seq, position[1] + 1, head.events[position[1] + 1 - head.first :]
            )

    def _send_all(self, position: Origin | None) -> list[AppendBatch]:
        self._sent = position
        return [self._message(batch) for batch in self._unconfirmed]

    def _message(self, batch: OutboxBatch) -> AppendBatch:
        message = AppendBatch(batch.seq, tuple(batch.events), batch.first, self._ack, self._sent)
        self._sent = batch.last
        return message
